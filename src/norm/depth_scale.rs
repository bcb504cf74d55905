//! The method itself, as a function: the LayerNorm Scaling factor of a layer.
//!
//! In a Pre-LN block of layer `l` (1-based), both sub-layer norm outputs are multiplied by
//! `1/sqrt(l)`:
//!
//! ```text
//! x' = x  + Attn(Norm(x)  / sqrt(l))
//! y  = x' + FFN (Norm(x') / sqrt(l))
//! ```
//!
//! Use these when writing your own blocks; the modules [`RmsNormScaling`](super::RmsNormScaling)
//! and [`LayerNormScaling`](super::LayerNormScaling) apply the same factor for you.

use burn::tensor::Tensor;

use crate::config_error::ConfigError;

/// The LayerNorm Scaling factor `1/sqrt(layer)` of a 1-based layer number.
///
/// Layer 1 has factor 1. For a 0-based index `i`, pass `i + 1`.
///
/// ```
/// use layernorm_scaling::norm::depth_scale;
/// assert_eq!(depth_scale(1).unwrap(), 1.0);
/// assert_eq!(depth_scale(4).unwrap(), 0.5);
/// assert!(depth_scale(0).is_err());
/// ```
pub fn depth_scale(layer: usize) -> Result<f64, ConfigError> {
    if layer == 0 {
        return Err(ConfigError::LayerZero);
    }
    Ok(factor(layer))
}

/// `1/sqrt(layer)` for a layer already known to be at least 1.
pub(crate) fn factor(layer: usize) -> f64 {
    1.0 / (layer as f64).sqrt()
}

/// Checks the config of a depth-scaled norm: a 1-based layer, a non-empty feature dimension and a
/// positive epsilon.
pub(crate) fn check_norm_config(d_model: usize, layer: usize, epsilon: f64) -> Result<(), ConfigError> {
    depth_scale(layer)?;
    if d_model == 0 {
        return Err(ConfigError::Zero { field: "d_model" });
    }
    crate::config_error::check_positive_f32("epsilon", epsilon)
}

/// Multiplies `x` (any shape) by the factor of a 1-based `layer`.
///
/// For a norm output `Norm(x)` of layer `l`, this is LayerNorm Scaling.
pub fn apply_depth_scale<const D: usize>(x: Tensor<D>, layer: usize) -> Result<Tensor<D>, ConfigError> {
    let factor = depth_scale(layer)?;
    Ok(scale_unless_one(x, factor))
}

/// A norm's per-feature output weight (`gamma` or `beta`, `[d_model]`) with its LNS factor `s`
/// folded in: `s (N(x) gamma + beta) = N(x) (s gamma) + s beta`, so the factor costs `d_model`
/// multiplications (none at `s = 1`) rather than a pass over the output. Every norm module but
/// RMSNorm applies its factor this way (`fused::rms_norm` takes the factor itself).
pub(crate) fn scaled_weight(weight: Tensor<1>, scale: f64) -> Tensor<1> {
    scale_unless_one(weight, scale)
}

/// `x * factor`, skipping the multiplication (a full pass over `x`) when the factor is exactly 1.
pub(crate) fn scale_unless_one<const D: usize>(x: Tensor<D>, factor: f64) -> Tensor<D> {
    if factor == 1.0 {
        x
    } else {
        x * factor
    }
}
