//! How close each block is to the identity map: the relative size of its update.

use burn::tensor::Tensor;

use crate::model::ForwardTrace;

/// Mean over tokens of `||y - x|| / ||x||` for a block's input `x` and output `y`
/// (`[batch, seq, d_model]` each): 0 for a block that changes nothing.
pub fn update_ratio(input: &Tensor<3>, output: &Tensor<3>) -> f64 {
    let update = (output.clone() - input.clone()).powf_scalar(2.0).sum_dim(2).sqrt();
    let size = input.clone().powf_scalar(2.0).sum_dim(2).sqrt().clamp_min(1e-12);
    (update / size).mean().into_scalar::<f64>()
}

/// [`update_ratio`] of every block of a trace (`n_layers` values, block 1 first).
pub fn identity_ratios(trace: &ForwardTrace) -> Vec<f64> {
    trace.hidden.windows(2).map(|pair| update_ratio(&pair[0], &pair[1])).collect()
}
