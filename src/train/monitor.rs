//! The run monitor: the one place that decides whether a run diverged. The training step reports
//! each gradient norm, the metric logger each training loss, the checkpointing strategy asks
//! whether a checkpoint may be written, and the run (or a sweep judging a finished run) asks for
//! the verdict. Every part of the run reports its events through it.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::train::Interrupter;

use super::events::{Events, TrainEvent};
use crate::run::MetricRow;

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
    /// Whether that was at the first step of a new run, before any update.
    diverged_before_any_update: bool,
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
    /// The step this process started after (a resumed run's checkpoint; 0 for a new run).
    started_at: usize,
    /// When to time the first step from ([`RunMonitor::time_first_step`]).
    first_step_from: Option<std::time::Instant>,
    /// The last training losses (of this process or the log), at most [`RECENT`].
    recent_losses: std::collections::VecDeque<f64>,
    /// The first and the last global gradient norm (of this process or the log).
    grad_norms: Option<(f64, f64)>,
    /// The run computes in f16 (`f16-mixed`), whose range ends at 65504.
    f16: bool,
    /// Whether every step's gradients were finite, as the training step keeps it on the device
    /// ([`StepSettings::sound`](super::StepSettings::sound)); read before each checkpoint.
    sound: Option<SoundFlag>,
}

/// The training step's device-side record of whether every gradient so far was finite.
pub type SoundFlag = std::sync::Arc<std::sync::Mutex<Option<burn::tensor::Tensor<1>>>>;

/// How many of the last training losses stand for where the training loss ended.
const RECENT: usize = 16;

impl std::fmt::Debug for RunMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunMonitor").field("divergence", &self.divergence()).finish_non_exhaustive()
    }
}

/// The advice every divergence ends with.
const ADVICE: &str = "the loss diverged (try a lower --lr or --clip-grad-norm)";

/// Added to a divergence's advice in an `f16-mixed` run.
const F16_ADVICE: &str = "; in f16-mixed an activation or gradient past f16's range (65504) does this too: \
     --precision bf16-mixed has f32's range";

/// What a non-finite value at step 1 of a new run is: no update has been applied, so the
/// learning rate cannot be the cause.
const BEFORE_ANY_UPDATE: &str = "at the first step, before any update, so the learning rate is not the \
     cause: the initial weights give it (check the model file's init_std, embed_init_std and norm_eps, or the \
     weights of --init-from)";

/// The least a loss must fall below the run's first training loss, as a fraction of it, for the
/// run to count as having learned (far below any real run's fall, far above rounding).
pub const LEARNED_AT_LEAST: f64 = 1e-3;

