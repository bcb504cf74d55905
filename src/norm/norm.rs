//! `Norm`: the norm a model uses, RMSNorm or LayerNorm, both with LayerNorm Scaling built in.

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::{LayerNormScaling, LayerNormScalingConfig, RmsNormScaling, RmsNormScalingConfig};
use crate::ConfigError;

/// Which normalisation a model uses. Every [`NormScheme`](super::NormScheme) works with both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormKind {
    /// RMSNorm, no bias (LLaMA). The default.
    #[default]
    RmsNorm,
    /// LayerNorm with a bias.
    LayerNorm,
}

impl NormKind {
    /// Builds a norm of this kind over `d_model` features, scaled by `1/sqrt(layer)`.
    ///
    /// `layer = 1` gives the plain, unscaled norm.
    pub fn init(self, d_model: usize, epsilon: f64, layer: usize, device: &Device) -> Result<Norm, ConfigError> {
        Ok(match self {
            NormKind::RmsNorm => {
                Norm::RmsNorm(RmsNormScalingConfig::new(d_model, layer).with_epsilon(epsilon).init(device)?)
            }
            NormKind::LayerNorm => {
                Norm::LayerNorm(LayerNormScalingConfig::new(d_model, layer).with_epsilon(epsilon).init(device)?)
            }
        })
    }

    /// Parameters of one norm over `d_model` features.
    pub fn num_params(self, d_model: usize) -> usize {
        match self {
            NormKind::RmsNorm => d_model,
            NormKind::LayerNorm => 2 * d_model,
        }
    }
}

/// A norm of either kind. Shapes: `[..., d_model] -> [..., d_model]`.
#[derive(Module, Debug)]
pub enum Norm {
    /// [`RmsNormScaling`].
    RmsNorm(RmsNormScaling),
    /// [`LayerNormScaling`].
    LayerNorm(LayerNormScaling),
}

impl Norm {
    /// Applies the norm (and its depth factor).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Norm::RmsNorm(norm) => norm.forward(x),
            Norm::LayerNorm(norm) => norm.forward(x),
        }
    }

    /// The factor applied to the output, `1/sqrt(layer)`.
    pub fn scale(&self) -> f64 {
        match self {
            Norm::RmsNorm(norm) => norm.scale(),
            Norm::LayerNorm(norm) => norm.scale(),
        }
    }

    /// This norm with the learned weights (`gamma`, and `beta` for LayerNorm) of `other`; the
    /// depth factor and epsilon stay this norm's.
    pub fn with_weights_of(self, other: &Norm) -> Result<Norm, ConfigError> {
        match (self, other) {
            (Norm::RmsNorm(mut norm), Norm::RmsNorm(from)) => {
                norm.gamma = from.gamma.clone();
                Ok(Norm::RmsNorm(norm))
            }
            (Norm::LayerNorm(mut norm), Norm::LayerNorm(from)) => {
                norm.gamma = from.gamma.clone();
                norm.beta = from.beta.clone();
                Ok(Norm::LayerNorm(norm))
            }
            _ => Err(ConfigError::Conflict(
                "cannot copy the weights of a norm of another kind (RMSNorm vs LayerNorm)".into(),
            )),
        }
    }
}
