//! What an analysis of one model or several reads and writes ([`AnalysisRequest`]): the
//! `analyze` example's command line as data. [`AnalysisRequest::prepare`] checks it.

use std::path::PathBuf;

use super::{AnalysisOptions, ChoiceFormat};
use crate::{config_error::ConfigError, error::Error};

/// A model to analyse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// A run directory of the train example (its final model, or the request's checkpoint).
    Run(PathBuf),
    /// A Hugging Face model directory, or `org/name` of the local Hugging Face cache: a decoder is
    /// analysed as a run is, a BERT-style encoder by its pseudo-perplexity with each layer removed.
    Hf(PathBuf),
}

/// A multiple-choice set to score each decoder on, with and without each layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChoiceSet {
    /// The file (JSON lines, JSON, Parquet, or MMLU's CSV).
    pub path: PathBuf,
    /// Its layout (`None`: the one its first row shows).
    pub format: Option<ChoiceFormat>,
}

/// Tokens per sequence of an analysis unless set: [`AnalysisRequest::new`]'s.
pub const DEFAULT_SEQ_LEN: usize = 128;
/// Sequences an encoder's pseudo-perplexity scores unless set.
pub const DEFAULT_ENCODER_SEQUENCES: usize = 8;

/// What an analysis reads and writes: the `analyze` example's command line, as data. Build one
/// with [`new`](Self::new) and set what differs from the defaults. Its errors name the command
/// line's options (`--seq-len`, `--layers`), as the example's user sees them.
#[derive(Clone, Debug)]
pub struct AnalysisRequest {
    /// The models, in the order the labels and the report's columns follow.
    pub models: Vec<ModelSource>,
    /// Legend labels, one per model (empty: the shortest ends of their paths that differ).
    pub labels: Vec<String>,
    /// The checkpoint at this optimiser step instead of the final model.
    pub step: Option<usize>,
    /// Deprecated (`--epoch`, with a warning): the checkpoint at the end of this validation
    /// interval. Use `step`.
    #[doc(hidden)]
    pub epoch: Option<usize>,
    /// Evaluation data, as training reads it (empty: fresh built-in documents).
    pub data: Vec<PathBuf>,
    /// The JSON field or Parquet column that holds each document's text.
    pub text_field: String,
    /// A tokenizer.json to use instead of the models' own.
    pub tokenizer: Option<PathBuf>,
    /// Where the evaluation text's tokens are cached (`None`: a folder in the system's
    /// temporary folder).
    pub cache_dir: Option<PathBuf>,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences an encoder's pseudo-perplexity scores (`None`: [`DEFAULT_ENCODER_SEQUENCES`]).
    pub sequences: Option<usize>,
    /// The device string (`auto`, `flex`, `wgpu`, `cuda:N`, ...).
    pub device: String,
    /// A multiple-choice set to score, with and without each layer.
    pub choices: Option<ChoiceSet>,
    /// The report directory (`None`: `<run>/analysis` for one run; a comparison needs one).
    pub out: Option<PathBuf>,
    /// What each evaluation does.
    pub options: AnalysisOptions,
}

impl AnalysisRequest {
    /// The analysis of `models` with the `analyze` example's defaults: the final models, fresh
    /// built-in documents in sequences of [`DEFAULT_SEQ_LEN`] tokens, the `auto` device,
    /// [`AnalysisOptions::default`], no multiple choice, the report where a single run keeps it.
    pub fn new(models: Vec<ModelSource>) -> Self {
        Self {
            models,
            labels: Vec::new(),
            step: None,
            epoch: None,
            data: Vec::new(),
            text_field: "text".into(),
            tokenizer: None,
            cache_dir: None,
            seq_len: DEFAULT_SEQ_LEN,
            sequences: None,
            device: "auto".into(),
            choices: None,
            out: None,
            options: AnalysisOptions::default(),
        }
    }
}

/// A problem with a request, told as a conflict between its settings.
pub(super) fn usage(message: String) -> Error {
    ConfigError::Conflict(message).into()
}
