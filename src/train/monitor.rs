//! The run monitor: the one place that decides whether a run diverged. The training step reports
//! each gradient norm, the metric logger each training loss, the checkpointing strategy asks
//! whether a checkpoint may be written, and the run (or a sweep judging a finished run) asks for
//! the verdict. Every part of the run reports its events through it.
//!
//! burn-train's nearest piece, `MetricEarlyStoppingStrategy`, judges an epoch's aggregated metric
//! once the epoch is over; a divergence must be caught at the step it happens, stop the run
//! there, and keep any checkpoint from being written after it, which no burn-train piece does.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::train::Interrupter;

use super::events::{Events, TrainEvent};
use crate::divergence::{DivergedValue, Divergence};
use crate::run::MetricRow;

/// What a run's parts report to, shared by all of them (burn-train calls them from its threads).
#[derive(Default)]
pub struct RunMonitor {
    events: Events,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    /// Why the run diverged: the first divergence reported.
    pub(super) divergence: Option<Divergence>,
    /// Stopped when the run diverges.
    pub(super) interrupter: Option<Interrupter>,
    /// The run's first training loss (a resumed run's, from its log).
    pub(super) first_train_loss: Option<f64>,
    /// Training losses of every micro-batch this process trained, in order.
    pub(super) train_losses: Vec<f64>,
    /// The first failure of the metric log: the model is good, the run's record is not.
    pub(super) log_failure: Option<String>,
    /// Optimiser steps done, including those of a resumed run's checkpoint.
    pub(super) steps: usize,
    /// The step this process started after (a resumed run's checkpoint; 0 for a new run).
    pub(super) started_at: usize,
    /// When to time the first step from ([`RunMonitor::time_first_step`]).
    pub(super) first_step_from: Option<std::time::Instant>,
    /// The last training losses (of this process or the log), at most [`RECENT`].
    pub(super) recent_losses: std::collections::VecDeque<f64>,
    /// The first and the last global gradient norm (of this process or the log).
    pub(super) grad_norms: Option<(f64, f64)>,
    /// The run computes in f16 (`f16-mixed`), whose range ends at 65504.
    f16: bool,
    /// Whether every step's gradients were finite, as the training step keeps it on the device
    /// ([`StepSettings::sound`](super::StepSettings::sound)); read before each checkpoint.
    pub(super) sound: Option<SoundFlag>,
}

/// The training step's device-side record of whether every gradient so far was finite.
pub type SoundFlag = std::sync::Arc<std::sync::Mutex<Option<burn::tensor::Tensor<1>>>>;

/// How many of the last training losses stand for where the training loss ended.
pub(super) const RECENT: usize = 16;

impl std::fmt::Debug for RunMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunMonitor").field("divergence", &self.divergence()).finish_non_exhaustive()
    }
}

impl RunMonitor {
    /// A monitor sending the run's events to `events`.
    pub fn new(events: Events) -> Arc<Self> {
        Arc::new(Self { events, state: Mutex::default() })
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
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
        if let Some(divergence) = &state.divergence {
            interrupter.stop(Some(&divergence.to_string()));
        }
        state.interrupter = Some(interrupter);
    }

    /// Marks the run diverged at optimiser step `step` for `value` (the first divergence is kept)
    /// and stops it.
    fn diverge(&self, step: usize, value: DivergedValue) {
        let mut state = self.state();
        if state.divergence.is_none() {
            let before_any_update = step == 1 && state.started_at == 0;
            let divergence = Divergence { step, value, before_any_update, in_f16: state.f16 };
            if let Some(interrupter) = &state.interrupter {
                interrupter.stop(Some(&divergence.to_string()));
            }
            state.divergence = Some(divergence);
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
            if state.recent_losses.len() == RECENT {
                state.recent_losses.pop_front();
            }
            state.recent_losses.push_back(loss);
        }
        if !loss.is_finite() {
            self.diverge(step, DivergedValue::TrainLoss(loss));
        }
    }

    /// The training losses of a run's log (`metrics.jsonl`) that this process did not train:
    /// those a resumed run keeps, or those of a finished run being judged.
    pub fn read_log(&self, rows: &[MetricRow]) {
        for row in rows.iter().filter(|row| row.split == "train" && row.is_batch_value()) {
            match row.metric.as_str() {
                "Loss" => self.train_loss(row.step, row.value, false),
                // Micro-batches that do not end a step log no norm (NaN, weight 0).
                "Gradient norm" if row.value.is_finite() => self.grad_norm(row.value),
                _ => {}
            }
        }
    }

    /// Records a finite global gradient norm.
    fn grad_norm(&self, norm: f64) {
        let mut state = self.state();
        let first = state.grad_norms.map_or(norm, |(first, _)| first);
        state.grad_norms = Some((first, norm));
    }

    /// The run starts after `step` optimiser steps (those of the checkpoint it resumes from).
    pub fn start_at(&self, step: usize) {
        let mut state = self.state();
        state.steps = step;
        state.started_at = step;
    }

    /// Reports, once the first step of this process ends, how long it took from now (on a GPU:
    /// compiling and autotuning kernels).
    pub fn time_first_step(&self) {
        self.state().first_step_from = Some(std::time::Instant::now());
    }

    /// The global norm of the next optimiser step's gradients: whether they may be applied (a
    /// non-finite norm is a divergence; after a divergence, no step is applied).
    pub fn may_apply(&self, grad_norm: f64) -> bool {
        let Some(step) = self.next_step() else { return false };
        self.check_grad_norm(step, grad_norm);
        !self.has_diverged()
    }

