#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
//! # layernorm-scaling
//!
//! LayerNorm Scaling (LNS) from *The Curse of Depth in Large Language Models* (arXiv 2502.05795),
//! on [Burn](https://burn.dev) 0.22.
//!
//! In a Pre-LN transformer the variance of the hidden state grows with depth, so deep blocks turn
//! into near-identity maps. LNS multiplies the output of each Pre-LN norm of layer `l` (1-based) by
//! `1/sqrt(l)`: no parameters, no hyper-parameters.
//!
//! ## Dependency
//!
//! ```toml
//! [dependencies]
//! burn = { version = "=0.22.1", default-features = false, features = ["std"] }
//! layernorm-scaling = { version = "0.1", default-features = false, features = ["flex"] }
//! ```
//!
//! ## Quick start
//!
//! A Pre-LN block's norm with LNS, in place of Burn's `RmsNorm`, and the whole LLaMA model:
//!
//! ```
//! use burn::tensor::{Distribution, Int, Tensor};
//! use layernorm_scaling::{parse_device, LlamaConfig, RmsNormScalingConfig};
//!
//! # fn main() -> Result<(), layernorm_scaling::Error> {
//! let device = parse_device("flex")?;
//!
//! // The norm of layer 4 (1-based): Burn's RMSNorm, its output times 1/sqrt(4).
//! let norm = RmsNormScalingConfig::new(64, 4).init(&device)?;
//! let x = Tensor::<3>::random([2, 16, 64], Distribution::Normal(0.0, 1.0), &device);
//! let y = norm.forward(x);
//! assert_eq!(y.dims(), [2, 16, 64]);
//!
//! // A small LLaMA with LNS in every block (the default scheme), and its logits.
//! let model = LlamaConfig::new(64, 176, 4, 4).with_vocab_size(256).init(&device)?;
//! let tokens = Tensor::<2, Int>::zeros([2, 16], &device);
//! let logits = model.forward(tokens);
//! assert_eq!(logits.dims(), [2, 16, 256]);
//! # Ok(())
//! # }
//! ```
//!
//! The library guide (`docs/library.md` in the repository) adds a training loop of your own, the
//! other schemes, saving and loading.
//!
//! ## Modules
//!
//! - [`norm`]: the method: [`RmsNormScaling`] and [`LayerNormScaling`] (drop-in for Burn's
//!   `RmsNorm`/`LayerNorm`), [`DynamicTanhScaling`] (DyT), [`depth_scale`], and every scheme of
//!   the paper, plus Peri-LN, in [`NormScheme`].
//! - [`model`]: a LLaMA decoder ([`Llama`], [`LlamaConfig`]) with the paper's presets.
//! - [`fused`]: attention, RMSNorm, SwiGLU, RoPE, the linear layers and the LM head with its loss
//!   as single autodiff nodes with backward passes of their own (flex kernels on the CPU).
//! - [`run`]: a run directory on disk (its files, its model, its checkpoints) and loading a model
//!   from a run or a Hugging Face directory.
//! - [`device`]: a device string (`flex`, `wgpu`, `cuda:0`, ...) to a Burn device.
//! - `data`, `train`, `analysis`, `hf`, `cli`: corpora, training on burn-train, diagnostics,
//!   Hugging Face interop and command lines, each behind its feature.
//!
//! ## Features
//!
//! With `default-features = false` the crate builds Burn's core and its own: the norms, every
//! scheme, the model, its save and load, device strings. Add one backend, and the layers you need.
//!
//! | feature | adds | pulls in |
//! |---|---|---|
//! | `flex`, `ndarray`, `wgpu`, `vulkan`, `metal`, `cuda`, `tch` | a backend | that Burn backend |
//! | `autodiff` | gradients, for a training loop of your own | Burn's autodiff |
//! | `data` | corpora, the token cache, batching (`data`) | Burn's dataset API, flate2, memmap2 |
//! | `parquet` | Parquet corpora (FineWeb and the Hub's datasets) | `data`, parquet |
//! | `tokenizers` | Hugging Face `tokenizer.json` | `data`, tokenizers |
//! | `train` | training on burn-train (`train`) | `data`, `cli`, `autodiff`, burn-train |
//! | `analysis` | diagnostics and PNG figures (`analysis`) | `data`, `cli`, plotters |
//! | `hf` | Hugging Face safetensors and `config.json` (`hf`) | burn-store, safetensors |
//! | `cli` | command lines derived from the config structs, and the programs' printing (`cli`, `cli::console`) | clap, signal-hook |
//!
//! The default set is `flex`, `train`, `hf`, `analysis` and `tokenizers`: what the examples need.
//! A backend is enabled on this crate, not only on `burn`: [`parse_device`] knows the backends
//! this crate was built with. Every error is an [`Error`], or a [`ConfigError`] for a setting that
//! is invalid on its own; each message says what was wrong and what to do.

#[cfg(feature = "analysis")]
#[cfg_attr(docsrs, doc(cfg(feature = "analysis")))]
pub mod analysis;
#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
mod config_error;
#[cfg(feature = "data")]
#[cfg_attr(docsrs, doc(cfg(feature = "data")))]
pub mod data;
pub mod device;
mod divergence;
mod error;
pub mod fused;
#[cfg(feature = "hf")]
#[cfg_attr(docsrs, doc(cfg(feature = "hf")))]
pub mod hf;
#[cfg(feature = "hf")]
mod hf_error;
#[doc(hidden)] // plumbing shared with the examples and tests: exit codes, atomic writes, crash points
pub mod io;
mod load_problem;
pub mod measure;
#[doc(hidden)] // the machine's memory, for the examples and tests
pub mod memory;
mod memory_problem;
pub mod model;
pub mod norm;
pub mod run;
mod run_dir_error;
mod seed;
#[cfg(feature = "train")]
mod sweep_error;
#[cfg(feature = "tensorboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "tensorboard")))]
pub mod tensorboard;
#[cfg(feature = "train")]
#[cfg_attr(docsrs, doc(cfg(feature = "train")))]
pub mod train;

pub use config_error::ConfigError;
pub use device::{compiled_backends, parse_device, parse_devices, set_precision, Precision};
pub use divergence::{DivergedValue, Divergence};
pub use error::Error;
pub use memory_problem::{MemoryProblem, ModelSize};
pub use model::{ForwardTrace, KvCache, Llama, LlamaConfig};
pub use norm::{
    apply_depth_scale, depth_scale, DynamicTanhScaling, DynamicTanhScalingConfig, InitScheme, LayerNormScaling,
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
