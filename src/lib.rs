#![warn(missing_docs)]
//! # layernorm-scaling
//!
//! LayerNorm Scaling (LNS) from *The Curse of Depth in Large Language Models* (arXiv 2502.05795),
//! on [Burn](https://burn.dev) 0.22.
//!
//! In a Pre-LN transformer the variance of the hidden state grows with depth, so deep blocks turn
//! into near-identity maps. LNS multiplies the output of each Pre-LN norm of layer `l` (1-based) by
//! `1/sqrt(l)`: no parameters, no hyper-parameters.
//!
//! - [`norm`]: the method: [`RmsNormScaling`] and [`LayerNormScaling`] (drop-in for Burn's
//!   `RmsNorm`/`LayerNorm`), [`DynamicTanhScaling`] (DyT), [`depth_scale`], and every scheme of
//!   the paper, plus Peri-LN, in [`NormScheme`].
//! - [`model`]: a LLaMA decoder ([`Llama`], [`LlamaConfig`]) with the paper's presets.
//! - [`fused`]: attention, RMSNorm, SwiGLU and RoPE as single autodiff nodes with backward
//!   passes of their own (flex kernels on the CPU).
//! - [`device`]: a device string (`flex`, `wgpu`, `cuda:0`, ...) to a Burn device.

#[cfg(feature = "analysis")]
pub mod analysis;
#[cfg(feature = "cli")]
pub mod cli;
pub mod console;
#[cfg(feature = "data")]
pub mod data;
pub mod device;
mod error;
pub mod fused;
#[cfg(feature = "hf")]
pub mod hf;
pub mod io;
pub mod measure;
pub mod memory;
pub mod model;
pub mod norm;
pub mod seed;
#[cfg(feature = "train")]
pub mod train;

pub use device::{compiled_backends, parse_device, parse_devices, set_precision, Precision};
pub use error::{ConfigError, Error};
pub use model::{ForwardTrace, KvCache, Llama, LlamaConfig};
pub use norm::{
    apply_depth_scale, depth_scale, DynamicTanhScaling, DynamicTanhScalingConfig, LayerNormScaling,
    LayerNormScalingConfig, LnsPosition, NormKind, NormScheme, RmsNormScaling, RmsNormScalingConfig,
};

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of `docs/library.md` (its training loop needs gradients).
#[doc = include_str!("../docs/library.md")]
#[cfg(all(doctest, feature = "autodiff"))]
pub struct LibraryGuideDoctests;

/// The examples of `docs/diagnostics.md`.
#[doc = include_str!("../docs/diagnostics.md")]
#[cfg(all(doctest, feature = "analysis"))]
pub struct DiagnosticsGuideDoctests;

/// The examples of `docs/hf.md`.
#[doc = include_str!("../docs/hf.md")]
#[cfg(all(doctest, feature = "hf"))]
pub struct HfGuideDoctests;
