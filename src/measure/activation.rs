//! The largest absolute activation of each layer: the margin to the largest finite value of a
//! low-precision format (fp16: 65504), which Peri-LN reports growing under Pre-LN.

use burn::tensor::Tensor;

use crate::model::ForwardTrace;

/// The largest finite value of IEEE half precision (fp16); bf16 reaches about `3.4e38`.
pub const FP16_MAX: f64 = 65504.0;

/// `max |x|` over every element of `x` (any shape).
pub fn max_abs<const D: usize>(x: &Tensor<D>) -> f64 {
    x.clone().abs().max().into_scalar::<f32>() as f64
}

/// `n_layers + 1` values: the largest absolute value of the embedding output and of each block's
/// output in `trace`.
pub fn max_abs_activations(trace: &ForwardTrace) -> Vec<f64> {
    trace.hidden.iter().map(max_abs).collect()
}
