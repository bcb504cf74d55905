//! The run monitor: the one place that decides whether a run diverged. The training step reports
//! each gradient norm, the metric logger each training loss, the checkpointing strategy asks
//! whether a checkpoint may be written, and the run (or a sweep judging a finished run) asks for
//! the verdict. Every part of the run reports its events through it.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::train::Interrupter;

use super::events::{Events, TrainEvent};
use crate::measure::MetricRow;

/// What a run's parts report to, shared by all of them (burn-train calls them from its threads).
#[derive(Default)]
pub struct RunMonitor {
    events: Events,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Why the run diverged: the first reason reported.
    divergence: Option<String>,
    /// Stopped when the run diverges.
    interrupter: Option<Interrupter>,
    /// The run's first training loss (a resumed run's, from its log).
    first_train_loss: Option<f64>,
    /// Training losses of every micro-batch this process trained, in order.
    train_losses: Vec<f64>,
    /// The first failure of the metric log: the model is good, the run's record is not.
    log_failure: Option<String>,
    /// Optimiser steps done, including those of a resumed run's checkpoint.
    steps: usize,
}

impl std::fmt::Debug for RunMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunMonitor").field("divergence", &self.divergence()).finish_non_exhaustive()
    }
}

/// The advice every divergence ends with.
const ADVICE: &str = "the loss diverged (try a lower --lr or --clip-grad-norm)";

/// The least a run's validation loss must fall below its first training loss, as a fraction of
/// it, for the run to count as having learned (far below any real run's fall, far above rounding).
pub const LEARNED_AT_LEAST: f64 = 1e-3;

