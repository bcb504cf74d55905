//! `DynamicErfScaling`: Dynamic erf (Derf, arXiv 2512.10938, Chen et al. 2025), a point-wise
//! replacement of a norm in DyT's family, with its output multiplied by `1/sqrt(layer)`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::{assert_shape, Device, Tensor};

use super::depth_scale::{check_norm_config, factor, scaled_weight};
use super::dynamic_tanh::check_alpha_init;
use super::scaled_norm::ScaledNorm;
use crate::config_error::ConfigError;

/// Derf's default initial `alpha` (the authors' code: 0.5 for vision and DNA, 1.0 in their GPT-2 patch).
pub const DERF_ALPHA_INIT: f64 = 0.5;

/// Configuration of [`DynamicErfScaling`].
#[derive(Config, Debug)]
pub struct DynamicErfScalingConfig {
    /// The size of the last (feature) dimension.
    pub d_model: usize,
    /// The 1-based number of the layer this norm belongs to; the output is scaled by `1/sqrt(layer)`.
    pub layer: usize,
    /// Initial value of the learnable scalar `alpha`.
    #[config(default = "DERF_ALPHA_INIT")]
    pub alpha_init: f64,
}

impl DynamicErfScalingConfig {
    /// Builds the module with `alpha = alpha_init`, `shift = 0`, `gamma = 1` and `beta = 0`.
    ///
    /// Fails for layer 0, `d_model = 0` or an `alpha_init` that is not a finite number > 0.
    pub fn init(&self, device: &Device) -> Result<DynamicErfScaling, ConfigError> {
        // Derf has no epsilon: 1.0 stands in for the check shared with the other norms.
        check_norm_config(self.d_model, self.layer, 1.0)?;
        check_alpha_init(self.alpha_init)?;
        Ok(DynamicErfScaling {
            alpha: Initializer::Constant { value: self.alpha_init }.init([1], device),
            shift: Initializer::Zeros.init([1], device),
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: Initializer::Zeros.init([self.d_model], device),
            scale: factor(self.layer),
        })
    }
}

/// Dynamic erf with LayerNorm Scaling:
///
/// `Y = (gamma * erf(alpha * X + s) + beta) / sqrt(l)`
///
/// Element-wise, like [`DynamicTanhScaling`](super::DynamicTanhScaling): no statistics over the
/// features and no epsilon. `alpha` and the shift `s` are learnable scalars; `gamma` and `beta`
/// are per feature. The factor is a plain field, as in the other norms, never a parameter.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct DynamicErfScaling {
    /// The learnable input scale, `[1]`, initialised to `alpha_init`.
    pub alpha: Param<Tensor<1>>,
    /// The learnable input shift `s`, `[1]`, initialised to 0.
    pub shift: Param<Tensor<1>>,
    /// The learnable per-feature scale, `[d_model]`, initialised to 1.
    pub gamma: Param<Tensor<1>>,
    /// The learnable per-feature shift, `[d_model]`, initialised to 0.
    pub beta: Param<Tensor<1>>,
    /// The factor on the output, folded into the per-feature weights: `1/sqrt(layer)` for a norm
    /// built from a layer number, a layer plan's `norm_output_scale` in a model, 1 for a plain norm.
    pub(super) scale: f64,
}

impl DynamicErfScaling {
    /// The LNS factor applied to the output: `1/sqrt(layer)`, 1 for a plain norm.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Applies Derf element-wise. Shapes: `[..., d_model] -> [..., d_model]`.
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model` (the message names both sizes).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(x, [.., d_model]);
        let alpha = self.alpha.val().unsqueeze::<D>(); // [1, ..., 1]
        let shift = self.shift.val().unsqueeze::<D>();
        let gamma = scaled_weight(self.gamma.val(), self.scale).unsqueeze::<D>(); // [1, ..., d_model]
        let beta = scaled_weight(self.beta.val(), self.scale).unsqueeze::<D>();
        (x * alpha + shift).erf() * gamma + beta
    }
}

/// The kind's facts and its part in [`Norm`](super::Norm) (its inherent methods do the work).
impl ScaledNorm for DynamicErfScaling {
    const NAME: &'static str = "Derf (Dynamic erf)";
    const DEFAULT_ALPHA: Option<f64> = Some(DERF_ALPHA_INIT);

    fn parameter_count(d_model: usize) -> usize {
        2 * d_model + 2
    }

    fn build(d_model: usize, _epsilon: f64, alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError> {
        // Built for layer 1 (no factor), then given the factor itself.
        Ok(DynamicErfScaling {
            scale,
            ..DynamicErfScalingConfig::new(d_model, 1).with_alpha_init(alpha_init).init(device)?
        })
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        DynamicErfScaling::forward(self, x)
    }

    fn scale(&self) -> f64 {
        DynamicErfScaling::scale(self)
    }

    fn with_weights_of(mut self, other: &Self) -> Self {
        self.alpha = other.alpha.clone();
        self.shift = other.shift.clone();
        self.gamma = other.gamma.clone();
        self.beta = other.beta.clone();
        self
    }
}

impl ModuleDisplay for DynamicErfScaling {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model] = self.gamma.shape().dims();
        content.add("d_model", &d_model).add("scale", &self.scale).optional()
    }
}
