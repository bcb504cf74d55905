//! The method: LayerNorm Scaling modules (RMSNorm, LayerNorm, Dynamic Tanh, Dynamic erf, BHyT), its functional form, and every normalisation scheme.

mod bounded_tanh;
mod depth_scale;
mod dynamic_erf;
mod dynamic_tanh;
mod gpas;
mod init;
mod layer_norm_scaling;
#[allow(clippy::module_inception)]
mod norm;
mod rms_norm_scaling;
mod scaled_norm;
mod scheme;
mod scheme_names;

pub use bounded_tanh::{BoundedTanhScaling, BoundedTanhScalingConfig, BHYT_KAPPA, BHYT_LAMBDA_INIT};
pub(crate) use depth_scale::scale_unless_one;
pub use depth_scale::{apply_depth_scale, depth_scale};
pub use dynamic_erf::{DynamicErfScaling, DynamicErfScalingConfig, DERF_ALPHA_INIT};
pub(crate) use dynamic_tanh::check_alpha_init;
pub use dynamic_tanh::{DynamicTanhScaling, DynamicTanhScalingConfig, DYT_ALPHA_INIT};
pub use gpas::gpas;
pub use init::{InitScheme, LayerInit};
pub use layer_norm_scaling::{LayerNormScaling, LayerNormScalingConfig};
pub use norm::{Norm, NormKind};
pub use rms_norm_scaling::{RmsNormScaling, RmsNormScalingConfig};
pub use scaled_norm::ScaledNorm;
pub use scheme::{BranchGate, GpasBase, LayerPlan, LnsPosition, NormScheme, Placement};
pub use scheme_names::{scheme_as_string, scheme_names, schemes_markdown, SchemeArgument, SchemeInfo, SCHEMES};
