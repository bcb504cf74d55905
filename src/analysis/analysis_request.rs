//! What an analysis of one model or several reads and writes ([`AnalysisRequest`]): the
//! `analyze` example's command line as data. [`AnalysisRequest::prepare`] checks it.

use std::path::PathBuf;

use super::{AnalysisOptions, ChoiceFormat};

/// A model to analyse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// A run directory of the train example (its final model, or the request's checkpoint).
    Run(PathBuf),
    /// A Hugging Face model directory, or `org/name` of the local Hugging Face cache: a decoder is
    /// analysed as a run is, a BERT-style encoder by its pseudo-perplexity with each layer removed.
    Hf(PathBuf),
}

/// What an analysis reads and writes: the `analyze` example's command line, as data.
#[derive(Clone, Debug)]
pub struct AnalysisRequest {
    /// The models, in the order the labels and the report's columns follow.
    pub models: Vec<ModelSource>,
    /// Legend labels, one per model (empty: the shortest ends of their paths that differ).
    pub labels: Vec<String>,
    /// The checkpoint at this optimiser step instead of the final model.
    pub step: Option<usize>,
    /// Deprecated (`--epoch`): the checkpoint at the end of this validation interval.
    pub epoch: Option<usize>,
    /// Evaluation data, as training reads it (empty: fresh built-in documents).
    pub data: Vec<PathBuf>,
    /// The JSON field or Parquet column that holds each document's text.
    pub text_field: String,
    /// A tokenizer.json to use instead of the models' own.
    pub tokenizer: Option<PathBuf>,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences an encoder's pseudo-perplexity scores (`None`: 8).
    pub sequences: Option<usize>,
    /// The device string (`auto`, `flex`, `wgpu`, `cuda:N`, ...).
    pub device: String,
    /// A multiple-choice set to score, with and without each layer, and its layout (`None`: the
    /// one its first row shows).
    pub choices: Option<(PathBuf, Option<ChoiceFormat>)>,
    /// The report directory (`None`: `<run>/analysis` for one run; a comparison needs one).
    pub out: Option<PathBuf>,
    /// What each evaluation does.
    pub options: AnalysisOptions,
}
