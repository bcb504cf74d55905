//! The SwiGLU feed-forward network of LLaMA: `down(silu(gate(x)) * up(x))`.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::silu;
use burn::tensor::{Device, Tensor};

use super::init::normal_linear;

/// SwiGLU feed-forward. Shapes: `[batch, seq, d_model] -> [batch, seq, d_model]`.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `d_model -> d_ff`, through SiLU.
    pub gate_proj: Linear,
    /// `d_model -> d_ff`.
    pub up_proj: Linear,
    /// `d_ff -> d_model`.
    pub down_proj: Linear,
}

impl FeedForward {
    /// Projections without bias, each initialised `N(0, std)` with its own std.
    pub fn init(d_model: usize, d_ff: usize, gate_up_std: f64, down_std: f64, device: &Device) -> Self {
        Self {
            gate_proj: normal_linear(LinearConfig::new(d_model, d_ff).with_bias(false), gate_up_std, device),
            up_proj: normal_linear(LinearConfig::new(d_model, d_ff).with_bias(false), gate_up_std, device),
            down_proj: normal_linear(LinearConfig::new(d_ff, d_model).with_bias(false), down_std, device),
        }
    }

    /// Applies the network.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let gate = silu(self.gate_proj.forward(x.clone())); // [.., d_ff]
        self.down_proj.forward(gate * self.up_proj.forward(x))
    }
}
