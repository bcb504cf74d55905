//! The model's linear layers applied through [`fused::linear`] (one matrix product per pass,
//! whatever the batch dimensions); a layer with a bias keeps Burn's `Linear::forward`.

use burn::nn::Linear;
use burn::tensor::Tensor;

use crate::fused;

/// `layer` applied to `x: [..., d_in]` -> `[..., d_out]`.
pub(crate) fn project<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    match layer.bias {
        Some(_) => layer.forward(x),
        None => fused::linear(x, layer.weight.val()),
    }
}
