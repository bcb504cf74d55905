//! What every kind of norm is ([`ScaledNorm`]): RMSNorm, LayerNorm, DyT, Derf and BHyT each
//! implement it in their own file, with the facts of their kind (name, parameters, learnable
//! scalar) beside their math. The model's [`Norm`](super::Norm) holds one of them and asks it.

use burn::tensor::{Device, Tensor};

use crate::config_error::ConfigError;

/// A norm over the last dimension, `[..., d_model] -> [..., d_model]`, whose output is multiplied
/// by its layer's LNS factor `scale` (`1/sqrt(l)` in layer `l` under LNS, else 1).
pub trait ScaledNorm: Sized {
    /// The kind's name in messages (`RMSNorm`, `DyT (Dynamic Tanh)`).
    const NAME: &'static str;
    /// The initial value of the kind's learnable scalar (DyT's and Derf's `alpha`, BHyT's
    /// `lambda`) when the model sets none; `None` for the kinds without one.
    const DEFAULT_ALPHA: Option<f64>;

    /// Parameters of one norm over `d_model` features.
    fn parameter_count(d_model: usize) -> usize;

    /// A norm over `d_model` features, its output multiplied by `scale`. `epsilon` is for the kinds
    /// that divide by a statistic, `alpha_init` for those with a learnable scalar.
    fn build(d_model: usize, epsilon: f64, alpha_init: f64, scale: f64, device: &Device) -> Result<Self, ConfigError>;

    /// Applies the norm and its factor.
    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D>;

    /// The factor applied to the output.
    fn scale(&self) -> f64;

    /// This norm with the learned weights of `other` (its factor and constants kept).
    fn with_weights_of(self, other: &Self) -> Self;
}
