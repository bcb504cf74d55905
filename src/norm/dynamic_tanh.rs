//! `DynamicTanhScaling`: Dynamic Tanh (DyT, "Transformers without Normalization", Zhu et al. 2025),
//! the element-wise replacement of a norm, with its output multiplied by `1/sqrt(layer)`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::{assert_shape, Device, Tensor};

use super::depth_scale::{check_norm_config, factor, scaled_weight};
use super::scaled_norm::ScaledNorm;
use crate::config_error::ConfigError;

/// DyT's default initial `alpha`.
pub const DYT_ALPHA_INIT: f64 = 0.5;

/// Configuration of [`DynamicTanhScaling`].
#[derive(Config, Debug)]
pub struct DynamicTanhScalingConfig {
    /// The size of the last (feature) dimension.
    pub d_model: usize,
    /// The 1-based number of the layer this norm belongs to; the output is scaled by `1/sqrt(layer)`.
    pub layer: usize,
    /// Initial value of the learnable scalar `alpha` (DyT's default 0.5; the paper lowers it for
    /// wide LLMs).
    #[config(default = "DYT_ALPHA_INIT")]
    pub alpha_init: f64,
}

impl DynamicTanhScalingConfig {
    /// Builds the module with `alpha = alpha_init`, `gamma = 1` and `beta = 0`.
    ///
    /// Fails for layer 0, `d_model = 0` or an `alpha_init` that is not a finite number > 0.
    pub fn init(&self, device: &Device) -> Result<DynamicTanhScaling, ConfigError> {
        // DyT has no epsilon: 1.0 stands in for the check shared with the other norms.
        check_norm_config(self.d_model, self.layer, 1.0)?;
        check_alpha_init(self.alpha_init)?;
        Ok(DynamicTanhScaling {
            alpha: Initializer::Constant { value: self.alpha_init }.init([1], device),
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: Initializer::Zeros.init([self.d_model], device),
            scale: factor(self.layer),
        })
    }
}

/// An error unless DyT's `alpha_init` is a finite number > 0.
pub(crate) fn check_alpha_init(alpha_init: f64) -> Result<(), ConfigError> {
    crate::config_error::check_positive_f32("dyt_alpha_init", alpha_init)
}

/// Dynamic Tanh with LayerNorm Scaling:
///
/// `Y = (gamma * tanh(alpha * X) + beta) / sqrt(l)`
///
/// Element-wise, so no statistics over the features and no epsilon. `alpha` is one learnable
/// scalar; `gamma` and `beta` are per feature, as LayerNorm's. As in the other norms, the factor
/// (from the layer number in the config, or a layer plan's) is a plain field, never a parameter.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct DynamicTanhScaling {
    /// The learnable input scale, `[1]`, initialised to `alpha_init`.
    pub alpha: Param<Tensor<1>>,
    /// The learnable per-feature scale, `[d_model]`, initialised to 1.
    pub gamma: Param<Tensor<1>>,
    /// The learnable per-feature shift, `[d_model]`, initialised to 0.
    pub beta: Param<Tensor<1>>,
    /// The factor on the output, folded into the per-feature weights: `1/sqrt(layer)` for a norm
    /// built from a layer number, a layer plan's `norm_output_scale` in a model, 1 for a plain norm.
    pub(super) scale: f64,
}

impl DynamicTanhScaling {
    /// The LNS factor applied to the output: `1/sqrt(layer)`, 1 for a plain norm.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Applies DyT element-wise. Shapes: `[..., d_model] -> [..., d_model]`.
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model` (the message names both sizes).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(x, [.., d_model]);
        let alpha = self.alpha.val().unsqueeze::<D>(); // [1, ..., 1]
        let gamma = scaled_weight(self.gamma.val(), self.scale).unsqueeze::<D>(); // [1, ..., d_model]
        let beta = scaled_weight(self.beta.val(), self.scale).unsqueeze::<D>();
        (x * alpha).tanh() * gamma + beta
    }
}

/// The kind's facts and its part in [`Norm`](super::Norm) (its inherent methods do the work).
impl ScaledNorm for DynamicTanhScaling {
    const NAME: &'static str = "DyT (Dynamic Tanh)";
    const DEFAULT_ALPHA: Option<f64> = Some(DYT_ALPHA_INIT);

    fn parameter_count(d_model: usize) -> usize {
        2 * d_model + 1
    }

    fn build(d_model: usize, _epsilon: f64, alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError> {
        // Built for layer 1 (no factor), then given the factor itself.
        Ok(DynamicTanhScaling {
            scale,
            ..DynamicTanhScalingConfig::new(d_model, 1).with_alpha_init(alpha_init).init(device)?
        })
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        DynamicTanhScaling::forward(self, x)
    }

    fn scale(&self) -> f64 {
        DynamicTanhScaling::scale(self)
    }

    fn with_weights_of(mut self, other: &Self) -> Self {
        self.alpha = other.alpha.clone();
        self.gamma = other.gamma.clone();
        self.beta = other.beta.clone();
        self
    }
}

impl ModuleDisplay for DynamicTanhScaling {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model] = self.gamma.shape().dims();
        content.add("d_model", &d_model).add("scale", &self.scale).optional()
    }
}
