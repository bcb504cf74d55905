//! What the multi-tensor optimiser kernels take ([`multi_tensor`](super::multi_tensor)): tensors
//! of any rank, and AdamW's settings per tensor.

use burn::backend::tensor::FloatTensor;
use burn::backend::Dispatch;
use burn::tensor::Tensor;

/// AdamW's settings for one tensor of a step, in f32 as the kernels take them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamTensorSettings {
    /// The learning rate.
    pub lr: f32,
    /// `1 - lr weight_decay`: what the parameter is multiplied by before the update.
    pub decay: f32,
    /// `1 - beta_1^t`, `t` the step (from 1).
    pub bias_1: f32,
    /// `1 - beta_2^t`.
    pub bias_2: f32,
}

/// A tensor of any rank, as the multi-tensor ops take it.
pub type AnyTensor = FloatTensor<Dispatch>;

/// Turns a tensor of any rank into an [`AnyTensor`].
pub fn any<const D: usize>(tensor: Tensor<D>) -> AnyTensor {
    tensor.into_dispatch()
}
