//! The SwiGLU feed-forward network of LLaMA: `down(silu(gate(x)) * up(x))`.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};

use super::linear::{normal_linear, project};
use crate::fused;
use crate::fused::mixed::in_compute_dtype;

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

/// Sizes and init of a [`FeedForward`]: projections without bias, `N(0, std)` each.
#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    /// Model width.
    pub d_model: usize,
    /// Hidden width.
    pub d_ff: usize,
    /// Init std of the gate and up projections.
    #[config(default = 0.02)]
    pub gate_up_std: f64,
    /// Init std of the down projection.
    #[config(default = 0.02)]
    pub down_std: f64,
}

impl FeedForwardConfig {
    /// Builds the projections on `device`.
    pub fn init(&self, device: &Device) -> FeedForward {
        let linear = |d_in, d_out, std| normal_linear(LinearConfig::new(d_in, d_out).with_bias(false), std, device);
        FeedForward {
            gate_proj: linear(self.d_model, self.d_ff, self.gate_up_std),
            up_proj: linear(self.d_model, self.d_ff, self.gate_up_std),
            down_proj: linear(self.d_ff, self.d_model, self.down_std),
        }
    }
}

impl FeedForward {
    /// Applies the network: the gate and up projections as one matrix product
    /// ([`fused::linear_packed`]), gated in place by [`fused::swiglu_packed`]. Under mixed
    /// precision the input is cast to the half type once, the products and the gating run in it,
    /// and the output comes back in `x`'s type.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        in_compute_dtype(x, |x| {
            if self.gate_proj.bias.is_some() || self.up_proj.bias.is_some() {
                // Layers given biases by hand take Burn's `Linear`, one product each.
                let gate = project(&self.gate_proj, x.clone()); // [.., d_ff]
                return project(&self.down_proj, fused::swiglu(gate, project(&self.up_proj, x)));
            }
            let weights = [self.gate_proj.weight.val(), self.up_proj.weight.val()];
            let gate_up = fused::linear_packed(x, &weights); // [.., 2 d_ff]
            project(&self.down_proj, fused::swiglu_packed(gate_up))
        })
    }
}
