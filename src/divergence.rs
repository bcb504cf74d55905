//! Why a run diverged ([`Divergence`]): the first value that went non-finite, at its optimiser
//! step, and the advice for it written once. The training monitor decides it; the crate's
//! [`Error::Diverged`](crate::error::Error::Diverged) and a run's verdict carry it. A leaf of its
//! own, so that the crate's error does not depend on `train/`.

use std::fmt;

/// The value that went non-finite.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum DivergedValue {
    /// A micro-batch's training loss.
    TrainLoss(f64),
    /// The step's global gradient norm.
    GradNorm(f64),
}

impl DivergedValue {
    /// The number itself (NaN or infinite).
    pub fn get(self) -> f64 {
        match self {
            DivergedValue::TrainLoss(value) | DivergedValue::GradNorm(value) => value,
        }
    }
}

/// Equal when the same quantity holds the same bits: a NaN loss equals itself, so a
/// [`Divergence`] does too.
impl PartialEq for DivergedValue {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other) && self.get().to_bits() == other.get().to_bits()
    }
}

impl fmt::Display for DivergedValue {
    /// `the training loss is NaN`, `the gradient norm is inf`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DivergedValue::TrainLoss(loss) => write!(f, "the training loss is {loss}"),
            DivergedValue::GradNorm(norm) => write!(f, "the gradient norm is {norm}"),
        }
    }
}

/// A run's divergence: the first non-finite value, the optimiser step it came at, and what the
/// advice depends on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "{value} at step {step}: {}{}",
    if *.before_any_update { BEFORE_ANY_UPDATE } else { ADVICE },
    if *.in_f16 { F16_ADVICE } else { "" }
)]
pub struct Divergence {
    /// The optimiser step (from 1, counting a resumed run's earlier steps).
    pub step: usize,
    /// What went non-finite.
    pub value: DivergedValue,
    /// Whether it came at the first step of a new run, before any update: the initial weights gave
    /// it, not the learning rate.
    pub before_any_update: bool,
    /// Whether the run computed in f16 (`f16-mixed`), whose range ends at 65504.
    pub in_f16: bool,
}

/// The advice every divergence after an update ends with.
const ADVICE: &str = "the loss diverged (try a lower --lr or --clip-grad-norm)";

/// What a non-finite value at step 1 of a new run is: no update has been applied, so the
/// learning rate cannot be the cause.
const BEFORE_ANY_UPDATE: &str = "at the first step, before any update, so the learning rate is not the \
     cause: the initial weights give it (check the model file's init_std, embed_init_std and norm_eps, or the \
     weights of --init-from)";

/// Added to a divergence's advice in an `f16-mixed` run.
const F16_ADVICE: &str = "; in f16-mixed an activation or gradient past f16's range (65504) does this too: \
     --precision bf16-mixed has f32's range";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advice_follows_what_the_run_had_done_and_computed_in() {
        let at = |step, before_any_update, in_f16| {
            Divergence { step, value: DivergedValue::TrainLoss(f64::NAN), before_any_update, in_f16 }.to_string()
        };
        let after = "the training loss is NaN at step 3: the loss diverged (try a lower --lr or --clip-grad-norm)";
        assert_eq!(at(3, false, false), after);
        assert_eq!(
            at(1, true, false),
            "the training loss is NaN at step 1: at the first step, before any update, so the learning rate is not \
             the cause: the initial weights give it (check the model file's init_std, embed_init_std and norm_eps, \
             or the weights of --init-from)"
        );
        assert_eq!(
            at(3, false, true),
            format!(
                "{after}; in f16-mixed an activation or gradient past f16's range (65504) does this too: --precision \
                 bf16-mixed has f32's range"
            )
        );
        let nan =
            Divergence { step: 2, value: DivergedValue::GradNorm(f64::NAN), before_any_update: false, in_f16: false };
        assert_eq!(nan, nan.clone(), "a NaN divergence equals itself");
        assert_ne!(nan.value, DivergedValue::TrainLoss(f64::NAN));
    }
}