/// A gradient norm below this fraction of the run's first has vanished: with a loss that did not
/// fall, the model has collapsed (it gives every input the same prediction, and nothing moves it).
pub const VANISHED_GRADIENT: f64 = 1e-4;

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

    /// Marks the run diverged at optimiser step `step` for `what` (the first divergence is kept,
    /// with its advice) and stops it.
    fn diverge(&self, step: usize, what: String) {
        let mut state = self.state();
        if state.divergence.is_none() {
            let before_any_update = step == 1 && state.started_at == 0;
            let advice = if before_any_update { BEFORE_ANY_UPDATE } else { ADVICE };
            let range = if state.f16 { F16_ADVICE } else { "" };
            let reason = format!("{what}: {advice}{range}");
            if let Some(interrupter) = &state.interrupter {
                interrupter.stop(Some(&reason));
            }
            state.divergence = Some(reason);
            state.diverged_before_any_update = before_any_update;
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
            self.diverge(step, format!("the training loss is {loss} at step {step}"));
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
            self.diverge(step, format!("the gradient norm is {grad_norm} at step {step}"));
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
    pub fn divergence(&self) -> Option<String> {
        self.state().divergence.clone()
    }

    /// Whether the run diverged at the first step of a new run, before any update: its initial
    /// weights, not its learning rate, gave the non-finite value.
    pub fn diverged_before_any_update(&self) -> bool {
        self.state().diverged_before_any_update
    }

    /// Why a run that ended with validation loss `valid_loss` counts as failed, if it does: a
    /// divergence while it trained, a non-finite validation loss, or a collapse: its gradient norm
    /// vanished (below 1e-4 of its first, `VANISHED_GRADIENT`) while its loss did not fall (the model
    /// gives every input the same prediction, a uniform guess `ln(vocab)` among them, and nothing
    /// moves it any more). A run that is only short, or validated on other data, is not a failure:
    /// [`caution`](Self::caution) says so.
    pub fn verdict(&self, valid_loss: f64) -> Option<String> {
        let state = self.state();
        if let Some(reason) = &state.divergence {
            return Some(reason.clone());
        }
        if !valid_loss.is_finite() {
            return Some(format!("the validation loss is {valid_loss}"));
        }
        // A loss that ended far above where it started (yet finite): the updates overshot.
        if let Some(first) = state.first_train_loss.filter(|_| !state.recent_losses.is_empty()) {
            let recent = state.recent_losses.iter().sum::<f64>() / state.recent_losses.len() as f64;
            let rose = |loss: f64| loss > 2.0 * first.abs() + 1.0;
            if rose(recent) && rose(valid_loss) {
                return Some(format!(
                    "the loss exploded: it rose from {first:.4} to {recent:.4} (training, the mean of its last \
                     losses) and {valid_loss:.4} (validation); train again with a lower --lr or --clip-grad-norm 1"
                ));
            }
        }
        let (Some(first), Some((first_norm, last_norm))) = (state.first_train_loss, state.grad_norms) else {
            return None;
        };
        let vanished = last_norm <= VANISHED_GRADIENT * first_norm;
        let fell = |loss: f64| loss < first - LEARNED_AT_LEAST * first.abs();
        if !vanished || fell(valid_loss) {
            return None;
        }
        if first_norm == 0.0 {
            // Nothing could move it from the start: no learning rate is to blame.
            return Some(format!(
                "the model could not learn: its gradient norm was 0 from the first step and its validation loss \
                 {valid_loss:.4} is no lower than its first training loss {first:.4} (its settings block every \
                 gradient: check the model's init_std and embed_init_std, and the scheme's and the init's \
                 arguments, such as a residual factor or gate)"
            ));
        }
        Some(format!(
            "the model collapsed: its gradient norm vanished ({first_norm:.3e} at the first step, {last_norm:.3e} at \
             the last) and its validation loss {valid_loss:.4} is no lower than its first training loss {first:.4}, so \
             it gives every input the same prediction (try a lower --lr, or --clip-grad-norm 1)"
        ))
    }

    /// A warning for a run that is no failure (no [`verdict`](Self::verdict)) but whose validation
    /// loss `valid_loss` is no lower than its first training loss, saying which of the two it looks
    /// like: validation data unlike the training data (the training loss fell), or a run too short
    /// to learn (it did not).
    pub fn caution(&self, valid_loss: f64) -> Option<String> {
        if self.verdict(valid_loss).is_some() {
            return None;
        }
        let state = self.state();
        let first = state.first_train_loss?;
        let fell = |loss: f64| loss < first - LEARNED_AT_LEAST * first.abs();
        if fell(valid_loss) {
            return None;
        }
        let recent = state.recent_losses.iter().sum::<f64>() / state.recent_losses.len().max(1) as f64;
        Some(if fell(recent) {
            format!(
                "the validation loss {valid_loss:.4} is no lower than the first training loss {first:.4}, though the \
                 training loss fell to {recent:.4} (the mean of its last losses): the validation data looks unlike the training data (or the model \
                 overfits)"
            )
        } else {
            format!(
                "neither the training loss ({recent:.4} at the end) nor the validation loss ({valid_loss:.4}) fell \
                 below the first training loss {first:.4} in {} step{}: the run is too short to learn, or its \
                 learning rate too low",
                state.steps,
                if state.steps == 1 { "" } else { "s" }
            )
        })
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
        assert!(!f32_reason.contains("f16") && f16_reason.contains("bf16-mixed has f32's range"), "{f16_reason}");
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
        assert_eq!(monitor.divergence().unwrap(), format!("the training loss is inf at step 2: {ADVICE}"));
        assert_eq!(monitor.train_losses().len(), 2);
    }

    #[test]
    fn a_collapse_is_a_failure_and_says_so() {
        // A collapse to a uniform guess over 256 ids: every loss is ln 256, the last a hair lower,
        // and the gradient norm falls to 0.
        let monitor = RunMonitor::default();
        monitor.train_loss(1, 5.545177936553955, true);
        assert!(monitor.may_apply(1.3));
        assert!(monitor.may_apply(0.0));
        let verdict = monitor.verdict(5.545177863194392).expect("a uniform guess that nothing moves");
        assert!(verdict.contains("the model collapsed") && verdict.contains("same prediction"), "{verdict}");
        assert_eq!(monitor.caution(5.545177863194392), None, "the verdict says it");
        assert_eq!(monitor.verdict(5.5), None, "a real fall of 0.8% learned");
        // A gradient of 0 from the first step: no learning rate is to blame.
        let blocked = RunMonitor::default();
        blocked.train_loss(1, 5.545, true);
        assert!(blocked.may_apply(0.0) && blocked.may_apply(0.0));
        let verdict = blocked.verdict(5.545).unwrap();
        assert!(verdict.contains("could not learn") && !verdict.contains("--lr"), "{verdict}");
    }

    #[test]
    fn a_short_run_or_other_validation_data_is_cautioned_not_failed() {
        // A 4-step smoke run: the losses barely move, the gradients do not vanish.
        let short = RunMonitor::default();
        for (step, loss) in [(1, 5.56), (2, 5.561), (3, 5.559), (4, 5.558)] {
            short.train_loss(step, loss, true);
            assert!(short.may_apply(1.0 - step as f64 * 0.01));
        }
        assert_eq!(short.verdict(5.562), None);
        let caution = short.caution(5.562).unwrap();
        assert!(caution.contains("too short to learn") && caution.contains("in 4 steps"), "{caution}");
        // Out-of-domain validation data: the training loss fell from 5.574 to 2.479.
        let other = RunMonitor::default();
        other.train_loss(1, 5.574, true);
        other.train_loss(2, 2.479, true);
        assert!(other.may_apply(2.0) && other.may_apply(0.5));
        assert_eq!(other.verdict(6.1), None);
        assert!(other.caution(6.1).unwrap().contains("unlike the training data"));
        assert_eq!(other.caution(2.6), None, "a run that learned needs no caution");
    }

    #[test]
    fn a_finished_runs_log_is_judged_with_its_gradient_norms() {
        let row = |metric: &str, step: usize, value: f64| MetricRow {
            split: "train".into(),
            epoch: 1,
            batch: step,
            step,
            metric: metric.into(),
            value,
            count: Some(1),
            is_final: false,
        };
        let log = [row("Loss", 1, 5.545), row("Gradient norm", 1, 2.0), row("Loss", 2, 5.545)];
        let monitor = RunMonitor::default();
        monitor.read_log(&[&log[..], &[row("Gradient norm", 2, f64::NAN), row("Gradient norm", 2, 1e-9)]].concat());
        assert!(monitor.verdict(5.545).unwrap().contains("collapsed"));
        let monitor = RunMonitor::default();
        monitor.read_log(&[&log[..], &[row("Gradient norm", 2, 1.5)]].concat());
        assert_eq!(monitor.verdict(5.545), None);
    }

    #[test]
    fn a_non_finite_gradient_norm_is_a_divergence() {
        let monitor = RunMonitor::default();
        assert!(!monitor.may_apply(f64::NAN));
        // At step 1 no update was applied: the learning rate is not blamed.
        let first = monitor.divergence().unwrap();
        assert!(first.starts_with("the gradient norm is NaN at step 1: ") && first.contains("init_std"), "{first}");
        assert!(!first.contains("--lr"), "{first}");
        let resumed = RunMonitor::default();
        resumed.start_at(40);
        assert!(resumed.may_apply(1.0));
        assert!(!resumed.may_apply(f64::INFINITY));
        let later = resumed.divergence().unwrap();
        assert!(later.starts_with("the gradient norm is inf at step 42: ") && later.contains("--lr"), "{later}");
    }

    #[test]
    fn a_loss_that_rose_is_blamed_on_too_large_updates_not_too_small() {
        let monitor = RunMonitor::default();
        monitor.train_loss(1, 5.57, true);
        monitor.train_loss(2, 44618.0, true);
        let verdict = monitor.verdict(26000.0).unwrap();
        assert!(verdict.contains("the loss exploded") && verdict.contains("lower --lr"), "{verdict}");
        assert_eq!(monitor.caution(26000.0), None, "not also 'too short, or its learning rate too low'");
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
    fn the_verdict_judges_the_final_loss_against_the_first() {
        let monitor = RunMonitor::default();
        assert_eq!(monitor.verdict(1.0), None);
        monitor.train_loss(1, 3.0, false);
        monitor.train_loss(2, 2.0, true);
        assert_eq!(monitor.first_train_loss(), Some(3.0));
        assert_eq!(monitor.train_losses(), vec![2.0]);
        assert_eq!(monitor.verdict(2.9), None);
        assert_eq!(monitor.verdict(3.0), None, "no gradient norm vanished: not a collapse");
        assert!(monitor.caution(3.0).unwrap().contains("though the training loss fell to 2.5000"));
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
