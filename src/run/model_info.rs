//! A run's `model.json` ([`RunModelInfo`]): what it records about its model, and its one reader.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::MODEL_INFO;
use crate::io::SumError;
use crate::{error::Error, model::LlamaConfig};

/// Why a run's `model.json` could not be read ([`read_model_info`]).
#[derive(Debug)]
pub(crate) enum ModelInfoError {
    /// The file cannot be read (missing, say).
    Unreadable(std::io::Error),
    /// It is not a [`RunModelInfo`].
    Invalid(serde_json::Error),
}

impl std::fmt::Display for ModelInfoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelInfoError::Unreadable(e) => e.fmt(f),
            ModelInfoError::Invalid(e) => e.fmt(f),
        }
    }
}

/// The run's `model.json` in `dir`, as written: the one reader of the file.
pub(crate) fn read_model_info(dir: &Path) -> Result<RunModelInfo, ModelInfoError> {
    let text = std::fs::read_to_string(dir.join(MODEL_INFO)).map_err(ModelInfoError::Unreadable)?;
    serde_json::from_str(&text).map_err(ModelInfoError::Invalid)
}

/// The error for a `model.json` in `dir` that is no run description (`e`, the parser's words):
/// what to do, and whether its checksum shows it changed since the run wrote it.
pub(crate) fn invalid_model_info(dir: &Path, e: &serde_json::Error) -> Error {
    let changed = match model_info_edited(dir) {
        true => "it differs from the one the run wrote (cut short or edited); ",
        false => "",
    };
    Error::file(
        dir.join(MODEL_INFO),
        format!(
            "not a run description ({e}); {changed}put back the run's own model.json (from a backup), or train the \
             run again"
        ),
    )
}

/// Whether the run's `model.json` in `dir` differs from the one the run wrote (its checksum says
/// so; edited by hand): its weights were trained with the model it described then.
pub(crate) fn model_info_edited(dir: &Path) -> bool {
    matches!(crate::io::verify_sum(&dir.join(MODEL_INFO)), Err(SumError::Mismatch(_)))
}

/// What a run directory records about its model: enough to rebuild it and its tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunModelInfo {
    /// The model's config.
    pub model: LlamaConfig,
    /// The tokenizer spec (`byte` or a `tokenizer.json` path).
    pub tokenizer: String,
    /// Optimiser steps taken.
    pub steps: usize,
    /// What the model trains on: the [content fingerprint](crate::data::TokenCache::content_fingerprint)
    /// of its token cache (a resume must train on the same data).
    #[serde(default)]
    pub data: Option<String>,
    /// What decides the tokens ([`Tokenizer::identity`](crate::data::Tokenizer::identity): `byte`,
    /// or a `tokenizer.json`'s size and CRC-32): a program that loads the model with another
    /// tokenizer is refused. `None` in runs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_identity: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_model_json_says_what_to_do_and_whether_the_run_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_INFO);
        crate::io::write_atomically_with_sum(&path, br#"{"model": {"d_model": 64"#).unwrap();
        let Err(ModelInfoError::Invalid(e)) = read_model_info(dir.path()) else {
            panic!("a cut-short file is invalid")
        };
        let message = invalid_model_info(dir.path(), &e).to_string();
        assert!(message.contains("not a run description") && message.contains("put back"), "{message}");
        assert!(!message.contains("differs from the one the run wrote"), "the checksum matches: {message}");

        std::fs::write(&path, "{}").unwrap();
        let Err(ModelInfoError::Invalid(e)) = read_model_info(dir.path()) else { panic!("`{{}}` is no run") };
        let message = invalid_model_info(dir.path(), &e).to_string();
        assert!(message.contains("differs from the one the run wrote"), "{message}");
    }
}
