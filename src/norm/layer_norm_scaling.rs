//! `LayerNormScaling`: Burn's `LayerNorm` whose output is multiplied by `1/sqrt(layer)`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::{assert_shape, Device, Tensor};

use super::depth_scale::{check_norm_config, factor, scaled_weight};
use super::scaled_norm::ScaledNorm;
use crate::{config_error::ConfigError, fused};

/// Configuration of [`LayerNormScaling`].
#[derive(Config, Debug)]
pub struct LayerNormScalingConfig {
    /// The size of the last (feature) dimension.
    pub d_model: usize,
    /// The 1-based number of the layer this norm belongs to; the output is scaled by `1/sqrt(layer)`.
    pub layer: usize,
    /// Added to the variance for numerical stability.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Whether the norm has a learnable bias `beta` (as Burn's `LayerNorm`, default true).
    #[config(default = true)]
    pub bias: bool,
}

impl LayerNormScalingConfig {
    /// Builds the module with `gamma = 1` and `beta = 0`.
    ///
    /// Fails for layer 0, `d_model = 0` or a non-positive epsilon.
    pub fn init(&self, device: &Device) -> Result<LayerNormScaling, ConfigError> {
        check_norm_config(self.d_model, self.layer, self.epsilon)?;
        Ok(LayerNormScaling {
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: self.bias.then(|| Initializer::Zeros.init([self.d_model], device)),
            epsilon: self.epsilon,
            scale: factor(self.layer),
        })
    }
}

/// Layer normalisation with LayerNorm Scaling:
///
/// `Y = ((X - mean) / sqrt(var + eps) * gamma + beta) / sqrt(l)`
///
/// A drop-in replacement for Burn's `LayerNorm`: the same parameters (`gamma`, optional `beta`)
/// under the same names, so a record of one loads into the other. The factor (from the layer
/// number in the config, or a layer plan's) is a plain field, not state that a reload could lose.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct LayerNormScaling {
    /// The learnable per-feature scale, `[d_model]`, initialised to 1.
    pub gamma: Param<Tensor<1>>,
    /// The learnable per-feature shift, `[d_model]`, initialised to 0.
    pub beta: Option<Param<Tensor<1>>>,
    /// Added to the variance for numerical stability.
    pub epsilon: f64,
    /// The factor on the output, folded into the per-feature weights: `1/sqrt(layer)` for a norm
    /// built from a layer number, a layer plan's `norm_output_scale` in a model, 1 for a plain norm.
    pub(super) scale: f64,
}

impl LayerNormScaling {
    /// The LNS factor applied to the output: `1/sqrt(layer)`, 1 for a plain norm.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Normalises over the last dimension. Shapes: `[..., d_model] -> [..., d_model]`.
    ///
    /// Half-precision inputs are normalised in f32 and cast back. One fused op
    /// ([`fused::layer_norm`]) with its own backward, which keeps each row's mean and inverse
    /// standard deviation.
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model`, as Burn's `LayerNorm` (the message names both sizes).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(x, [.., d_model]);
        let gamma = scaled_weight(self.gamma.val(), self.scale);
        let beta = match &self.beta {
            Some(beta) => scaled_weight(beta.val(), self.scale),
            None => gamma.zeros_like(),
        };
        fused::layer_norm(x, gamma, beta, self.epsilon)
    }
}

/// The kind's facts and its part in [`Norm`](super::Norm) (its inherent methods do the work).
impl ScaledNorm for LayerNormScaling {
    const NAME: &'static str = "LayerNorm";
    const DEFAULT_ALPHA: Option<f64> = None;

    fn parameter_count(d_model: usize) -> usize {
        2 * d_model
    }

    fn build(d_model: usize, epsilon: f64, _alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError> {
        // Built for layer 1 (no factor), then given the factor itself.
        Ok(LayerNormScaling { scale, ..LayerNormScalingConfig::new(d_model, 1).with_epsilon(epsilon).init(device)? })
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        LayerNormScaling::forward(self, x)
    }

    fn scale(&self) -> f64 {
        LayerNormScaling::scale(self)
    }

    fn with_weights_of(mut self, other: &Self) -> Self {
        self.gamma = other.gamma.clone();
        self.beta = other.beta.clone();
        self
    }
}

impl ModuleDisplay for LayerNormScaling {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model] = self.gamma.shape().dims();
        content
            .add("d_model", &d_model)
            .add("epsilon", &self.epsilon)
            .add("bias", &self.beta.is_some())
            .add("scale", &self.scale)
            .optional()
    }
}
