//! Why the tokenizer chosen for a model (its own, or `--tokenizer`) cannot be used with it.

use std::path::PathBuf;

/// Why the tokenizer chosen for a loaded model cannot be used with it:
/// [`Error::TokenizerChoice`](crate::error::Error::TokenizerChoice).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenizerChoice {
    /// A model directory without `tokenizer.json`, and no `--tokenizer`. `vocab_size` is the
    /// model's vocabulary when it is too small for the byte tokenizer (which is then not advised).
    NoneRecorded {
        /// The model's vocabulary, when the byte tokenizer would not fit it.
        vocab_size: Option<usize>,
    },
    /// The tokenizer a run recorded (`spec`) is not found. A relative path is relative to the
    /// folder its training ran in: `from` is the folder it was looked for from.
    NotFound {
        /// The recorded path.
        spec: String,
        /// For a relative path, the working directory it was looked for from (`None` where it
        /// cannot be read); `None` too for an absolute path.
        from: Option<PathBuf>,
        /// Whether the recorded path is relative.
        relative: bool,
    },
    /// Another tokenizer than the one the run trained with, by content (`found` and `recorded`
    /// are their identities).
    NotTheRunsOwn {
        /// The tokenizer given.
        spec: String,
        /// Its identity.
        found: String,
        /// The identity of the run's.
        recorded: String,
    },
    /// A tokenizer of more tokens than the model's vocabulary. `own` says the model has a
    /// tokenizer of its own, so leaving `--tokenizer` unset is the other fix.
    TooLarge {
        /// The tokenizer given.
        spec: String,
        /// Its tokens.
        tokens: usize,
        /// The model's vocabulary.
        vocab_size: usize,
        /// Whether the model has a tokenizer of its own.
        own: bool,
    },
}

impl std::fmt::Display for TokenizerChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let give = "give the tokenizer.json with --tokenizer PATH";
        match self {
            Self::NoneRecorded { vocab_size: Some(vocab_size) } => write!(
                f,
                "the model directory has no tokenizer.json; give the model's own with --tokenizer PATH (its \
                 vocabulary is {vocab_size}, too small for the byte tokenizer)"
            ),
            Self::NoneRecorded { vocab_size: None } => write!(
                f,
                "the model directory has no tokenizer.json; give one with --tokenizer PATH, or --tokenizer byte for a \
                 model trained on bytes (an exported byte-level run)"
            ),
            Self::NotFound { spec, from, relative: true } => {
                let here = from.as_ref().map(|dir| format!(" from {}", dir.display())).unwrap_or_default();
                write!(
                    f,
                    "{spec}: the model's tokenizer, a path relative to the folder its training ran in, is not \
                     found{here}; run from that folder, or {give}"
                )
            }
            Self::NotFound { spec, relative: false, .. } => {
                write!(f, "{spec}: the model's tokenizer is not found (moved or deleted?); {give}")
            }
            Self::NotTheRunsOwn { spec, found, recorded } => write!(
                f,
                "{spec}: is not the tokenizer the model was trained with (it is {found}, the run's was {recorded}); \
                 give the run's own tokenizer with --tokenizer PATH"
            ),
            Self::TooLarge { spec, tokens, vocab_size, own } => write!(
                f,
                "{spec}: the tokenizer has {tokens} tokens but the model's vocabulary is {vocab_size}: give the \
                 model's own tokenizer (its tokenizer.json){}",
                if *own { ", or leave --tokenizer unset" } else { "" }
            ),
        }
    }
}

impl std::error::Error for TokenizerChoice {}
