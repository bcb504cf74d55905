//! `BoundedTanhScaling`: Bounded Hyperbolic Tanh (BHyT, arXiv 2601.09719, Byun et al., ICML
//! 2026), a tanh of the RMS-normalised input, with its output multiplied by `1/sqrt(layer)`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::{assert_shape, Device, Tensor};

use super::depth_scale::{check_norm_config, factor, scaled_weight};
use super::dynamic_tanh::check_alpha_init;
use super::scaled_norm::ScaledNorm;
use crate::config_error::ConfigError;

/// BHyT's default initial `lambda` (the authors' configs: 2 on the attention side, 1 on the
/// feed-forward side; their sweep also tries 3 on both; one value here for every norm).
pub const BHYT_LAMBDA_INIT: f64 = 2.0;

/// BHyT's `kappa` (the authors' default, the same in every layer).
pub const BHYT_KAPPA: f64 = 10.0;

/// Configuration of [`BoundedTanhScaling`].
#[derive(Config, Debug)]
pub struct BoundedTanhScalingConfig {
    /// The size of the last (feature) dimension.
    pub d_model: usize,
    /// The 1-based number of the layer this norm belongs to; the output is scaled by `1/sqrt(layer)`.
    pub layer: usize,
    /// Initial value of the learnable scalar `lambda`.
    #[config(default = "BHYT_LAMBDA_INIT")]
    pub lambda_init: f64,
    /// The fixed divisor `kappa` of the normalised input.
    #[config(default = "BHYT_KAPPA")]
    pub kappa: f64,
    /// Added to the mean square for numerical stability.
    #[config(default = 1e-6)]
    pub epsilon: f64,
}

impl BoundedTanhScalingConfig {
    /// Builds the module with `lambda = lambda_init` and `gamma = 1`.
    ///
    /// Fails for layer 0, `d_model = 0`, a non-positive epsilon, or a `lambda_init` or `kappa`
    /// that is not a finite number > 0.
    pub fn init(&self, device: &Device) -> Result<BoundedTanhScaling, ConfigError> {
        check_norm_config(self.d_model, self.layer, self.epsilon)?;
        check_alpha_init(self.lambda_init)?;
        crate::config_error::check_positive_f32("kappa", self.kappa)?;
        Ok(BoundedTanhScaling {
            lambda: Initializer::Constant { value: self.lambda_init }.init([1], device),
            gamma: Initializer::Ones.init([self.d_model], device),
            kappa: self.kappa,
            epsilon: self.epsilon,
            scale: factor(self.layer),
        })
    }
}

/// Bounded Hyperbolic Tanh with LayerNorm Scaling:
///
/// `Y = gamma * tanh(lambda * X / (kappa * sqrt(mean(X^2) + eps))) / sqrt(l)`
///
/// The RMS over the features bounds the tanh's input whatever the residual stream's scale;
/// `lambda` (a learnable scalar) and `kappa` (fixed, 10) set how far into the tanh it goes, so at
/// init the output's RMS is about `lambda / kappa`. This is the exact form (the authors' `bhytstar`):
/// their default approximates the feed-forward-side mean square from the attention side's to save
/// one reduction, which changes the speed, not the function being approximated.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct BoundedTanhScaling {
    /// The learnable input scale, `[1]`, initialised to `lambda_init`.
    pub lambda: Param<Tensor<1>>,
    /// The learnable per-feature scale, `[d_model]`, initialised to 1.
    pub gamma: Param<Tensor<1>>,
    /// The fixed divisor of the normalised input.
    pub kappa: f64,
    /// Added to the mean square for numerical stability.
    pub epsilon: f64,
    /// The factor on the output, folded into the per-feature weights: `1/sqrt(layer)` for a norm
    /// built from a layer number, a layer plan's `norm_output_scale` in a model, 1 for a plain norm.
    pub(super) scale: f64,
}

impl BoundedTanhScaling {
    /// The LNS factor applied to the output: `1/sqrt(layer)`, 1 for a plain norm.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Applies BHyT over the last dimension. Shapes: `[..., d_model] -> [..., d_model]`.
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model` (the message names both sizes).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let [d_model] = self.gamma.shape().dims();
        assert_shape!(x, [.., d_model]);
        let inverse_rms = (x.clone().square().mean_dim(D - 1) + self.epsilon).sqrt().recip(); // [..., 1]
        let lambda = (self.lambda.val() / self.kappa).unsqueeze::<D>(); // [1, ..., 1]
        let gamma = scaled_weight(self.gamma.val(), self.scale).unsqueeze::<D>(); // [1, ..., d_model]
        (x * inverse_rms * lambda).tanh() * gamma
    }
}

/// The kind's facts and its part in [`Norm`](super::Norm) (its inherent methods do the work).
impl ScaledNorm for BoundedTanhScaling {
    const NAME: &'static str = "BHyT (Bounded Hyperbolic Tanh)";
    const DEFAULT_ALPHA: Option<f64> = Some(BHYT_LAMBDA_INIT);

    fn parameter_count(d_model: usize) -> usize {
        d_model + 1
    }

    fn build(d_model: usize, epsilon: f64, alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError> {
        // Built for layer 1 (no factor), then given the factor itself.
        let config = BoundedTanhScalingConfig::new(d_model, 1).with_lambda_init(alpha_init).with_epsilon(epsilon);
        Ok(BoundedTanhScaling { scale, ..config.init(device)? })
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        BoundedTanhScaling::forward(self, x)
    }

    fn scale(&self) -> f64 {
        BoundedTanhScaling::scale(self)
    }

    fn with_weights_of(mut self, other: &Self) -> Self {
        self.lambda = other.lambda.clone();
        self.gamma = other.gamma.clone();
        self
    }
}

impl ModuleDisplay for BoundedTanhScaling {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model] = self.gamma.shape().dims();
        content.add("d_model", &d_model).add("kappa", &self.kappa).add("scale", &self.scale).optional()
    }
}
