//! Dynamic loss scaling for f16 mixed precision, as PyTorch's `GradScaler`: the loss is multiplied
//! by a scale before the backward pass, so that gradients too small for f16 (which loses precision
//! below 6e-5 and flushes to zero below 6e-8) survive its products, and the gradients are divided
//! by it before the optimiser sees them. A step whose scaled gradients overflow (a non-finite
//! global norm) is skipped and the scale halved; after [`GROWTH_INTERVAL`] good steps in a row it
//! is doubled. At [`MIN_LOSS_SCALE`] an overflow is no longer skipped: it is a divergence, and
//! stops the run.

use std::sync::{Arc, Mutex};

use crate::Precision;

/// The first scale: 2^16, PyTorch's.
pub const INITIAL_LOSS_SCALE: f64 = 65536.0;

/// Good steps in a row after which the scale doubles (PyTorch's 2000).
pub const GROWTH_INTERVAL: usize = 2000;

/// Below this the scale stops halving: gradients that overflow f16 even unscaled are a
/// divergence, which the run's monitor reports, not something scaling can cure.
pub const MIN_LOSS_SCALE: f64 = 1.0;

/// What to do with one optimiser step's scaled gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScaledStep {
    /// Finite: multiply the gradients (and their norm) by `unscale`, then apply them.
    Apply {
        /// `1 / scale`.
        unscale: f64,
    },
    /// Overflowed: skip the step; the scale is now `lowered_to`.
    Skip {
        /// The new, halved scale.
        lowered_to: f64,
    },
}

/// The loss scale of a run, shared by its micro-batches and its optimiser steps.
#[derive(Debug)]
pub struct LossScale {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    scale: f64,
    good_steps: usize,
    skipped: usize,
}

impl LossScale {
    /// A scale starting at `initial` (a power of two keeps the scaling exact).
    pub fn new(initial: f64) -> Self {
        Self { state: Mutex::new(State { scale: initial, good_steps: 0, skipped: 0 }) }
    }

    /// The loss scale a run in `precision` needs: one from [`INITIAL_LOSS_SCALE`] for f16 mixed
    /// precision, none otherwise.
    pub fn for_precision(precision: Precision) -> Option<Arc<Self>> {
        precision.scales_loss().then(|| Arc::new(Self::new(INITIAL_LOSS_SCALE)))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The factor the loss is multiplied by now.
    pub fn scale(&self) -> f64 {
        self.state().scale
    }

    /// Steps skipped for overflow so far.
    pub fn skipped(&self) -> usize {
        self.state().skipped
    }

    /// Decides an optimiser step from the global norm of its scaled gradients, and updates the
    /// scale: halved on overflow (not below [`MIN_LOSS_SCALE`]), doubled after
    /// [`GROWTH_INTERVAL`] good steps.
    pub fn step(&self, scaled_norm: f64) -> ScaledStep {
        let mut state = self.state();
        if scaled_norm.is_finite() {
            let unscale = 1.0 / state.scale;
            state.good_steps += 1;
            if state.good_steps == GROWTH_INTERVAL {
                state.scale *= 2.0;
                state.good_steps = 0;
            }
            return ScaledStep::Apply { unscale };
        }
        if state.scale <= MIN_LOSS_SCALE {
            // Scaling cannot cure it: applied, the non-finite norm stops the run as a divergence.
            return ScaledStep::Apply { unscale: 1.0 / state.scale };
        }
        state.scale = (state.scale / 2.0).max(MIN_LOSS_SCALE);
        state.good_steps = 0;
        state.skipped += 1;
        ScaledStep::Skip { lowered_to: state.scale }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_halves_and_skips_and_good_steps_double() {
        let scale = LossScale::new(8.0);
        assert_eq!(scale.step(f64::INFINITY), ScaledStep::Skip { lowered_to: 4.0 });
        assert_eq!(scale.step(f64::NAN), ScaledStep::Skip { lowered_to: 2.0 });
        assert_eq!(scale.skipped(), 2);
        assert_eq!(scale.step(3.0), ScaledStep::Apply { unscale: 0.5 });
        for _ in 1..GROWTH_INTERVAL {
            scale.step(1.0);
        }
        assert_eq!(scale.scale(), 4.0, "doubled after {GROWTH_INTERVAL} good steps in a row");
        // An overflow resets the count of good steps.
        scale.step(f64::INFINITY);
        for _ in 1..GROWTH_INTERVAL {
            scale.step(1.0);
        }
        assert_eq!(scale.scale(), 2.0);
    }

    #[test]
    fn at_the_floor_an_overflow_is_applied_for_the_monitor_to_stop() {
        let scale = LossScale::new(2.0);
        assert_eq!(scale.step(f64::INFINITY), ScaledStep::Skip { lowered_to: 1.0 });
        assert_eq!(scale.step(f64::INFINITY), ScaledStep::Apply { unscale: 1.0 });
        assert_eq!(scale.skipped(), 1);
    }
}
