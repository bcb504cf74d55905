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
    /// A run's model file (`path`: its final model, a checkpoint, its `model.json`) that cannot be
    /// loaded: why, and what to do.
    #[error("{}: {problem}", path.display())]
    RunModel {
        /// The file.
        path: PathBuf,
        /// Why it cannot be loaded.
        problem: Box<crate::load_problem::LoadProblem>,
    },
    /// A folder given as a model that is neither a run directory nor a Hugging Face model
    /// directory, or not the kind asked for.
    #[error("{}: {problem}", dir.display())]
    ModelDir {
        /// The folder.
        dir: PathBuf,
        /// What it is instead.
        problem: crate::load_problem::ModelDirProblem,
    },
    /// A Hugging Face model directory (`dir`) that cannot be loaded: `error` says why.
    #[cfg(feature = "hf")]
    #[error("{}: {error}", dir.display())]
    HfDir {
        /// The directory.
        dir: PathBuf,
        /// Why it cannot be loaded.
        #[source]
        error: crate::hf::HfError,
    },
    /// A tokenizer that cannot be used with the model it was chosen for.
    #[error(transparent)]
    TokenizerChoice(#[from] crate::load_problem::TokenizerChoice),
    /// A program's result (logits, samples, a table) that cannot be written to standard output
    /// (a full disk under `> file`): `error` is the system's reason.
    #[error("standard output: cannot write the result: {error}")]
    Output {
        /// Why the write failed.
        error: String,
    },
    /// A run directory that cannot be used (not a run, locked by another run, ...).
    #[error("run directory {}: {error}", path.display())]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong, and what to do.
        error: crate::run_dir_error::RunDirError,
    },
    /// A sweep whose axes clash with its shared settings, or whose directory holds something else
    /// than this sweep.
    #[cfg(feature = "train")]
    #[error(transparent)]
    Sweep(#[from] crate::sweep_error::SweepError),
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
    #[error("training stopped: {}", diverged_message(.reason, .checkpoint, *.lr))]
    Diverged {
        /// What became non-finite, at which step, and whether before any update.
        reason: crate::divergence::Divergence,
        /// The newest checkpoint kept (all have finite weights): its step and the checkpoint folder.
        checkpoint: Option<(usize, PathBuf)>,
        /// The learning rate it diverged with.
        lr: f64,
    },
    /// burn-train failed.
    #[error("training failed: {0}")]
    Training(String),
}

impl Error {
    /// An [`Error::RunDir`] about the directory `path`.
    pub fn run_dir(path: impl AsRef<Path>, error: crate::run_dir_error::RunDirError) -> Self {
        Error::RunDir { path: path.as_ref().to_path_buf(), error }
    }

    /// An [`Error::RunModel`] about the file `path`.
    pub fn run_model(path: impl AsRef<Path>, problem: crate::load_problem::LoadProblem) -> Self {
        Error::RunModel { path: path.as_ref().to_path_buf(), problem: Box::new(problem) }
    }

    /// An [`Error::File`] about `path`.
    pub fn file(path: impl AsRef<Path>, message: impl std::fmt::Display) -> Self {
        Error::File { path: path.as_ref().to_path_buf(), message: message.to_string() }
    }
}

/// What stopped a diverged run, and what to do: resume from the checkpoint kept with a lower
/// learning rate, or start again.
pub(crate) fn diverged_message(
    reason: &crate::divergence::Divergence,
    checkpoint: &Option<(usize, PathBuf)>,
    lr: f64,
) -> String {
    let kept = match checkpoint {
        Some((step, dir)) => format!(
            "the last checkpoint with finite weights and validation loss is at step {step} ({}); resume from it with \
             a learning rate well below {lr:e} (--resume --lr ...) or with --clip-grad-norm 1",
            dir.display()
        ),
        None if reason.before_any_update => "no checkpoint was written".into(),
        None => "no checkpoint was written before it diverged; start again with a lower --lr".into(),
    };
    format!("{reason}; {kept}")
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

    #[test]
    fn a_diverged_run_is_told_where_to_resume_or_to_start_again() {
        use crate::divergence::{DivergedValue, Divergence};
        let at = |step, before_any_update| Divergence {
            step,
            value: DivergedValue::TrainLoss(f64::NAN),
            before_any_update,
            in_f16: false,
        };
        let kept = Some((20, PathBuf::from("run/checkpoint")));
        let resume = diverged_message(&at(23, false), &kept, 3e-3);
        assert!(resume.starts_with(&format!("{}; ", at(23, false))), "{resume}");
        assert!(resume.contains("at step 20 (run/checkpoint)") && resume.contains("below 3e-3 (--resume --lr"));
        assert_eq!(diverged_message(&at(1, true), &None, 3e-3), format!("{}; no checkpoint was written", at(1, true)));
        let again = diverged_message(&at(23, false), &None, 3e-3);
        assert!(again.ends_with("start again with a lower --lr") && !again.contains("--resume"), "{again}");
    }
}