impl RunMonitor {
    /// A monitor sending the run's events to `events`.
    pub fn new(events: Events) -> Arc<Self> {
        Arc::new(Self { events, state: Mutex::default() })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports `event` to the run's caller.
    pub fn report(&self, event: TrainEvent) {
        self.events.send(event);
    }

    /// Reports a warning to the run's caller.
    pub fn warn(&self, text: impl Into<String>) {
        self.events.warn(text);
    }

    /// The events' sender, for the parts that report on their own (the renderer, the tracker).
    pub fn events(&self) -> Events {
        self.events.clone()
    }

    /// Stops `interrupter`'s run when it diverges (at once when it already has).
    pub fn stop_on_divergence(&self, interrupter: Interrupter) {
        let mut state = self.state();
        if let Some(reason) = &state.divergence {
            interrupter.stop(Some(reason));
        }
        state.interrupter = Some(interrupter);
    }

    /// Marks the run diverged for `reason` (the first reason is kept) and stops it.
    fn diverge(&self, reason: String) {
        let mut state = self.state();
        if state.divergence.is_none() {
            if let Some(interrupter) = &state.interrupter {
                interrupter.stop(Some(&reason));
            }
            state.divergence = Some(reason);
        }
    }

    /// The training loss of a micro-batch of optimiser step `step`: a non-finite one is a
    /// divergence. `this_process` is false for the losses of a resumed run's log.
    pub fn train_loss(&self, step: usize, loss: f64, this_process: bool) {
        {
            let mut state = self.state();
            state.first_train_loss.get_or_insert(loss);
            if this_process {
                state.train_losses.push(loss);
            }
        }
        if !loss.is_finite() {
            self.diverge(format!("the training loss is {loss} at step {step}: {ADVICE}"));
        }
    }

    /// The training losses of a run's log (`metrics.jsonl`) that this process did not train:
    /// those a resumed run keeps, or those of a finished run being judged.
    pub fn read_log(&self, rows: &[MetricRow]) {
        for row in rows.iter().filter(|row| row.is_train_loss()) {
            self.train_loss(row.step, row.value, false);
        }
    }

    /// The run starts after `step` optimiser steps (those of the checkpoint it resumes from).
    pub fn start_at(&self, step: usize) {
        self.state().steps = step;
    }

    /// The global norm of the next optimiser step's gradients: whether they may be applied (a
    /// non-finite norm is a divergence; after a divergence, no step is applied).
    pub fn may_apply(&self, grad_norm: f64) -> bool {
        let step = {
            let mut state = self.state();
            state.steps += 1;
            state.steps
        };
        if !grad_norm.is_finite() {
            self.diverge(format!("the gradient norm is {grad_norm} at step {step}: {ADVICE}"));
        }
        self.state().divergence.is_none()
    }

    /// Whether no step may be applied any more.
    pub fn has_diverged(&self) -> bool {
        self.state().divergence.is_some()
    }

    /// Whether a checkpoint with validation loss `valid_loss` may be written: only while the run
    /// is sound, so that every checkpoint kept can be resumed from.
    pub fn may_checkpoint(&self, valid_loss: Option<f64>) -> bool {
        !self.has_diverged() && valid_loss.is_some_and(f64::is_finite)
    }

    /// Why the run diverged, if it did.
    pub fn divergence(&self) -> Option<String> {
        self.state().divergence.clone()
    }

    /// Why a run that ended with validation loss `valid_loss` counts as diverged, if it does: a
    /// divergence while it trained, a non-finite validation loss, or one not clearly lower than
    /// its first training loss (by less than 0.1% of it, `LEARNED_AT_LEAST`: the model ends no better
    /// than its initial weights, such as a collapse to a uniform guess, `ln(vocab)`, that the
    /// rounding of its losses puts a hair below the first).
    pub fn verdict(&self, valid_loss: f64) -> Option<String> {
        let state = self.state();
        if let Some(reason) = &state.divergence {
            return Some(reason.clone());
        }
        if !valid_loss.is_finite() {
            return Some(format!("the validation loss is {valid_loss}"));
        }
        match state.first_train_loss {
            Some(first) if valid_loss > first - LEARNED_AT_LEAST * first.abs() => Some(format!(
                "the final validation loss {valid_loss:.4} is no lower than the first training loss {first:.4} (by \
                 less than {:.2}% of it): the model did not learn",
                LEARNED_AT_LEAST * 100.0
            )),
            _ => None,
        }
    }

    /// Records that the metric log failed (reported once, as a warning).
    pub fn log_failed(&self, message: String) {
        let mut state = self.state();
        if state.log_failure.is_none() {
            self.events.warn(message.clone());
            state.log_failure = Some(message);
        }
    }

    /// The metric log's failure, if it failed.
    pub fn log_failure(&self) -> Option<String> {
        self.state().log_failure.clone()
    }

    /// The training losses this process trained, in order.
    pub fn train_losses(&self) -> Vec<f64> {
        self.state().train_losses.clone()
    }

    /// The run's first training loss.
    pub fn first_train_loss(&self) -> Option<f64> {
        self.state().first_train_loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_divergence_is_kept_and_no_step_is_applied_after_it() {
        let monitor = RunMonitor::default();
        assert!(monitor.may_apply(3.0));
        monitor.train_loss(1, 2.5, true);
        assert!(monitor.may_checkpoint(Some(2.4)));
        assert!(!monitor.may_checkpoint(Some(f64::NAN)));
        assert!(!monitor.may_checkpoint(None));
        monitor.train_loss(2, f64::INFINITY, true);
        assert!(!monitor.may_apply(1.0));
        assert!(!monitor.may_apply(f64::NAN));
        assert!(!monitor.may_checkpoint(Some(2.0)));
        assert_eq!(monitor.divergence().unwrap(), format!("the training loss is inf at step 2: {ADVICE}"));
        assert_eq!(monitor.train_losses().len(), 2);
    }

    #[test]
    fn a_run_that_ends_at_its_first_loss_but_for_rounding_did_not_learn() {
        // A collapse to a uniform guess over 256 ids: every loss is ln 256, the last a hair lower.
        let monitor = RunMonitor::default();
        monitor.train_loss(1, 5.545177936553955, true);
        let verdict = monitor.verdict(5.545177863194392).expect("a uniform guess did not learn");
        assert!(verdict.contains("(by less than 0.10% of it): the model did not learn"), "{verdict}");
        assert_eq!(monitor.verdict(5.5), None, "a real fall of 0.8% learned");
    }

    #[test]
    fn a_non_finite_gradient_norm_is_a_divergence() {
        let monitor = RunMonitor::default();
        assert!(!monitor.may_apply(f64::NAN));
        assert!(monitor.divergence().unwrap().starts_with("the gradient norm is NaN at step 1: "));
        let resumed = RunMonitor::default();
        resumed.start_at(40);
        assert!(resumed.may_apply(1.0));
        assert!(!resumed.may_apply(f64::INFINITY));
        assert!(resumed.divergence().unwrap().starts_with("the gradient norm is inf at step 42: "));
    }

    #[test]
    fn the_verdict_judges_the_final_loss_against_the_first() {
        let monitor = RunMonitor::default();
        assert_eq!(monitor.verdict(1.0), None);
        monitor.train_loss(1, 3.0, false);
        monitor.train_loss(2, 2.0, true);
        assert_eq!(monitor.first_train_loss(), Some(3.0));
        assert_eq!(monitor.train_losses(), vec![2.0]);
        assert_eq!(monitor.verdict(2.9), None);
        assert!(monitor.verdict(3.0).unwrap().contains("did not learn"));
        assert_eq!(monitor.verdict(f64::INFINITY).unwrap(), "the validation loss is inf");
    }

    #[test]
    fn a_log_failure_is_reported_once() {
        let (events, received) = Events::channel();
        let monitor = RunMonitor::new(events);
        monitor.log_failed("cannot write metrics.jsonl: disk full".into());
        monitor.log_failed("a second failure".into());
        drop(monitor);
        let warnings: Vec<TrainEvent> = received.iter().collect();
        assert_eq!(warnings, vec![TrainEvent::Warning("cannot write metrics.jsonl: disk full".into())]);
    }
}
