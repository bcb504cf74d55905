//! The overhead of LayerNorm Scaling: forward and forward+backward time of `RmsNormScaling` and
//! `LayerNormScaling` against Burn's `RmsNorm` and `LayerNorm`.
//!
//! `cargo bench --bench norm_overhead` (device: `LNS_DEVICE`, default `auto`).

mod common;

use burn::nn::{LayerNormConfig, RmsNormConfig};
use burn::tensor::{Distribution, Tensor};
use common::{bench_device, median_ms};
use layernorm_scaling::{LayerNormScalingConfig, RmsNormScalingConfig};

fn main() {
    let device = bench_device();
    let shape = [8, 256, 768]; // batch, seq, d_model: the 130M model's width
    let d = shape[2];
    println!("norm over {shape:?} on {device:?}; median of 20 runs");
    println!("{:<18} {:>12} {:>18}", "module", "forward ms", "forward+backward ms");

    let rms = RmsNormConfig::new(d).with_epsilon(1e-6).init(&device.clone().autodiff());
    let rms_scaling = RmsNormScalingConfig::new(d, 7).with_epsilon(1e-6).init(&device.clone().autodiff()).unwrap();
    let ln = LayerNormConfig::new(d).init(&device.clone().autodiff());
    let ln_scaling = LayerNormScalingConfig::new(d, 7).init(&device.clone().autodiff()).unwrap();
    let input = Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), &device.clone().autodiff());

    let mut results = Vec::new();
    let mut run = |name: &str, forward: &dyn Fn(Tensor<3>) -> Tensor<3>| {
        let fwd = median_ms(3, 20, || {
            let _ = forward(input.clone().without_autodiff());
            device.sync().unwrap();
        });
        let fwd_bwd = median_ms(3, 20, || {
            let x = input.clone().require_grad();
            let _ = forward(x).sum().backward();
            device.sync().unwrap();
        });
        println!("{name:<18} {fwd:>12.3} {fwd_bwd:>18.3}");
        results.push((fwd, fwd_bwd));
    };
    run("RmsNorm", &|x| rms.forward(x));
    run("RmsNormScaling", &|x| rms_scaling.forward(x));
    run("LayerNorm", &|x| ln.forward(x));
    run("LayerNormScaling", &|x| ln_scaling.forward(x));
    let overhead = |plain: (f64, f64), scaled: (f64, f64)| {
        (100.0 * (scaled.0 / plain.0 - 1.0), 100.0 * (scaled.1 / plain.1 - 1.0))
    };
    let (f, b) = overhead(results[0], results[1]);
    println!("RmsNormScaling overhead:   forward {f:+.1}%, forward+backward {b:+.1}%");
    let (f, b) = overhead(results[2], results[3]);
    println!("LayerNormScaling overhead: forward {f:+.1}%, forward+backward {b:+.1}%");
}