    /// Counts an optimiser step about to be taken, and returns its number, unless the run has
    /// diverged (then no step may be applied). The first one's time is reported.
    pub fn next_step(&self) -> Option<usize> {
        let (step, first_step_from) = {
            let mut state = self.state();
            state.steps += 1;
            (state.steps, state.first_step_from.take())
        };
        if let Some(from) = first_step_from {
            let seconds = from.elapsed().as_secs_f64();
            self.report(TrainEvent::Note(format!("the first step took {seconds:.1} s (kernels compiled and tuned)")));
        }
        (!self.has_diverged()).then_some(step)
    }

    /// The global gradient norm of step `step`, read once the step is on its way (the training
    /// step leaves it on the device; the metrics read it): a non-finite norm is a divergence.
    pub fn check_grad_norm(&self, step: usize, grad_norm: f64) {
        if grad_norm.is_finite() {
            self.grad_norm(grad_norm);
        } else {
            self.diverge(step, DivergedValue::GradNorm(grad_norm));
        }
    }

    /// Says the run computes in f16 (`f16-mixed`): a divergence's advice names f16's range.
    pub fn in_f16(&self) {
        self.state().f16 = true;
    }

    /// An optimiser step skipped because its scaled f16 gradients overflowed; the loss scale is now
    /// `lowered_to` ([`LossScale`](super::loss_scale::LossScale)).
    pub fn skip_overflowed_step(&self, lowered_to: f64) {
        let step = {
            let mut state = self.state();
            state.steps += 1;
            state.steps
        };
        self.report_skipped_step(step, lowered_to);
    }

    /// Says that step `step` (counted by [`next_step`](Self::next_step) when the device decided
    /// it) was skipped because its scaled f16 gradients overflowed, the loss scale lowered to
    /// `lowered_to`: heard when the metrics read the step's norm.
    pub fn report_skipped_step(&self, step: usize, lowered_to: f64) {
        self.report(TrainEvent::Note(format!(
            "step {step}: the scaled f16 gradients overflowed; the step is skipped and the loss scale lowered to \
             {lowered_to}"
        )));
    }

    /// Whether no step may be applied any more.
    pub fn has_diverged(&self) -> bool {
        self.state().divergence.is_some()
    }

    /// Whether a checkpoint with validation loss `valid_loss` may be written: only while the run
    /// is sound, so that every checkpoint kept can be resumed from.
    pub fn may_checkpoint(&self, valid_loss: Option<f64>) -> bool {
        !self.has_diverged() && valid_loss.is_some_and(f64::is_finite) && self.every_step_was_sound()
    }

    /// Watches `sound`, the training step's device-side record of finite gradients: a checkpoint
    /// is refused once it is false, even before the host has read the norm that made it so (the
    /// metrics then report the divergence with its step).
    pub fn watch_soundness(&self, sound: SoundFlag) {
        self.state().sound = Some(sound);
    }

    /// Whether the watched record (if any) says every step's gradients were finite: one read of
    /// the device, at a checkpoint.
    fn every_step_was_sound(&self) -> bool {
        let Some(sound) = self.state().sound.clone() else { return true };
        let flag = sound.lock().unwrap_or_else(|e| e.into_inner()).clone();
        flag.is_none_or(|flag| flag.try_into_scalar::<f32>().is_ok_and(|sound| sound > 0.5))
    }

    /// Why the run diverged, if it did.
    pub fn divergence(&self) -> Option<Divergence> {
        self.state().divergence.clone()
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
    fn an_f16_run_is_told_of_f16s_range_when_it_diverges_and_a_skipped_step_counts() {
        let (f32_run, f16_run) = (RunMonitor::default(), RunMonitor::default());
        f16_run.in_f16();
        f16_run.skip_overflowed_step(32768.0);
        for monitor in [&f32_run, &f16_run] {
            assert!(monitor.may_apply(1.0));
            monitor.train_loss(2, f64::NAN, true);
        }
        let (f32_reason, f16_reason) = (f32_run.divergence().unwrap(), f16_run.divergence().unwrap());
        assert!(!f32_reason.in_f16 && f16_reason.in_f16, "{f16_reason:?}");
        assert_eq!(f16_run.state().steps, 2, "the skipped step and the applied one");
    }

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
        let expected = Divergence {
            step: 2,
            value: DivergedValue::TrainLoss(f64::INFINITY),
            before_any_update: false,
            in_f16: false,
        };
        assert_eq!(monitor.divergence(), Some(expected));
        assert_eq!(monitor.train_losses().len(), 2);
    }

    #[test]
    fn a_non_finite_gradient_norm_is_a_divergence() {
        let monitor = RunMonitor::default();
        assert!(!monitor.may_apply(f64::NAN));
        // At step 1 no update was applied: the learning rate is not blamed.
        let first = monitor.divergence().unwrap();
        assert!(first.step == 1 && first.before_any_update && first.value.get().is_nan(), "{first:?}");
        assert!(matches!(first.value, DivergedValue::GradNorm(_)), "{first:?}");
        let resumed = RunMonitor::default();
        resumed.start_at(40);
        assert!(resumed.may_apply(1.0));
        assert!(!resumed.may_apply(f64::INFINITY));
        let later = resumed.divergence().unwrap();
        let expected = DivergedValue::GradNorm(f64::INFINITY);
        assert!(later.step == 42 && later.value == expected && !later.before_any_update, "{later:?}");
    }

    #[test]
    fn the_first_step_is_timed_once_when_asked() {
        let (events, received) = super::Events::channel();
        let monitor = RunMonitor::new(events);
        assert!(monitor.may_apply(1.0));
        monitor.time_first_step();
        assert!(monitor.may_apply(1.0) && monitor.may_apply(1.0));
        let notes: Vec<String> = received.try_iter().map(|event| event.to_string()).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("the first step took") && notes[0].contains(" s "), "{notes:?}");
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
