//! Why a model, a traced forward pass or a training run does not fit in the memory left to it:
//! the problem of a [`ConfigError::TooLarge`](crate::ConfigError::TooLarge), with its sizes.

use crate::memory::format_bytes;

/// The sizes that make a model as large as it is, as its refusals name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSize {
    /// Its parameters.
    pub params: usize,
    /// `d_model`.
    pub d_model: usize,
    /// `d_ff`.
    pub d_ff: usize,
    /// `n_layers`.
    pub n_layers: usize,
    /// `vocab_size`.
    pub vocab_size: usize,
}

impl std::fmt::Display for ModelSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ModelSize { params, d_model, d_ff, n_layers, vocab_size } = self;
        write!(f, "{params} parameters (d_model {d_model}, d_ff {d_ff}, n_layers {n_layers}, vocab_size {vocab_size})")
    }
}

/// What does not fit, in how many bytes, against how many are left.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryProblem {
    /// The weights alone, at `float_bytes` bytes a parameter.
    #[error(
        "the model does not fit in memory: its {model} take {} at {float_bytes} bytes each, but only {} of memory is \
         available; {SMALLER_MODEL}",
        format_bytes(*.needed),
        format_bytes(*.available)
    )]
    Weights {
        /// The model.
        model: ModelSize,
        /// Bytes a parameter takes.
        float_bytes: usize,
        /// Bytes the weights need.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// A forward pass of `batch` x `seq` tokens that keeps the hidden state after every layer.
    #[error(
        "the model's weights, the hidden state after each of its {n_layers} layers and the logits for {batch} x {seq} \
         tokens take {}, but only {} of memory is available; use fewer sequences, shorter ones or fewer layers",
        format_bytes(*.needed),
        format_bytes(*.available)
    )]
    Trace {
        /// The model's layers.
        n_layers: usize,
        /// Sequences.
        batch: usize,
        /// Tokens a sequence.
        seq: usize,
        /// Bytes needed.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// Training, even at one token a step.
    #[error(
        "the model does not fit in memory: training its {model} in {precision} needs about {} even at one token a \
         step ({breakdown}), but {limit}; {SMALLER_MODEL}",
        format_bytes(*.needed)
    )]
    Training {
        /// The model.
        model: ModelSize,
        /// The training precision (`f32`, `bf16-mixed`, ...).
        precision: String,
        /// Bytes needed at the peak of a step.
        needed: u64,
        /// What the peak is made of.
        breakdown: String,
        /// The limit that leaves the least, and what it leaves.
        limit: String,
    },
}

/// What every refusal of a model too large says to do.
const SMALLER_MODEL: &str =
    "use a smaller d_model, d_ff, n_layers or vocab_size (or a smaller preset), or a GPU device";
