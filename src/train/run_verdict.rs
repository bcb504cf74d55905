//! The run monitor's judgement of a finished run ([`RunMonitor::verdict`] and
//! [`RunMonitor::caution`]): a divergence, an explosion or a collapse fails it ([`RunFailure`]); a
//! run that is only short, or validated on other data, is cautioned ([`RunCaution`]).

use super::monitor::RunMonitor;
use crate::divergence::Divergence;

/// The least a loss must fall below the run's first training loss, as a fraction of it, for the
/// run to count as having learned (far below any real run's fall, far above rounding).
pub const LEARNED_AT_LEAST: f64 = 1e-3;

/// A gradient norm below this fraction of the run's first has vanished: with a loss that did not
/// fall, the model has collapsed (it gives every input the same prediction, and nothing moves it).
pub const VANISHED_GRADIENT: f64 = 1e-4;

/// Why a run that ran to its end counts as failed: a divergence, or the losses it is judged by
/// (`first` is the run's first training loss, `valid_loss` its final validation loss).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunFailure {
    /// A value went non-finite while it trained (a sweep judging a finished run reads it from the
    /// run's log).
    #[error(transparent)]
    Diverged(Divergence),
    /// The final validation loss is NaN or infinite.
    #[error("the validation loss is {valid_loss}")]
    NonFiniteValidLoss {
        /// The validation loss.
        valid_loss: f64,
    },
    /// The loss ended far above where it started (yet finite): the updates overshot.
    #[error(
        "the loss exploded: it rose from {first:.4} to {recent:.4} (training, the mean of its last losses) and \
         {valid_loss:.4} (validation); train again with a lower --lr or --clip-grad-norm 1"
    )]
    Exploded {
        /// The first training loss.
        first: f64,
        /// The mean of the last training losses.
        recent: f64,
        /// The validation loss.
        valid_loss: f64,
    },
    /// The gradient norm was 0 from the first step and the loss did not fall: the settings block
    /// every gradient, no learning rate is to blame.
    #[error(
        "the model could not learn: its gradient norm was 0 from the first step and its validation loss \
         {valid_loss:.4} is no lower than its first training loss {first:.4} (its settings block every gradient: \
         check the model's init_std and embed_init_std, and the scheme's and the init's arguments, such as a \
         residual factor or gate)"
    )]
    CouldNotLearn {
        /// The first training loss.
        first: f64,
        /// The validation loss.
        valid_loss: f64,
    },
    /// The gradient norm vanished (below [`VANISHED_GRADIENT`] of its first) while the loss did
    /// not fall: the model gives every input the same prediction, and nothing moves it.
    #[error(
        "the model collapsed: its gradient norm vanished ({first_norm:.3e} at the first step, {last_norm:.3e} at the \
         last) and its validation loss {valid_loss:.4} is no lower than its first training loss {first:.4}, so it \
         gives every input the same prediction (try a lower --lr, or --clip-grad-norm 1)"
    )]
    Collapsed {
        /// The first training loss.
        first: f64,
        /// The first step's gradient norm.
        first_norm: f64,
        /// The last step's gradient norm.
        last_norm: f64,
        /// The validation loss.
        valid_loss: f64,
    },
}

/// Why a run that is no failure still did not learn: its validation loss is no lower than its
/// first training loss (`first`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunCaution {
    /// The training loss fell but the validation loss did not: the validation data looks unlike
    /// the training data (or the model overfits).
    #[error(
        "the validation loss {valid_loss:.4} is no lower than the first training loss {first:.4}, though the \
         training loss fell to {recent:.4} (the mean of its last losses): the validation data looks unlike the \
         training data (or the model overfits)"
    )]
    UnlikeTraining {
        /// The first training loss.
        first: f64,
        /// The mean of the last training losses.
        recent: f64,
        /// The validation loss.
        valid_loss: f64,
    },
    /// Neither loss fell: the run is too short to learn, or its learning rate too low.
    #[error(
        "neither the training loss ({recent:.4} at the end) nor the validation loss ({valid_loss:.4}) fell below the \
         first training loss {first:.4} in {steps} step{}: the run is too short to learn, or its learning rate too \
         low",
        if *.steps == 1 { "" } else { "s" }
    )]
    TooShort {
        /// The first training loss.
        first: f64,
        /// The mean of the last training losses.
        recent: f64,
        /// The validation loss.
        valid_loss: f64,
        /// The run's optimiser steps.
        steps: usize,
    },
}

