//! Checks of one op's fused path against its reference path: outputs and every input's gradient.

use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use layernorm_scaling::fused::{with_path, OpPath};

use super::values;

/// Reproducible values in about `[-2, 2]`, the same on every backend.
pub fn seeded<const D: usize>(shape: [usize; D], seed: u64, device: &Device) -> Tensor<D> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_data(TensorData::new(data, shape), device)
}

/// Asserts `|a - b| <= tol * (1 + |b|)` element-wise, naming the worst element.
pub fn assert_close(what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    let (worst, at) = a
        .iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
        .enumerate()
        .fold((0.0f32, 0), |(worst, at), (i, e)| if e > worst || e.is_nan() { (e, i) } else { (worst, at) });
    assert!(worst <= tol, "{what}: element {at} differs: {} vs {} (relative {worst}, tolerance {tol})", a[at], b[at]);
}

/// Runs `op` on `inputs` (made trainable) on `path`: returns the output and the gradient of every
/// input for the upstream gradient `weights` (the loss is `sum(out * weights)`).
pub fn on_path<const D: usize, const O: usize>(
    path: OpPath,
    inputs: &[Tensor<D>],
    weights: &Tensor<O>,
    op: &impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    with_path(path, || {
        let tracked: Vec<Tensor<D>> = inputs.iter().map(|t| t.clone().autodiff().require_grad()).collect();
        let output = op(tracked.clone());
        let grads = (output.clone() * weights.clone().autodiff()).sum().backward();
        let grads = tracked.iter().map(|t| values(&t.grad(&grads).expect("every input gets a gradient"))).collect();
        (values(&output), grads)
    })
}

/// [`on_path`] on both paths, fused first.
pub fn both_paths<const D: usize, const O: usize>(
    inputs: &[Tensor<D>],
    weights: &Tensor<O>,
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) -> [(Vec<f32>, Vec<Vec<f32>>); 2] {
    [OpPath::Fused, OpPath::Reference].map(|path| on_path(path, inputs, weights, &op))
}

/// Compares both paths' outputs and gradients.
pub fn check<const D: usize, const O: usize>(
    what: &str,
    inputs: &[Tensor<D>],
    weights: &Tensor<O>,
    tol: f32,
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    let [(fused_out, fused_grads), (reference_out, reference_grads)] = both_paths(inputs, weights, op);
    assert_close(&format!("{what}: output"), &fused_out, &reference_out, tol);
    for (i, (fused, reference)) in fused_grads.iter().zip(&reference_grads).enumerate() {
        assert_close(&format!("{what}: gradient of input {i}"), fused, reference, tol);
    }
}

/// f32 tolerance: 1e-5 on the CPU backends; the software Vulkan adapter's `exp` and reductions
/// differ from the CPU's by more.
pub fn tolerance(backend: &str) -> f32 {
    if backend == "wgpu-cpu" {
        1e-4
    } else {
        1e-5
    }
}

/// [`check`] of the fused path on `inputs` cast to `half` against the reference path on the same
/// values in f32.
pub fn half_check<const D: usize, const O: usize>(
    what: &str,
    inputs: &[Tensor<D>],
    weights: &Tensor<O>,
    half: FloatDType,
    tol: f32,
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    let halves: Vec<Tensor<D>> = inputs.iter().map(|t| t.clone().cast(half)).collect();
    let rounded: Vec<Tensor<D>> = halves.iter().map(|t| t.clone().cast(DType::F32)).collect();
    let weights = weights.clone().cast(half);
    let (fused_out, fused_grads) = on_path(OpPath::Fused, &halves, &weights, &op);
    let (reference_out, reference_grads) = on_path(OpPath::Reference, &rounded, &weights.cast(DType::F32), &op);
    assert_close(&format!("{what}: output"), &fused_out, &reference_out, tol);
    for (i, (fused, reference)) in fused_grads.iter().zip(&reference_grads).enumerate() {
        assert_close(&format!("{what}: gradient of input {i}"), fused, reference, tol);
    }
}
