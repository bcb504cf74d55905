//! Why a run directory cannot be used as asked ([`RunDirError`]): each refusal a variant with the
//! facts it names, and the advice to the user written once, in its message. The crate's
//! [`Error::RunDir`](crate::error::Error::RunDir) carries it with the directory's path. A leaf of
//! its own beside `config_error.rs`, outside `run/`, so that the crate's error, which wraps it,
//! does not depend on the module that returns it.

use std::path::PathBuf;

use crate::io::RUN_SETTINGS_FILE as TRAIN_CONFIG;
use crate::load_problem::LoadProblem;

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
        problem: crate::io::FolderProblem,
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
    /// A `.previous-run` that no `--overwrite` made (the user's): neither restored nor deleted.
    #[error(
        "{} {}: it is not a run this crate set aside; move it away",
        .path.display(),
        match .entries {
            Some(entries) => format!("holds what no --overwrite set aside ({})", entries.join(", ")),
            None => "is not a folder".to_string(),
        }
    )]
    ForeignSetAside {
        /// The `.previous-run` path.
        path: PathBuf,
        /// What it holds that no run does, sorted; `None` where it is no folder.
        entries: Option<Vec<String>>,
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
    #[error("--init-from starts from a run's final model, and {}", no_final_model(problem))]
    NoFinalModel {
        /// Why its final model cannot be loaded: unfinished (with how to finish it), cut short, or
        /// being replaced.
        problem: Box<LoadProblem>,
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
        joined(.changes)
    )]
    PairRetrained {
        /// The settings that differ.
        changes: Vec<SettingChange>,
    },
    /// A resume that would change what is trained (settings, the model, the data).
    #[error("resuming must keep what is trained, but these differ from the run's: {}. {advice}", joined(.changes))]
    SettingsChanged {
        /// What would change.
        changes: Vec<SettingChange>,
        /// What to do, by the run's state.
        advice: ResumeAdvice,
    },
    /// A resume after an interrupted `--overwrite` of a finished run, which was put back.
    #[error(
        "an earlier --overwrite stopped before its first checkpoint, and the finished run it was replacing is \
         restored: there is nothing to resume; start the replacement again with --overwrite"
    )]
    RestoredFinished,
    /// A resume after an interrupted `--overwrite` of an unfinished run, which was put back: the
    /// command's settings were read before, from the replacement.
    #[error(
        "an earlier --overwrite stopped before its first checkpoint, and the unfinished run it was replacing is \
         restored; this command's settings were read before that. Resume the restored run with `train --resume \
         --out {}` (it reads the restored train.json now), or start the replacement again with --overwrite",
        .out.display()
    )]
    RestoredUnfinished {
        /// The run directory.
        out: PathBuf,
    },
    /// A resume whose newest checkpoint is past the run's steps (`steps` lowered by hand).
    #[error(
        "its newest checkpoint is at step {step}, past the run's {steps} steps (was train.json's `steps` lowered by \
         hand?): its final model would be step {step}'s labelled as step {steps}. Set `steps` back to {step} or more \
         in train.json, or train into a new --out"
    )]
    CheckpointPastEnd {
        /// The newest checkpoint's step.
        step: usize,
        /// The run's steps.
        steps: usize,
    },
    /// A resume of a finished run whose final model does not verify, with no complete checkpoint.
    #[error(
        "finished (its final model.bpk, or its checksum, or its metrics' last step is there) but its final model does \
         not verify and no checkpoint is complete, so nothing can finish it: resuming would train it again from step \
         0 over its model and history. Train it again with --overwrite, or into a new --out"
    )]
    NothingCanFinish,
    /// A bf16 run's resume in a build whose default device has no bf16.
    #[error(
        "a bf16 run cannot be resumed with this build: Burn 0.22.1 restores the optimiser state on the default device \
         ({default_device}), which has no bf16. Resume it with a build whose first backend is the training device \
         (e.g. `--no-default-features --features flex,train` for flex), or on a GPU with bf16"
    )]
    NoBf16Restore {
        /// The default device, as Burn names it.
        default_device: String,
    },
    /// A run's `model.json` that differs from the one the run wrote.
    #[error(
        "{} differs from the one the run wrote (edited by hand?): its checkpoints and model were trained with the \
         model it described then; put it back",
        .path.display()
    )]
    ModelInfoEdited {
        /// The file.
        path: PathBuf,
    },
    /// A started run's `model.json` that cannot be read or is no run description.
    #[error("{reason}; put back the run's own model.json (from a backup), or train into a new --out")]
    ModelInfoUnusable {
        /// What is wrong with it.
        reason: String,
    },
    /// The `tensorboard` example given a path that is no directory.
    #[error("{}: give a run directory of the train example", if *.exists { "not a directory" } else { "no such directory" })]
    NoRunDir {
        /// Whether something (a file) is at the path.
        exists: bool,
    },
    /// The `tensorboard` example given a directory without `metrics.jsonl`, or with none in it.
    #[error("{}", if *.empty { "its metrics.jsonl holds no metrics: nothing to chart" } else { "it has no metrics.jsonl: give a run directory of the train example" })]
    NoMetrics {
        /// Whether the file is there but holds no metrics.
        empty: bool,
    },
    /// The `tensorboard` example asked to chart a run a training is writing.
    #[error(
        "a training (PID {}) is writing this run, and its TensorBoard events with it: wait for it to end",
        pid_or_unknown(.pid)
    )]
    BeingTrained {
        /// The training's PID, as its lock file records it.
        pid: Option<String>,
    },
    /// The run's event file could not be written (nor the older ones read).
    #[error("its TensorBoard event file is not written: {source}")]
    EventsNotWritten {
        /// The error, naming the file.
        source: std::io::Error,
    },
    /// Event files that chart steps past the run's records: kept.
    #[error(
        "its event file in {} charts steps up to {charted}, metrics.jsonl only up to {last}: kept as it is (nothing \
         written)",
        .events_dir.display()
    )]
    EventsAhead {
        /// The `tensorboard/` folder.
        events_dir: PathBuf,
        /// The last step its event files chart.
        charted: u64,
        /// The last step of `metrics.jsonl`.
        last: u64,
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
}