impl RunMonitor {
    /// Why a run that ended with validation loss `valid_loss` counts as failed, if it does: a
    /// divergence while it trained, a non-finite validation loss, an explosion, or a collapse: its
    /// gradient norm vanished while its loss did not fall. A run that is only short, or validated
    /// on other data, is not a failure: [`caution`](Self::caution) says so.
    pub fn verdict(&self, valid_loss: f64) -> Option<RunFailure> {
        let state = self.state();
        if let Some(divergence) = &state.divergence {
            return Some(RunFailure::Diverged(divergence.clone()));
        }
        if !valid_loss.is_finite() {
            return Some(RunFailure::NonFiniteValidLoss { valid_loss });
        }
        if let Some(first) = state.first_train_loss.filter(|_| !state.recent_losses.is_empty()) {
            let recent = state.recent_losses.iter().sum::<f64>() / state.recent_losses.len() as f64;
            let rose = |loss: f64| loss > 2.0 * first.abs() + 1.0;
            if rose(recent) && rose(valid_loss) {
                return Some(RunFailure::Exploded { first, recent, valid_loss });
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
            return Some(RunFailure::CouldNotLearn { first, valid_loss });
        }
        Some(RunFailure::Collapsed { first, first_norm, last_norm, valid_loss })
    }

    /// A caution for a run that is no failure (no [`verdict`](Self::verdict)) but whose validation
    /// loss `valid_loss` is no lower than its first training loss, saying which of the two it looks
    /// like: validation data unlike the training data (the training loss fell), or a run too short
    /// to learn (it did not).
    pub fn caution(&self, valid_loss: f64) -> Option<RunCaution> {
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
            RunCaution::UnlikeTraining { first, recent, valid_loss }
        } else {
            RunCaution::TooShort { first, recent, valid_loss, steps: state.steps }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::MetricRow;
    #[test]
    fn a_collapse_is_a_failure_and_says_so() {
        // A collapse to a uniform guess over 256 ids: every loss is ln 256, the last a hair lower,
        // and the gradient norm falls to 0.
        let monitor = RunMonitor::default();
        monitor.train_loss(1, 5.545177936553955, true);
        assert!(monitor.may_apply(1.3));
        assert!(monitor.may_apply(0.0));
        let verdict = monitor.verdict(5.545177863194392).expect("a uniform guess that nothing moves");
        assert!(matches!(verdict, RunFailure::Collapsed { last_norm, .. } if last_norm == 0.0), "{verdict:?}");
        assert_eq!(monitor.caution(5.545177863194392), None, "the verdict says it");
        assert!(monitor.verdict(5.5).is_none(), "a real fall of 0.8% learned");
        // A gradient of 0 from the first step: no learning rate is to blame.
        let blocked = RunMonitor::default();
        blocked.train_loss(1, 5.545, true);
        assert!(blocked.may_apply(0.0) && blocked.may_apply(0.0));
        let verdict = blocked.verdict(5.545).unwrap();
        assert!(matches!(verdict, RunFailure::CouldNotLearn { first: 5.545, valid_loss: 5.545 }), "{verdict:?}");
    }

    #[test]
    fn each_failure_and_caution_says_what_it_saw_and_what_to_do() {
        let says = |judgement: &dyn std::fmt::Display| judgement.to_string();
        assert_eq!(says(&RunFailure::NonFiniteValidLoss { valid_loss: f64::INFINITY }), "the validation loss is inf");
        assert_eq!(
            says(&RunFailure::Exploded { first: 5.57, recent: 44618.0, valid_loss: 26000.0 }),
            "the loss exploded: it rose from 5.5700 to 44618.0000 (training, the mean of its last losses) and \
             26000.0000 (validation); train again with a lower --lr or --clip-grad-norm 1"
        );
        assert_eq!(
            says(&RunFailure::CouldNotLearn { first: 5.545, valid_loss: 5.545 }),
            "the model could not learn: its gradient norm was 0 from the first step and its validation loss 5.5450 \
             is no lower than its first training loss 5.5450 (its settings block every gradient: check the model's \
             init_std and embed_init_std, and the scheme's and the init's arguments, such as a residual factor or \
             gate)"
        );
        assert_eq!(
            says(&RunFailure::Collapsed { first: 5.545, first_norm: 2.0, last_norm: 1e-9, valid_loss: 5.545 }),
            "the model collapsed: its gradient norm vanished (2.000e0 at the first step, 1.000e-9 at the last) and \
             its validation loss 5.5450 is no lower than its first training loss 5.5450, so it gives every input the \
             same prediction (try a lower --lr, or --clip-grad-norm 1)"
        );
        assert_eq!(
            says(&RunCaution::UnlikeTraining { first: 3.0, recent: 2.5, valid_loss: 3.0 }),
            "the validation loss 3.0000 is no lower than the first training loss 3.0000, though the training loss \
             fell to 2.5000 (the mean of its last losses): the validation data looks unlike the training data (or \
             the model overfits)"
        );
        let short = |steps| says(&RunCaution::TooShort { first: 5.56, recent: 5.558, valid_loss: 5.562, steps });
        assert_eq!(
            short(4),
            "neither the training loss (5.5580 at the end) nor the validation loss (5.5620) fell below the first \
             training loss 5.5600 in 4 steps: the run is too short to learn, or its learning rate too low"
        );
        assert!(short(1).contains(" in 1 step: "), "{}", short(1));
    }

    #[test]
    fn a_short_run_or_other_validation_data_is_cautioned_not_failed() {
        // A 4-step smoke run: the losses barely move, the gradients do not vanish.
        let short = RunMonitor::default();
        for (step, loss) in [(1, 5.56), (2, 5.561), (3, 5.559), (4, 5.558)] {
            short.train_loss(step, loss, true);
            assert!(short.may_apply(1.0 - step as f64 * 0.01));
        }
        assert!(short.verdict(5.562).is_none());
        let caution = short.caution(5.562).unwrap();
        assert!(matches!(caution, RunCaution::TooShort { steps: 4, valid_loss: 5.562, .. }), "{caution:?}");
        // Out-of-domain validation data: the training loss fell from 5.574 to 2.479.
        let other = RunMonitor::default();
        other.train_loss(1, 5.574, true);
        other.train_loss(2, 2.479, true);
        assert!(other.may_apply(2.0) && other.may_apply(0.5));
        assert!(other.verdict(6.1).is_none());
        assert!(matches!(other.caution(6.1), Some(RunCaution::UnlikeTraining { first: 5.574, .. })));
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
        assert!(matches!(monitor.verdict(5.545), Some(RunFailure::Collapsed { first_norm: 2.0, .. })));
        let monitor = RunMonitor::default();
        monitor.read_log(&[&log[..], &[row("Gradient norm", 2, 1.5)]].concat());
        assert!(monitor.verdict(5.545).is_none());
    }

    #[test]
    fn a_loss_that_rose_is_blamed_on_too_large_updates_not_too_small() {
        let monitor = RunMonitor::default();
        monitor.train_loss(1, 5.57, true);
        monitor.train_loss(2, 44618.0, true);
        let verdict = monitor.verdict(26000.0).unwrap();
        assert!(matches!(verdict, RunFailure::Exploded { first: 5.57, valid_loss: 26000.0, .. }), "{verdict:?}");
        assert_eq!(monitor.caution(26000.0), None, "not also 'too short, or its learning rate too low'");
    }

    #[test]
    fn the_verdict_judges_the_final_loss_against_the_first() {
        let monitor = RunMonitor::default();
        assert!(monitor.verdict(1.0).is_none());
        monitor.train_loss(1, 3.0, false);
        monitor.train_loss(2, 2.0, true);
        assert_eq!(monitor.first_train_loss(), Some(3.0));
        assert_eq!(monitor.train_losses(), vec![2.0]);
        assert!(monitor.verdict(2.9).is_none());
        assert!(monitor.verdict(3.0).is_none(), "no gradient norm vanished: not a collapse");
        let caution = monitor.caution(3.0);
        assert_eq!(caution, Some(RunCaution::UnlikeTraining { first: 3.0, recent: 2.5, valid_loss: 3.0 }));
        let verdict = monitor.verdict(f64::INFINITY);
        assert!(matches!(verdict, Some(RunFailure::NonFiniteValidLoss { valid_loss }) if valid_loss == f64::INFINITY));
    }
}
