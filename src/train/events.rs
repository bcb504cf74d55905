//! What a training run reports as it goes: [`train`](super::train) hands each [`TrainEvent`] to
//! its caller, which decides what to print (the `train` example prints progress on standard output
//! and notes and warnings on standard error). The library itself prints nothing.
//!
//! burn-train's own events (`LearnerEvent`) go to its renderer and metric loggers, by epoch and
//! item; a caller of [`train`](super::train) gets none of them, nor the run's own notes (a resume's
//! changed settings, a checkpoint skipped, the data budget), so these are the run's.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};

/// One thing a training run reports.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TrainEvent {
    /// The training starts (or resumes): the model, the run's length, the device and the run
    /// directory.
    Started {
        /// Blocks.
        layers: usize,
        /// Hidden size.
        d_model: usize,
        /// Trainable parameters.
        parameters: usize,
        /// The normalisation scheme, as written on the command line.
        scheme: String,
        /// Optimiser steps of the whole run.
        steps: usize,
        /// The device, as given (`auto` names what it picked).
        device: String,
        /// The run directory.
        out: PathBuf,
    },
    /// How far tokenising the corpus into the token cache has come: every few seconds of a long
    /// build, and at its end.
    Tokenizing(crate::data::TokenizeProgress),
    /// What the run reads of its training data, said before the first step (a run that repeats
    /// data also gets a [`Warning`](Self::Warning)).
    Data(super::DataBudget),
    /// A resumed run continues from its checkpoint at `step`.
    Resumed {
        /// The checkpoint's step.
        step: usize,
    },
    /// A resumed run changes a setting that does not change what is trained (`field: old -> new`).
    SettingChanged(String),
    /// A resumed run had no complete checkpoint: it trains again from step 0, from the weights
    /// of `init_from` as they are now when it has one.
    Restarted {
        /// The run's `init_from`.
        init_from: Option<std::path::PathBuf>,
    },
    /// Every step of a resumed run is done: its final model is written from the checkpoint at `step`.
    WritingFinalModel {
        /// The checkpoint's step.
        step: usize,
    },
    /// Every `log_every` optimiser steps (when standard output is not a terminal; there
    /// burn-train's dashboard shows progress): the training metrics.
    Progress {
        /// Optimiser steps done.
        step: usize,
        /// Optimiser steps of the whole run.
        total_steps: usize,
        /// The latest value of each metric, as `Loss 2.1234 | Perplexity 8.37 | ...`.
        metrics: String,
    },
    /// After each validation pass (same condition as [`Progress`](Self::Progress)).
    Evaluated {
        /// The split (`valid`).
        split: String,
        /// The step it was measured at.
        step: usize,
        /// The metrics, as in [`Progress`](Self::Progress).
        metrics: String,
    },
    /// Something the user should know that does not stop the run (the run directory's state,
    /// a replaced run restored).
    Note(String),
    /// Something went wrong but the run goes on (a file that cannot be written, a checkpoint
    /// skipped, a cache rebuilt).
    Warning(String),
}

impl TrainEvent {
    /// Whether the event is one the user must not miss when the progress goes to a pipe or a
    /// file: a note, a warning, a resume's changed setting or its restart from step 0, tokenising's
    /// progress (programs
    /// print those on standard error).
    pub fn is_notice(&self) -> bool {
        matches!(
            self,
            TrainEvent::Note(_)
                | TrainEvent::Warning(_)
                | TrainEvent::SettingChanged(_)
                | TrainEvent::Restarted { .. }
                | TrainEvent::Tokenizing(_)
        )
    }
}

impl std::fmt::Display for TrainEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrainEvent::Started { layers, d_model, parameters, scheme, steps, device, out } => write!(
                f,
                "training {layers} layers x d_model {d_model} ({parameters} parameters, {scheme}) for {steps} steps \
                 on {device} into {}",
                out.display()
            ),
            TrainEvent::Tokenizing(progress) => write!(f, "{}", progress.note()),
            TrainEvent::Data(budget) => write!(f, "{}", budget.note()),
            TrainEvent::Resumed { step } => write!(f, "resuming from the checkpoint at step {step}"),
            TrainEvent::SettingChanged(change) => write!(f, "resuming with a changed setting: {change}"),
            TrainEvent::Restarted { init_from } => {
                write!(f, "the run has no complete checkpoint yet: starting it again from step 0")?;
                match init_from {
                    // Read again: a source replaced since the run started would go unnoticed.
                    Some(source) => write!(f, ", from the weights in {} as they are now", source.display()),
                    None => Ok(()),
                }
            }
            TrainEvent::WritingFinalModel { step } => {
                write!(f, "every step is done: writing the final model from the checkpoint at step {step}")
            }
            TrainEvent::Progress { step, total_steps, metrics } => {
                write!(f, "step {step:>6}/{total_steps} | {metrics}")
            }
            TrainEvent::Evaluated { split, step, metrics } => write!(f, "{split:>6} at step {step} | {metrics}"),
            TrainEvent::Note(text) => write!(f, "note: {text}"),
            TrainEvent::Warning(text) => write!(f, "warning: {text}"),
        }
    }
}

/// Where the parts of a run (burn-train's threads among them) send their events; a send after the
/// caller stopped listening is dropped. The default sends nowhere.
#[derive(Clone, Debug, Default)]
pub struct Events {
    sender: Option<Sender<TrainEvent>>,
}

impl Events {
    /// A sender and the receiver of what it sends.
    pub fn channel() -> (Self, Receiver<TrainEvent>) {
        let (sender, receiver) = std::sync::mpsc::channel();
        (Self { sender: Some(sender) }, receiver)
    }

    /// Sends `event`.
    pub fn send(&self, event: TrainEvent) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(event);
        }
    }

    /// Sends a [`TrainEvent::Warning`].
    pub fn warn(&self, text: impl Into<String>) {
        self.send(TrainEvent::Warning(text.into()));
    }
}