/// What a run without a final model has instead, as `--init-from`'s refusal says it (a checkpoint
/// is not offered: `--init-from` reads final models only).
fn no_final_model(problem: &LoadProblem) -> String {
    match problem {
        LoadProblem::NotFinished { finish, .. } => {
            format!("it has no final model: the training has not finished; {finish}")
        }
        LoadProblem::Incomplete { problem, finish, .. } => {
            format!("its final model is incomplete ({problem}); {finish}")
        }
        other => format!("its final model is {other}"),
    }
}

/// A setting that differs from the one a run recorded: its name and how it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingChange {
    /// The setting (`steps`, `devices`, `model`, `data`, ...).
    pub setting: String,
    /// `recorded -> now`, with what the change means where it needs saying (`10 -> 20`).
    pub change: String,
}

impl std::fmt::Display for SettingChange {
    /// `setting: recorded -> now`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.setting, self.change)
    }
}

/// What a resume refused for its changed settings should do instead, by the run's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeAdvice {
    /// The run replaces another (`--overwrite` under way): finish it with its own settings.
    #[error(
        "This run is an unfinished --overwrite of another (kept in {}): `train --config {}/train.json --resume` \
         finishes it",
        .aside.display(), .out.display()
    )]
    FinishTheOverwrite {
        /// The run directory.
        out: PathBuf,
        /// Where the run it replaces is kept (`.previous-run/`).
        aside: PathBuf,
    },
    /// A finished run: a new run may start from its model.
    #[error(
        "Resume with the run's own settings and data, or start a new run from this one with --init-from {} --out \
         NEW_DIR",
        .out.display()
    )]
    StartFromIt {
        /// The run directory.
        out: PathBuf,
    },
    /// An unfinished run: put back what changed.
    #[error(
        "Resume with the run's own settings and data (put back what changed), or train into a new --out; its weights \
         carry over (--init-from) only once it is finished"
    )]
    PutItBack,
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

/// The changes as the messages list them: `a: 1 -> 2; b: x -> y`.
fn joined(changes: &[SettingChange]) -> String {
    changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A lock holder's PID as the messages name it.
fn pid_or_unknown(pid: &Option<String>) -> &str {
    pid.as_deref().filter(|pid| !pid.is_empty()).unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_facts_where_its_advice_needs_them() {
        let out = PathBuf::from("runs/a");
        let changes = vec![
            SettingChange { setting: "steps".into(), change: "10 -> 20".into() },
            SettingChange { setting: "data".into(), change: "x -> y".into() },
        ];
        let refused = |advice| RunDirError::SettingsChanged { changes: changes.clone(), advice }.to_string();
        let overwrite =
            refused(ResumeAdvice::FinishTheOverwrite { out: out.clone(), aside: out.join(".previous-run") });
        assert!(overwrite.contains("differ from the run's: steps: 10 -> 20; data: x -> y. This run"), "{overwrite}");
        assert!(overwrite.contains("(kept in runs/a/.previous-run): `train --config runs/a/train.json --resume`"));
        let finished = refused(ResumeAdvice::StartFromIt { out: out.clone() });
        assert!(finished.ends_with("--init-from runs/a --out NEW_DIR"), "{finished}");
        assert!(refused(ResumeAdvice::PutItBack).ends_with("only once it is finished"));
        let restored = RunDirError::RestoredUnfinished { out }.to_string();
        assert!(restored.contains("`train --resume --out runs/a`"), "{restored}");
        let past = RunDirError::CheckpointPastEnd { step: 10, steps: 5 }.to_string();
        assert!(past.starts_with("its newest checkpoint is at step 10, past the run's 5 steps"), "{past}");
        assert!(past.contains("labelled as step 5. Set `steps` back to 10 or more"), "{past}");
        let path = PathBuf::from("run/.previous-run");
        let theirs = RunDirError::ForeignSetAside { path: path.clone(), entries: Some(vec!["a".into(), "b".into()]) };
        assert!(theirs.to_string().starts_with("run/.previous-run holds what no --overwrite set aside (a, b): it"));
        let file = RunDirError::ForeignSetAside { path, entries: None }.to_string();
        assert!(file.starts_with("run/.previous-run is not a folder: it is not a run"), "{file}");
    }
}
