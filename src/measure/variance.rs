//! Layer-wise output variance (the paper's figure 1): how the hidden state grows with depth.

use burn::tensor::Tensor;

use crate::model::ForwardTrace;

/// Variance over the features of each token of `x: [batch, seq, d_model]` (with Bessel's
/// correction, as `torch.var`), averaged over tokens.
pub fn token_variance(x: &Tensor<3>) -> f64 {
    x.clone().var(2).mean().into_scalar::<f64>()
}

/// The variances of one forward pass, per layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerVariances {
    /// `n_layers + 1` values: the embedding output (index 0) and the output of each block.
    pub block_output: Vec<f64>,
    /// `n_layers` values: the state after each block's attention sub-layer and its residual.
    pub after_attention: Vec<f64>,
}

/// The variance of every hidden state of a trace.
pub fn layer_variances(trace: &ForwardTrace) -> LayerVariances {
    LayerVariances {
        block_output: trace.hidden.iter().map(token_variance).collect(),
        after_attention: trace.after_attention.iter().map(token_variance).collect(),
    }
}
