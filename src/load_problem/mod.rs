//! Why a run's model file (its final model, or a checkpoint) cannot be loaded, typed: what the
//! run shows, and what to do. [`Error::RunModel`](crate::error::Error::RunModel) names the file.
//! A leaf of the crate (it knows only `io`): the run directory reads what fills it in
//! (`run/load_diagnosis.rs`).

mod checkpoint_list;
mod finish_advice;
mod found_instead;
mod model_dir_problem;
mod tokenizer_choice;

use std::path::PathBuf;

pub use checkpoint_list::CheckpointList;
pub use finish_advice::FinishAdvice;
pub use found_instead::FoundInstead;
pub use model_dir_problem::ModelDirProblem;
pub use tokenizer_choice::TokenizerChoice;

use crate::io::SumError;

/// Why a run's model file cannot be loaded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LoadProblem {
    /// No final model: an `--overwrite` (process `pid`) is replacing the run now; the run it
    /// replaces is in `aside`.
    BeingReplaced {
        /// The replacing training's process id.
        pid: String,
        /// The run set aside (`.previous-run/`).
        aside: PathBuf,
    },
    /// No final model: an `--overwrite` is replacing the run `run`, or was killed; the run it
    /// replaces is in `aside`.
    Replacing {
        /// The run directory.
        run: PathBuf,
        /// The run set aside (`.previous-run/`).
        aside: PathBuf,
    },
    /// No final model: the training into `run` was stopped before it recorded its settings.
    StoppedBeforeStart {
        /// The run directory.
        run: PathBuf,
    },
    /// No `model.json` that can be read: not a run directory. `kind` and `error` are why it could
    /// not be read (`NotFound` where it is simply not there).
    NotARun {
        /// The kind of the reading error.
        kind: std::io::ErrorKind,
        /// The reading error, as the system words it.
        error: String,
        /// What the directory is instead.
        what: FoundInstead,
    },
    /// A `model.json` edited since the run wrote it: its weights were trained with the model it
    /// described then.
    ModelInfoEdited,
    /// No final model: the training has not finished.
    NotFinished {
        /// What to do.
        finish: FinishAdvice,
        /// The checkpoints to load instead.
        checkpoints: CheckpointList,
    },
    /// A final model that does not verify (`problem`: cut short, damaged, its writing unfinished).
    Incomplete {
        /// How it fails its checksum.
        problem: SumError,
        /// What to do.
        finish: FinishAdvice,
        /// The checkpoints to load instead.
        checkpoints: CheckpointList,
    },
    /// No checkpoint at `step`.
    NoCheckpoint {
        /// The step asked for.
        step: usize,
        /// The checkpoints there are.
        checkpoints: CheckpointList,
    },
    /// A file removed or replaced while it was read, by the training (process `pid`, when it
    /// still runs) into `run`, which prunes older checkpoints as it writes new ones.
    RemovedWhileRead {
        /// The run directory.
        run: PathBuf,
        /// The training's process id, when it still runs.
        pid: Option<String>,
        /// How the bytes read failed their checksum, when they were read.
        problem: Option<SumError>,
        /// The checkpoints there are now, when listed.
        checkpoints: Option<CheckpointList>,
    },
    /// A checkpoint still being written by the training (process `pid`) running in `run`.
    BeingWritten {
        /// The run directory.
        run: PathBuf,
        /// The training's process id.
        pid: String,
        /// The finished checkpoints.
        checkpoints: CheckpointList,
    },
    /// A checkpoint that does not verify.
    DamagedCheckpoint {
        /// How it fails its checksum.
        problem: SumError,
        /// The other checkpoints.
        checkpoints: CheckpointList,
    },
    /// The file cannot be read (`error`: no permission, a disk error).
    CannotRead {
        /// The kind of the reading error.
        kind: std::io::ErrorKind,
        /// The reading error, as the system words it.
        error: String,
    },
    /// Weights that do not fit the model `model.json` describes (`detail`: the first mismatches).
    DoesNotMatch {
        /// Burn's account of the mismatch, cut to its first 300 characters.
        detail: String,
    },
}

impl std::fmt::Display for LoadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BeingReplaced { pid, aside } => write!(
                f,
                "missing: an --overwrite is replacing this run now (PID {pid}); the run it replaces is in {}. Wait \
                 for it to end, or read the old run from there",
                aside.display()
            ),
            Self::Replacing { run, aside } => {
                let run = run.display();
                write!(
                    f,
                    "missing: an --overwrite is replacing this run (or was killed); the run it replaces is in {}. If \
                     the new run has no checkpoint yet, the next training into {run} puts the old run back; if it has \
                     one, `train --config {run}/train.json --resume` finishes the new run and then deletes the old one",
                    aside.display()
                )
            }
            Self::StoppedBeforeStart { run } => write!(
                f,
                "missing: the training into {} was stopped before it started; train into it again, without --resume",
                run.display()
            ),
            Self::NotARun { error, what, .. } => write!(f, "{error}; {what}"),
            Self::ModelInfoEdited => write!(
                f,
                "differs from the one the run wrote (edited by hand?): its weights were trained with the model it \
                 described then; put it back (a retrofit onto another scheme is `train --init-from` with --norm)"
            ),
            Self::NotFinished { finish, checkpoints } => {
                write!(f, "missing: the training has not finished; {finish}{}", or_checkpoint(checkpoints))
            }
            Self::Incomplete { problem, finish, checkpoints } => {
                write!(f, "incomplete: {problem}; {finish}{}", or_checkpoint(checkpoints))
            }
            Self::NoCheckpoint { step, checkpoints } => write!(f, "no checkpoint at step {step}: {checkpoints}"),
            Self::RemovedWhileRead { run, pid, problem, checkpoints } => {
                let who = match pid {
                    Some(pid) => format!("the training running in {} (PID {pid})", run.display()),
                    None => format!("a training into {}", run.display()),
                };
                write!(
                    f,
                    "removed or replaced while it was being read, by {who}, which deletes older checkpoints as it \
                     writes new ones (an --overwrite sets the whole run aside); load a newer checkpoint, or wait for \
                     that training to end"
                )?;
                if let Some(problem) = problem {
                    write!(f, " ({problem})")?;
                }
                match checkpoints {
                    Some(checkpoints) => write!(f, "; {checkpoints}"),
                    None => Ok(()),
                }
            }
            Self::BeingWritten { run, pid, checkpoints } => write!(
                f,
                "being written by the training running in {} (PID {pid}); load a finished checkpoint ({checkpoints})",
                run.display()
            ),
            Self::DamagedCheckpoint { problem, checkpoints } => {
                write!(f, "{problem}; load another checkpoint ({checkpoints})")
            }
            Self::CannotRead { error, .. } => write!(f, "cannot read it: {error}"),
            Self::DoesNotMatch { detail } => {
                write!(f, "does not match model.json ({detail}); was model.json replaced?")
            }
        }
    }
}

/// What else to load after a missing or damaged final model: a checkpoint, when there is one.
fn or_checkpoint(checkpoints: &CheckpointList) -> String {
    match checkpoints.is_empty() {
        true => format!(" ({checkpoints})"),
        false => format!(", or load a checkpoint ({checkpoints})"),
    }
}
