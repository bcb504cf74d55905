//! `Norm`: the norm a model uses, RMSNorm, LayerNorm or Dynamic Tanh, each with LayerNorm Scaling
//! built in.

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::{
    DynamicTanhScaling, DynamicTanhScalingConfig, LayerNormScaling, LayerNormScalingConfig, RmsNormScaling,
    RmsNormScalingConfig,
};
use crate::ConfigError;

/// Which normalisation a model uses; serialised `rms-norm`, `layer-norm`, `dyt`. Every
/// [`NormScheme`](super::NormScheme) works with each, and each carries the LNS factor.
///
/// | kind | `N(x)` of layer `l` | parameters |
/// |---|---|---|
/// | RMSNorm | `x / sqrt(mean(x^2) + eps) * gamma / sqrt(l)` | `gamma` |
/// | LayerNorm | `((x - mean) / sqrt(var + eps) * gamma + beta) / sqrt(l)` | `gamma`, `beta` |
/// | DyT | `(gamma * tanh(alpha x) + beta) / sqrt(l)` | `alpha` (scalar), `gamma`, `beta` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormKind {
    /// RMSNorm, no bias (LLaMA). The default.
    #[default]
    RmsNorm,
    /// LayerNorm with a bias.
    LayerNorm,
    /// Dynamic Tanh ("Transformers without Normalization"): no statistics, a learnable scalar
    /// `alpha` inside a tanh ([`DynamicTanhScaling`]).
    Dyt,
}

impl NormKind {
    /// Every kind, in declaration order.
    pub const ALL: [NormKind; 3] = [NormKind::RmsNorm, NormKind::LayerNorm, NormKind::Dyt];

    /// Builds a norm of this kind over `d_model` features, scaled by `1/sqrt(layer)`.
    ///
    /// `layer = 1` gives the plain, unscaled norm. `epsilon` is used by RMSNorm and LayerNorm,
    /// `dyt_alpha_init` (the initial `alpha`) by DyT.
    pub fn init(
        self,
        d_model: usize,
        epsilon: f64,
        dyt_alpha_init: f64,
        layer: usize,
        device: &Device,
    ) -> Result<Norm, ConfigError> {
        Ok(match self {
            NormKind::RmsNorm => {
                Norm::RmsNorm(RmsNormScalingConfig::new(d_model, layer).with_epsilon(epsilon).init(device)?)
            }
            NormKind::LayerNorm => {
                Norm::LayerNorm(LayerNormScalingConfig::new(d_model, layer).with_epsilon(epsilon).init(device)?)
            }
            NormKind::Dyt => {
                Norm::Dyt(DynamicTanhScalingConfig::new(d_model, layer).with_alpha_init(dyt_alpha_init).init(device)?)
            }
        })
    }

    /// Parameters of one norm over `d_model` features.
    pub fn num_params(self, d_model: usize) -> usize {
        match self {
            NormKind::RmsNorm => d_model,
            NormKind::LayerNorm => 2 * d_model,
            NormKind::Dyt => 2 * d_model + 1,
        }
    }

    /// The kind's name in messages: `RMSNorm`, `LayerNorm`, `DyT`.
    pub fn name(self) -> &'static str {
        match self {
            NormKind::RmsNorm => "RMSNorm",
            NormKind::LayerNorm => "LayerNorm",
            NormKind::Dyt => "DyT (Dynamic Tanh)",
        }
    }
}

/// A norm of any kind. Shapes: `[..., d_model] -> [..., d_model]`.
#[derive(Module, Debug)]
pub enum Norm {
    /// [`RmsNormScaling`].
    RmsNorm(RmsNormScaling),
    /// [`LayerNormScaling`].
    LayerNorm(LayerNormScaling),
    /// [`DynamicTanhScaling`].
    Dyt(DynamicTanhScaling),
}

impl Norm {
    /// Applies the norm (and its depth factor).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Norm::RmsNorm(norm) => norm.forward(x),
            Norm::LayerNorm(norm) => norm.forward(x),
            Norm::Dyt(norm) => norm.forward(x),
        }
    }

    /// The factor applied to the output, `1/sqrt(layer)`.
    pub fn scale(&self) -> f64 {
        match self {
            Norm::RmsNorm(norm) => norm.scale(),
            Norm::LayerNorm(norm) => norm.scale(),
            Norm::Dyt(norm) => norm.scale(),
        }
    }

    /// The kind of this norm.
    pub fn kind(&self) -> NormKind {
        match self {
            Norm::RmsNorm(_) => NormKind::RmsNorm,
            Norm::LayerNorm(_) => NormKind::LayerNorm,
            Norm::Dyt(_) => NormKind::Dyt,
        }
    }

    /// This norm with the learned weights (`gamma`, and `beta` for LayerNorm, `alpha`, `gamma`
    /// and `beta` for DyT) of `other`; the depth factor and epsilon stay this norm's.
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
            (Norm::Dyt(mut norm), Norm::Dyt(from)) => {
                norm.alpha = from.alpha.clone();
                norm.gamma = from.gamma.clone();
                norm.beta = from.beta.clone();
                Ok(Norm::Dyt(norm))
            }
            (norm, from) => Err(ConfigError::Conflict(format!(
                "cannot copy the weights of a {} norm into a {} norm",
                from.kind().name(),
                norm.kind().name()
            ))),
        }
    }
}
