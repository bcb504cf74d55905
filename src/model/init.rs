//! Weight initialisation helpers: every projection is `N(0, std)`, biases zero.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::Device;

/// A linear layer whose weight is drawn from `N(0, std)` (and whose bias, if any, is zero).
pub(crate) fn normal_linear(config: LinearConfig, std: f64, device: &Device) -> Linear {
    let mut linear = config.with_initializer(Initializer::Normal { mean: 0.0, std }).init(device);
    if let Some(bias) = linear.bias.take() {
        let [d] = bias.shape().dims();
        linear.bias = Some(Initializer::Zeros.init([d], device));
    }
    linear
}
