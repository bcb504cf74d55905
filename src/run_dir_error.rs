//! Why a run directory cannot be used as asked ([`RunDirError`]): each refusal a variant with the
//! facts it names, and the advice to the user written once, in its message. The crate's
//! [`Error::RunDir`](crate::error::Error::RunDir) carries it with the directory's path. A leaf of
//! its own beside `config_error.rs`, outside `run/`, so that the crate's error, which wraps it,
//! does not depend on the module that returns it.

use std::path::PathBuf;

use crate::io::RUN_SETTINGS_FILE as TRAIN_CONFIG;

/// A run directory that cannot be used as asked: what was found, and (in its message) what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunDirError {
    /// Another training holds the directory's lock.
    #[error("another training (PID {}) is using it; wait for it to finish, or choose another --out", pid_or_unknown(.pid))]
    Locked {
        /// The holder's PID, as its lock file records it (`None`: it wrote none).
        pid: Option<String>,
    },
    /// A reader (analyze, generate) holds the lock, longer than a writer waits.
    #[error("a reader (analyze or generate) holds its lock; try again in a moment")]
    ReadersHoldLock,
    /// The lock file could not be made, locked or written.
    #[error("{0}")]
    LockFailed(String),
    /// No folder can be at the path (a file or a dangling link on the way).
    #[error("{problem}; choose another --out")]
    NoFolder {
        /// What is in the way.
        problem: String,
    },
    /// A folder holding files but no run: the user's.
    #[error(
        "is not empty and holds no training run (it has {}{}); train into a new or empty directory so that no file of \
         yours is overwritten",
        .shown.join(", "), if *.more { ", ..." } else { "" }
    )]
    NotARun {
        /// A few of its entries, sorted.
        shown: Vec<String>,
        /// Whether it has more than those.
        more: bool,
    },
    /// A run's files without its `train.json`.
    #[error(
        "looks like a training run ({}) whose {TRAIN_CONFIG} is missing, so it can be neither resumed nor replaced \
         safely; put {TRAIN_CONFIG} back (from a backup) to resume it, or choose another --out",
        .run_files.join(", ")
    )]
    SettingsMissing {
        /// The run's files it holds.
        run_files: Vec<String>,
    },
    /// A `train.json` that no run wrote and that is no training's settings.
    #[error(
        "holds a train.json that is not a training run's ({reason}); choose another --out so that no file of yours is \
         overwritten"
    )]
    ForeignSettings {
        /// Why it is not a training's settings.
        reason: String,
    },
    /// An entry named as a run's, of the wrong kind (a file named `checkpoint`).
    #[error("`{name}` should be {} of the run but is not; move it away or choose a new --out", if *.should_be_dir { "a directory" } else { "a file" })]
    WrongKind {
        /// The entry.
        name: String,
        /// Whether a run's entry of that name is a directory.
        should_be_dir: bool,
    },
    /// A new run into a directory that holds one.
    #[error("already holds a run; pass --resume to continue it, --overwrite to replace it, or choose another --out")]
    HoldsARun,
    /// `--overwrite` would delete files that are not the run's.
    #[error("--overwrite would delete, with the old run, what is not the run's: {}; move that out first", .files.join(", "))]
    ForeignFiles {
        /// Those files, relative to the directory.
        files: Vec<String>,
    },
    /// A resume where there is no run.
    #[error("nothing to resume: it holds no train.json; start a new run without --resume")]
    NothingToResume,
    /// A resume of a run whose checkpoints are named by epoch, as versions before 0.1.0 named them.
    #[error(
        "its checkpoints are named by epoch ({}), as versions before 0.1.0 named them, and this version reads \
         checkpoints named by step: rename each <kind>-<epoch>.bpk (and its .sum) to <kind>-step-<step>.bpk, the \
         step being the epoch times the run's eval_every (the last epoch's: the run's steps), then resume; or train \
         into a new --out",
        .files.join(", ")
    )]
    EpochNamedCheckpoints {
        /// Those files, in `checkpoint/`.
        files: Vec<String>,
    },
    /// A resume of a run whose `train.json` was edited since the run wrote it.
    #[error(
        "its {TRAIN_CONFIG} differs from the one the run wrote (edited by hand?): its checkpoints were made with the \
         settings it had. Put them back and give the changes a resume allows as options (--lr, --clip-grad-norm, the \
         device, the intervals), or train into a new --out"
    )]
    SettingsEdited,
    /// A resume of a finished run.
    #[error(
        "the run is finished ({steps} steps); to train longer, start a new run from it with --init-from {} --out NEW_DIR",
        .run.display()
    )]
    Finished {
        /// The run's steps.
        steps: usize,
        /// The run directory.
        run: PathBuf,
    },
    /// A resume's data path, recorded relative to the folder its training ran in, not found here.
    #[error(
        "the data {} is not found from here{here}; a resume reads the paths the run's train.json records, relative \
         to the folder its training ran in: run from that folder, or give --data (and --valid-data) with the paths \
         from here (the same files)",
        .data.display()
    )]
    DataNotFound {
        /// The path as the run recorded it.
        data: PathBuf,
        /// ` (<the working directory>)`, or nothing where it cannot be read.
        here: String,
    },
    /// `--init-from` a run that has no final model yet.
    #[error("--init-from starts from a run's final model, and {problem}")]
    NoFinalModel {
        /// What the run has instead (its state, and how to finish it).
        problem: String,
    },
    /// The `train.json` a run recorded cannot be read.
    #[error(
        "cannot read the settings the run recorded ({reason}){}; put back its own {TRAIN_CONFIG} (from a backup), or \
         train into a new --out",
        if *.edited { "; it differs from the one the run wrote (cut short or edited)" } else { "" }
    )]
    SettingsUnreadable {
        /// The reader's words.
        reason: String,
        /// Whether its checksum shows it changed since the run wrote it.
        edited: bool,
    },
    /// A sweep pair's run trained again with other settings since the sweep recorded its loss.
    #[error(
        "this pair's run was trained again since the sweep recorded it ({}): its recorded loss is not this model's. \
         Remove the folder to train the pair again, or sweep into a new --out",
        .changes.join("; ")
    )]
    PairRetrained {
        /// The settings that differ, as `field: recorded -> now`.
        changes: Vec<String>,
    },
    /// The final model is saved, but the run's metric log could not be written.
    #[error("the model is saved, but {failure}")]
    LogFailed {
        /// What failed.
        failure: String,
    },
    /// A directory operation failed: what was being done, and the system's error.
    #[error("cannot {doing}: {source}")]
    Io {
        /// What was being done (`create it`, `write metrics.jsonl`).
        doing: String,
        /// The error.
        source: std::io::Error,
    },
    /// A refusal not typed yet (a resume's changed settings, an interrupted `--overwrite`'s
    /// restored run, ...): its message says what was wrong and what to do.
    #[error("{0}")]
    Refused(String),
}

impl RunDirError {
    /// [`RunDirError::Locked`] by the holder its lock file names (`""`: it wrote none).
    pub fn locked(holder: String) -> Self {
        RunDirError::Locked { pid: Some(holder).filter(|pid| !pid.is_empty()) }
    }

    /// [`RunDirError::Io`] for `doing`.
    pub fn io(doing: impl Into<String>, source: std::io::Error) -> Self {
        RunDirError::Io { doing: doing.into(), source }
    }
}

/// A lock holder's PID as the messages name it.
fn pid_or_unknown(pid: &Option<String>) -> &str {
    pid.as_deref().filter(|pid| !pid.is_empty()).unwrap_or("unknown")
}
