//! Training throughput: forward, backward and an AdamW step of the tiny and 9m presets,
//! under Pre-LN and LNS, in tokens per second.
//!
//! `cargo bench --bench train_step` (device: `LNS_DEVICE`, default `auto`).

mod common;

use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Distribution, Int, Tensor};
use common::{bench_device, median_ms};
use layernorm_scaling::model::cross_entropy;
use layernorm_scaling::{LlamaConfig, NormScheme};

fn main() {
    let device = bench_device().autodiff();
    let (batch, seq) = (8, 128);
    println!("train step (batch {batch} x seq {seq}) on {device:?}; median of 10 steps");
    println!("{:<6} {:<8} {:>12} {:>10} {:>12}", "preset", "scheme", "parameters", "step ms", "tokens/s");
    for preset in ["tiny", "9m"] {
        for scheme in [NormScheme::PreLn, NormScheme::default()] {
            let config = LlamaConfig::preset(preset).unwrap().with_norm_scheme(scheme.clone());
            let mut model = Some(config.init(&device).unwrap());
            let mut optim = AdamWConfig::new().init();
            let tokens: Tensor<2, Int> =
                Tensor::<2>::random([batch, seq + 1], Distribution::Uniform(0.0, config.vocab_size as f64), &device)
                    .int();
            let ms = median_ms(2, 10, || {
                let current = model.take().unwrap();
                let logits = current.forward(tokens.clone().narrow(1, 0, seq));
                let loss = cross_entropy(logits, tokens.clone().narrow(1, 1, seq));
                let grads = GradientsParams::from_grads(loss.backward(), &current);
                model = Some(optim.step(1e-3, current, grads));
                device.sync().unwrap();
            });
            let tokens_per_s = (batch * seq) as f64 / (ms / 1e3);
            println!(
                "{preset:<6} {:<8} {:>12} {ms:>10.1} {tokens_per_s:>12.0}",
                scheme.to_string(),
                config.num_params()
            );
        }
    }
}
