//! `Norm`: the norm a model uses, RMSNorm, LayerNorm, Dynamic Tanh, Dynamic erf or Bounded
//! Hyperbolic Tanh, each with LayerNorm Scaling built in.

use burn::module::Module;
use burn::tensor::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use super::scaled_norm::ScaledNorm;
use super::{BoundedTanhScaling, DynamicErfScaling, DynamicTanhScaling, LayerNormScaling, RmsNormScaling};
use crate::config_error::ConfigError;
use crate::fused::mixed::{cast_counted, CastOf};

/// `$body` with `$T` the norm type of the [`NormKind`] `$kind`: the one list of which type each
/// kind is.
macro_rules! with_type_of {
    ($kind:expr, $T:ident => $body:expr) => {
        match $kind {
            NormKind::RmsNorm => {
                type $T = RmsNormScaling;
                $body
            }
            NormKind::LayerNorm => {
                type $T = LayerNormScaling;
                $body
            }
            NormKind::Dyt => {
                type $T = DynamicTanhScaling;
                $body
            }
            NormKind::Derf => {
                type $T = DynamicErfScaling;
                $body
            }
            NormKind::Bhyt => {
                type $T = BoundedTanhScaling;
                $body
            }
        }
    };
}

/// `$body` with `$norm` the [`ScaledNorm`] that the [`Norm`] `$of` holds, whatever its kind.
macro_rules! with_each {
    ($of:expr, $norm:ident => $body:expr) => {
        match $of {
            Norm::RmsNorm($norm) => $body,
            Norm::LayerNorm($norm) => $body,
            Norm::Dyt($norm) => $body,
            Norm::Derf($norm) => $body,
            Norm::Bhyt($norm) => $body,
        }
    };
}

/// Which normalisation a model uses; serialised `rms-norm`, `layer-norm`, `dyt`, `derf`, `bhyt`.
/// Every [`NormScheme`](super::NormScheme) works with each, and each carries the LNS factor `c`
/// (`1/sqrt(l)` in layer `l` under LNS, the plan's `norm_output_scale`) the same way: on its
/// per-feature output weights, `c (N(x) gamma + beta) = N(x) (c gamma) + c beta` (RMSNorm's fused
/// kernel takes `c` itself, the others fold it into the weights).
///
/// | kind | `N(x)` of layer `l` | parameters |
/// |---|---|---|
/// | RMSNorm | `x / sqrt(mean(x^2) + eps) * gamma / sqrt(l)` | `gamma` |
/// | LayerNorm | `((x - mean) / sqrt(var + eps) * gamma + beta) / sqrt(l)` | `gamma`, `beta` |
/// | DyT | `(gamma * tanh(alpha x) + beta) / sqrt(l)` | `alpha` (scalar), `gamma`, `beta` |
/// | Derf | `(gamma * erf(alpha x + s) + beta) / sqrt(l)` | `alpha`, `s` (scalars), `gamma`, `beta` |
/// | BHyT | `gamma * tanh(lambda x / (kappa sqrt(mean(x^2) + eps))) / sqrt(l)` | `lambda` (scalar), `gamma` |
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
    /// Dynamic erf (arXiv 2512.10938): DyT's form with an erf and a learnable shift
    /// ([`DynamicErfScaling`]).
    Derf,
    /// Bounded Hyperbolic Tanh (arXiv 2601.09719): a tanh of the RMS-normalised input
    /// ([`BoundedTanhScaling`]). The model's final norm stays RMSNorm, as the authors'.
    Bhyt,
}

impl NormKind {
    /// Every kind, in declaration order.
    pub const ALL: [NormKind; 5] =
        [NormKind::RmsNorm, NormKind::LayerNorm, NormKind::Dyt, NormKind::Derf, NormKind::Bhyt];

    /// The initial value of the kind's learnable scalar (DyT's and Derf's `alpha`, BHyT's
    /// `lambda`) when the model sets none; `None` for the kinds without one.
    pub fn default_alpha(self) -> Option<f64> {
        with_type_of!(self, T => T::DEFAULT_ALPHA)
    }

    /// The kind of the model's final norm (before the LM head): this kind, but RMSNorm for BHyT,
    /// whose authors keep the last norm a plain RMSNorm.
    pub fn final_kind(self) -> NormKind {
        match self {
            NormKind::Bhyt => NormKind::RmsNorm,
            kind => kind,
        }
    }

