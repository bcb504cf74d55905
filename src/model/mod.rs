//! The LLaMA transformer: config and presets, attention, feed-forward, block, model.

mod attention;
mod block;
mod config;
mod feed_forward;
mod finite;
mod float_type;
mod kv_cache;
mod linear;
mod llama;
mod loss;
mod presets;
mod residual;
mod retrofit;
mod rope;
mod sampling;

pub use attention::{Attention, AttentionConfig};
pub use block::{Block, BlockOutput, BlockResidualOutput};
pub use config::LlamaConfig;
pub use feed_forward::{FeedForward, FeedForwardConfig};
pub use finite::{check_finite, first_non_finite_parameter};
pub use float_type::{cast_weights, cast_weights_to_device};
pub use kv_cache::{KvCache, LayerKv};
#[cfg(feature = "analysis")]
pub(crate) use llama::check_distinct_layers;
#[cfg(feature = "hf")]
pub(crate) use llama::check_layer_numbers;
pub use llama::{ForwardTrace, Llama};
pub use loss::{cross_entropy, cross_entropy_counting, lm_head_cross_entropy};
pub use presets::PRESETS;
pub use residual::Residual;
pub use retrofit::{retrofit, retrofit_config};
pub use rope::{RopeScaling, RopeTables, RotaryEmbedding};
pub use sampling::{generate, sample_from_logits, SamplingConfig};
