//! The model's linear layers: made with `N(0, std)` weights and zero biases, and applied through
//! [`fused::linear`] (one matrix product per pass, whatever the batch dimensions); a layer with a
//! bias keeps Burn's `Linear::forward`.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};

use crate::fused;
use crate::fused::mixed::cast_around;

/// A linear layer whose weight is drawn from `N(0, std)` (and whose bias, if any, is zero).
pub(crate) fn normal_linear(config: LinearConfig, std: f64, device: &Device) -> Linear {
    let mut linear = config.with_initializer(Initializer::Normal { mean: 0.0, std }).init(device);
    if let Some(bias) = linear.bias.take() {
        let [d] = bias.shape().dims();
        linear.bias = Some(Initializer::Zeros.init([d], device));
    }
    linear
}

/// `layer` applied to `x: [..., d_in]` -> `[..., d_out]`, in `x`'s type. A layer with a bias
/// (Burn's `Linear::forward`) computes in its weight's type, `x` cast to it and back.
pub(crate) fn project<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    match layer.bias {
        Some(_) => cast_around(x, layer.weight.val().dtype(), |x| layer.forward(x)),
        None => fused::linear(x, layer.weight.val()),
    }
}
