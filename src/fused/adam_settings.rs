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
    /// The step `t` (from 1). After steps skipped for an f16 overflow (the factor's second
    /// element), the kernel recomputes the bias corrections for `t` minus them.
    pub time: f32,
}

/// How a dynamic loss scale moves (f16 mixed precision, as PyTorch's `GradScaler`): halved on an
/// overflow (the step skipped) down to `min_scale`, doubled after `growth_interval` good steps in a
/// row. At `min_scale` an overflow is a divergence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleRule {
    /// Good steps in a row after which the scale doubles.
    pub growth_interval: usize,
    /// The lowest scale.
    pub min_scale: f64,
}

/// A tensor of any rank, as the multi-tensor ops take it.
pub type AnyTensor = FloatTensor<Dispatch>;

/// Turns a tensor of any rank into an [`AnyTensor`].
pub fn any<const D: usize>(tensor: Tensor<D>) -> AnyTensor {
    tensor.into_dispatch()
}
