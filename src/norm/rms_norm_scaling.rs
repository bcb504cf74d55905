//! `RmsNormScaling`: Burn's `RmsNorm` whose output is multiplied by `1/sqrt(layer)`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::{Initializer, RmsNorm};
use burn::tensor::{assert_shape, DType, Device, Tensor};

use super::depth_scale::{check_norm_config, factor};
use super::scaled_norm::ScaledNorm;
use crate::{config_error::ConfigError, fused};

/// Configuration of [`RmsNormScaling`].
#[derive(Config, Debug)]
pub struct RmsNormScalingConfig {
    /// The size of the last (feature) dimension.
    pub d_model: usize,
    /// The 1-based number of the layer this norm belongs to; the output is scaled by `1/sqrt(layer)`.
    pub layer: usize,
    /// Added to the mean square for numerical stability (Burn's default; LLaMA uses 1e-6).
    #[config(default = 1e-5)]
    pub epsilon: f64,
}

impl RmsNormScalingConfig {
    /// Builds the module with `gamma = 1`.
    ///
    /// Fails for layer 0, `d_model = 0` or a non-positive epsilon.
    pub fn init(&self, device: &Device) -> Result<RmsNormScaling, ConfigError> {
        check_norm_config(self.d_model, self.layer, self.epsilon)?;
        Ok(RmsNormScaling {
            gamma: Initializer::Ones.init([self.d_model], device),
            epsilon: self.epsilon,
            scale: factor(self.layer),
        })
    }
}

/// RMS normalisation with LayerNorm Scaling:
///
/// `Y = X / sqrt(mean(X^2) + eps) * gamma / sqrt(l)`
///
/// A drop-in replacement for Burn's [`RmsNorm`]: the same parameter (`gamma`) under the same
/// name, so a record of one loads into the other. The factor (from the layer number in the
/// config, or a layer plan's) is a plain field, not a parameter or a record entry: no reload or
/// re-initialisation can lose or change it.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct RmsNormScaling {
    /// The learnable per-feature scale, `[d_model]`, initialised to 1.
    pub gamma: Param<Tensor<1>>,
    /// Added to the mean square for numerical stability.
    pub epsilon: f64,
    /// The factor on the output, applied with the per-feature weights: `1/sqrt(layer)` for a norm
    /// built from a layer number, a layer plan's `norm_output_scale` in a model, 1 for a plain norm.
    pub(super) scale: f64,
}

impl RmsNormScaling {
    /// Wraps an existing `RmsNorm` (keeping its `gamma`) as the norm of a 1-based `layer`.
    pub fn from_rms_norm(norm: RmsNorm, layer: usize) -> Result<Self, ConfigError> {
        let [d_model] = norm.gamma.shape().dims();
        check_norm_config(d_model, layer, norm.epsilon)?;
        Ok(Self { gamma: norm.gamma, epsilon: norm.epsilon, scale: factor(layer) })
    }

    /// The plain `RmsNorm` with the same `gamma` (the depth factor is dropped).
    pub fn into_rms_norm(self) -> RmsNorm {
        RmsNorm { gamma: self.gamma, epsilon: self.epsilon }
    }

    /// The LNS factor applied to the output: `1/sqrt(layer)`, 1 for a plain norm.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Normalises over the last dimension. Shapes: `[..., d_model] -> [..., d_model]`.
    ///
    /// The mean square is accumulated in f32 whatever the input's precision. One fused op
    /// ([`fused::rms_norm`]) with its own backward, which keeps the inverse RMS of each row.
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model`, as Burn's `RmsNorm` (the message names both sizes).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(x, [.., d_model]);
        // The factor goes to the kernel, which applies it with gamma: folding it into gamma first
        // (as the other kinds do) would cost two more launches per norm on a GPU.
        fused::rms_norm(x, self.gamma.val(), self.epsilon, self.scale)
    }

    /// The residual sum `x = base + branch` and its norm, `(x, forward(x))`, in one pass
    /// ([`fused::residual_rms_norm`]): how a Pre-LN block adds a sub-layer's output and
    /// normalises the stream for the next. Shapes: `base, branch: [..., d_model]` -> two of that.
    ///
    /// # Panics
    ///
    /// As [`forward`](Self::forward), and if `base` and `branch` differ in shape.
    pub fn forward_residual<const D: usize>(&self, base: Tensor<D>, branch: Tensor<D>) -> (Tensor<D>, Tensor<D>) {
        let dtype = base.dtype();
        self.forward_residual_in(base, branch, dtype)
    }

    /// [`forward_residual`](Self::forward_residual) with the norm's output made in `dtype` (under
    /// mixed precision, the half type of the sub-layer it feeds): [`fused::residual_rms_norm_in`].
    pub fn forward_residual_in<const D: usize>(
        &self,
        base: Tensor<D>,
        branch: Tensor<D>,
        dtype: DType,
    ) -> (Tensor<D>, Tensor<D>) {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(base, [.., d_model]);
        fused::residual_rms_norm_in(base, branch, self.gamma.val(), self.epsilon, self.scale, dtype)
    }
}

/// The kind's facts and its part in [`Norm`](super::Norm) (its inherent methods do the work).
impl ScaledNorm for RmsNormScaling {
    const NAME: &'static str = "RMSNorm";
    const DEFAULT_ALPHA: Option<f64> = None;

    fn parameter_count(d_model: usize) -> usize {
        d_model
    }

    fn build(d_model: usize, epsilon: f64, _alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError> {
        // Built for layer 1 (no factor), then given the factor itself.
        Ok(RmsNormScaling { scale, ..RmsNormScalingConfig::new(d_model, 1).with_epsilon(epsilon).init(device)? })
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        RmsNormScaling::forward(self, x)
    }

    fn scale(&self) -> f64 {
        RmsNormScaling::scale(self)
    }

    fn with_weights_of(mut self, other: &Self) -> Self {
        self.gamma = other.gamma.clone();
        self
    }
}

impl ModuleDisplay for RmsNormScaling {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model] = self.gamma.shape().dims();
        content.add("d_model", &d_model).add("epsilon", &self.epsilon).add("scale", &self.scale).optional()
    }
}
