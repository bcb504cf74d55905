//! What to do about a run without a sound final model.

use std::path::PathBuf;

/// What to do about a run that has no (sound) final model: wait for the training still running,
/// change what made it diverge, train again when nothing can finish it, or resume it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FinishAdvice {
    /// A training holds the run's lock (its process `pid`): wait for it to end.
    StillRunning {
        /// The training's process id.
        pid: String,
    },
    /// The run diverged at its first step, before any update (its `metric` was `value`): the
    /// initial weights are the cause, not the learning rate.
    DivergedAtFirstStep {
        /// The metric that became non-finite (`loss`, `gradient norm`).
        metric: String,
        /// Its value as the log reads it (`NaN`, `inf`): text, so that the advice compares equal
        /// to itself.
        value: String,
    },
    /// The run diverged at `step` (its `metric` was `value`): resume it from a checkpoint with a
    /// lower learning rate when it has one, else train it again.
    Diverged {
        /// The metric that became non-finite.
        metric: String,
        /// Its value as the log reads it.
        value: String,
        /// The step.
        step: usize,
        /// The run directory.
        run: PathBuf,
        /// Whether the run has a checkpoint to resume from.
        has_checkpoints: bool,
    },
    /// The run reached its last step, but its final model is damaged and no checkpoint is left:
    /// only training it again makes one.
    NothingCanFinish {
        /// The run directory.
        run: PathBuf,
    },
    /// The run stopped early: resume it with the same settings.
    Resume {
        /// The run directory.
        run: PathBuf,
    },
}

impl std::fmt::Display for FinishAdvice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::StillRunning { pid } => write!(f, "the training is still running (PID {pid}); wait for it to end"),
            Self::DivergedAtFirstStep { metric, value } => write!(
                f,
                "the run diverged at its first step (its {metric} is {value}), before any update: the learning rate \
                 is not the cause but the initial weights; train it again with other init settings (the model's \
                 init_std, embed_init_std, norm_eps)"
            ),
            Self::Diverged { metric, value, step, run, has_checkpoints: true } => write!(
                f,
                "the run diverged (its {metric} is {value} at step {step}); resume it from a checkpoint with a lower \
                 learning rate (`train --resume --lr ... --out {}`), or train again",
                run.display()
            ),
            Self::Diverged { metric, value, step, has_checkpoints: false, .. } => write!(
                f,
                "the run diverged (its {metric} is {value} at step {step}) before its first checkpoint; train it \
                 again with a lower --lr"
            ),
            Self::NothingCanFinish { run } => write!(
                f,
                "the run reached its last step, but its final model is damaged and no checkpoint is left to finish \
                 it from; train it again (`train --overwrite --out {}`, or a new --out)",
                run.display()
            ),
            Self::Resume { run } => {
                write!(f, "finish the run with `train --resume --out {}` (same settings)", run.display())
            }
        }
    }
}