    /// Builds a norm of this kind over `d_model` features whose output is multiplied by `scale`
    /// (a layer plan's [`norm_output_scale`](super::LayerPlan::norm_output_scale)).
    ///
    /// `scale = 1` gives the plain norm. `epsilon` is used by RMSNorm, LayerNorm and BHyT;
    /// `alpha_init` is the initial value of DyT's and Derf's `alpha` and of BHyT's `lambda`.
    pub fn init(
        self,
        d_model: usize,
        epsilon: f64,
        alpha_init: f64,
        scale: f64,
        device: &Device,
    ) -> Result<Norm, ConfigError> {
        crate::config_error::check_positive_f32("scale", scale)?;
        with_type_of!(self, T => T::build(d_model, epsilon, alpha_init, scale, device).map(Norm::from))
    }

    /// Parameters of one norm over `d_model` features.
    pub fn num_params(self, d_model: usize) -> usize {
        with_type_of!(self, T => T::parameter_count(d_model))
    }

    /// The kind's name in messages: `RMSNorm`, `LayerNorm`, `DyT`, `Derf`, `BHyT`.
    pub fn name(self) -> &'static str {
        with_type_of!(self, T => T::NAME)
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
    /// [`DynamicErfScaling`].
    Derf(DynamicErfScaling),
    /// [`BoundedTanhScaling`].
    Bhyt(BoundedTanhScaling),
}

impl Norm {
    /// Applies the norm (and its depth factor).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        with_each!(self, norm => ScaledNorm::forward(norm, x))
    }

    /// The residual sum `x = base + branch` (in the base's type) and the norm of it, `(x,
    /// forward(x))`: RMSNorm adds and normalises in one pass, its output made in `dtype`
    /// ([`RmsNormScaling::forward_residual_in`]); the other kinds add first and answer in the
    /// sum's type.
    pub fn forward_residual_in<const D: usize>(
        &self,
        base: Tensor<D>,
        branch: Tensor<D>,
        dtype: DType,
    ) -> (Tensor<D>, Tensor<D>) {
        match self {
            Norm::RmsNorm(norm) => norm.forward_residual_in(base, branch, dtype),
            other => {
                let x = base.clone() + cast_counted(branch, base.dtype(), CastOf::Activation);
                (x.clone(), other.forward(x))
            }
        }
    }

    /// The LNS factor applied to the output (`1/sqrt(l)` in layer `l` under LNS, else 1).
    pub fn scale(&self) -> f64 {
        with_each!(self, norm => ScaledNorm::scale(norm))
    }

    /// The kind of this norm.
    pub fn kind(&self) -> NormKind {
        match self {
            Norm::RmsNorm(_) => NormKind::RmsNorm,
            Norm::LayerNorm(_) => NormKind::LayerNorm,
            Norm::Dyt(_) => NormKind::Dyt,
            Norm::Derf(_) => NormKind::Derf,
            Norm::Bhyt(_) => NormKind::Bhyt,
        }
    }

    /// This norm with the learned weights (`gamma`, and `beta` for LayerNorm, `alpha`, `gamma`
    /// and `beta` for DyT, also `shift` for Derf, `lambda` and `gamma` for BHyT) of `other`; the
    /// depth factor, epsilon and BHyT's `kappa` stay this norm's.
    pub fn with_weights_of(self, other: &Norm) -> Result<Norm, ConfigError> {
        match (self, other) {
            (Norm::RmsNorm(norm), Norm::RmsNorm(from)) => Ok(Norm::RmsNorm(norm.with_weights_of(from))),
            (Norm::LayerNorm(norm), Norm::LayerNorm(from)) => Ok(Norm::LayerNorm(norm.with_weights_of(from))),
            (Norm::Dyt(norm), Norm::Dyt(from)) => Ok(Norm::Dyt(norm.with_weights_of(from))),
            (Norm::Derf(norm), Norm::Derf(from)) => Ok(Norm::Derf(norm.with_weights_of(from))),
            (Norm::Bhyt(norm), Norm::Bhyt(from)) => Ok(Norm::Bhyt(norm.with_weights_of(from))),
            (norm, from) => Err(ConfigError::Conflict(format!(
                "cannot copy the weights of a {} norm into a {} norm",
                from.kind().name(),
                norm.kind().name()
            ))),
        }
    }
}

/// Each kind's norm as a [`Norm`].
macro_rules! norm_from {
    ($($variant:ident($T:ty)),*) => {
        $(impl From<$T> for Norm {
            fn from(norm: $T) -> Self {
                Norm::$variant(norm)
            }
        })*
    };
}
norm_from!(
    RmsNorm(RmsNormScaling),
    LayerNorm(LayerNormScaling),
    Dyt(DynamicTanhScaling),
    Derf(DynamicErfScaling),
    Bhyt(BoundedTanhScaling)
);
