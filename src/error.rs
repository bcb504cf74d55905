//! The crate's error: [`Error`], every failure a caller can meet ([`ConfigError`], a setting that
//! is invalid on its own, is in `config_error.rs`). Each message says what was wrong and what to
//! do; nothing panics.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::config_error::ConfigError;

/// Every error of the crate, by kind: a bad setting, bad data, a Hugging Face directory, a file,
/// or a training run that cannot go on.
#[derive(Debug, Error)]
pub enum Error {
    /// A setting that is invalid, unknown or contradicts another.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Data (corpus, tokenizer, token cache, split) that cannot be used.
    #[cfg(feature = "data")]
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// A Hugging Face model directory that cannot be loaded or written.
    #[cfg(feature = "hf")]
    #[error(transparent)]
    Hf(#[from] crate::hf::HfError),
    /// A file (config, model, checkpoint, report) that cannot be read or written, or is not what
    /// it should be: the message says which and what to do.
    #[error("{}: {message}", path.display())]
    File {
        /// The file's (or directory's) path.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },
    /// A run directory that cannot be used (not a run, locked by another run, ...).
    #[error("run directory {}: {error}", path.display())]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong, and what to do.
        error: crate::run_dir_error::RunDirError,
    },
    /// A model whose weights hold NaN or infinite values.
    #[error("the weight `{parameter}` holds NaN or infinite values: {advice}")]
    NonFinite {
        /// The first such parameter.
        parameter: String,
        /// What to do about it.
        advice: String,
    },
    /// A Burn record (a module saved with `save_file`, or loaded with `try_load_file`) that
    /// cannot be read, written, or applied to the module: the message says which of the two.
    #[error("{}", record_message(.0))]
    Record(#[from] burn::store::RecordError),
    /// The loss or gradients became non-finite; the message names the checkpoint kept.
    #[error("training stopped: {0}")]
    Diverged(String),
    /// burn-train failed.
    #[error("training failed: {0}")]
    Training(String),
}

impl Error {
    /// An [`Error::RunDir`] about the directory `path`.
    pub fn run_dir(path: impl AsRef<Path>, error: crate::run_dir_error::RunDirError) -> Self {
        Error::RunDir { path: path.as_ref().to_path_buf(), error }
    }

    /// An [`Error::File`] about `path`.
    pub fn file(path: impl AsRef<Path>, message: impl std::fmt::Display) -> Self {
        Error::File { path: path.as_ref().to_path_buf(), message: message.to_string() }
    }
}

/// What a [`RecordError`](burn::store::RecordError) is about: a file that cannot be read or
/// written (the path, the permissions, the disk, a file cut short), or a record that does not fit
/// the module (another shape).
fn record_message(error: &burn::store::RecordError) -> String {
    match error {
        burn::store::RecordError::Io(message) => format!(
            "a model record could not be read or written: {message}; check the path, its permissions and the free \
             space, and that the file is a complete record (not cut short)"
        ),
        burn::store::RecordError::Validation(message) => format!(
            "a model record does not fit the model: {message}; the file holds a module of another shape (check the \
             model settings it was saved with)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::store::RecordError;

    #[test]
    fn a_record_error_says_whether_the_file_or_the_shape_is_at_fault() {
        let io = Error::Record(RecordError::Io("Permission denied (os error 13)".into())).to_string();
        assert!(io.contains("could not be read or written") && io.contains("permissions"), "{io}");
        assert!(!io.contains("shape"), "{io}");
        let shape = Error::Record(RecordError::Validation("shape mismatch for `lm_head`".into())).to_string();
        assert!(shape.contains("does not fit the model") && shape.contains("another shape"), "{shape}");
        assert!(!shape.contains("check the path"), "{shape}");
    }
}
