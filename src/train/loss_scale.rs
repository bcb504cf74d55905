//! Dynamic loss scaling for f16 mixed precision, as PyTorch's `GradScaler`: the loss is multiplied
//! by a scale before the backward pass, so that gradients too small for f16 (which loses precision
//! below 6e-5 and flushes to zero below 6e-8) survive its products, and the gradients are divided
//! by it before the optimiser sees them. A step whose scaled gradients overflow (a non-finite
//! global norm) is skipped and the scale halved; after [`GROWTH_INTERVAL`] good steps in a row it
//! is doubled. At [`MIN_LOSS_SCALE`] an overflow is no longer skipped: it is a divergence, and
//! stops the run.
//!
//! On the GPUs the decision stays on the device ([`scaled_grad_norm_and_verdict`]): the scale, its
//! count of good steps and the steps skipped live in a `[scale, good, skipped]` tensor that each
//! step's verdict kernel replaces, and the host reads them only when asked (the metrics, on their
//! own thread; a checkpoint). Elsewhere the host decides from the norm it reads ([`LossScale::step`]).
//!
//! [`scaled_grad_norm_and_verdict`]: crate::fused::multi_tensor::scaled_grad_norm_and_verdict
//!
//! The scale and its count of good steps are part of each checkpoint, as PyTorch's
//! `GradScaler.state_dict()` is: [`WithLossScale`] records them beside the learning-rate schedule's
//! step (in `scheduler-step-N.bpk`), so a resumed f16 run goes on with the scale it had.

use std::sync::{Arc, Mutex};

use burn::lr_scheduler::{LrScheduler, LrSchedulerRecord};
use burn::optim::LearningRate;
use burn::tensor::{Device, Tensor};

use super::events::Events;
use crate::device::Precision;

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

/// The loss scale after an optimiser step, and the steps skipped for overflow so far in the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleReport {
    /// The factor the next step's loss is multiplied by.
    pub scale: f64,
    /// Steps skipped so far (a resumed run's included).
    pub skipped: usize,
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
    /// The state on the device, `[scale, good steps, skipped, ..]` f32, where the device decides:
    /// newer than the fields above until read back.
    on_device: Option<Tensor<1>>,
}

impl State {
    /// Takes the device's state into the fields (a read: the host waits for the device); false
    /// if the device failed to give it (the fields are then older than the device's state).
    fn read_back(&mut self) -> bool {
        let Some(tensor) = self.on_device.take() else { return true };
        match tensor.clone().into_data().try_to_vec::<f32>() {
            Ok(values) if values.len() >= 3 => {
                (self.scale, self.good_steps, self.skipped) =
                    (values[0].into(), values[1] as usize, values[2] as usize);
                true
            }
            // A failed read keeps the device's tensor: the next step goes on from it.
            _ => {
                self.on_device = Some(tensor);
                false
            }
        }
    }
}

/// What the rule of [`LossScale`] is, for the device's verdict kernel.
pub(crate) const LOSS_SCALE_RULE: crate::fused::multi_tensor::LossScaleRule =
    crate::fused::multi_tensor::LossScaleRule { growth_interval: GROWTH_INTERVAL, min_scale: MIN_LOSS_SCALE };

impl LossScale {
    /// A scale starting at `initial` (a power of two keeps the scaling exact).
    pub fn new(initial: f64) -> Self {
        Self { state: Mutex::new(State { scale: initial, good_steps: 0, skipped: 0, on_device: None }) }
    }

    /// The loss multiplied by the scale now: by the device's scale where the device decides (no
    /// wait), else by the host's.
    pub(crate) fn apply(&self, loss: Tensor<1>) -> Tensor<1> {
        let state = self.state();
        match &state.on_device {
            Some(on_device) => {
                let scale = on_device.clone().narrow(0, 0, 1);
                // Each device of a data-parallel run scales its own loss: the scale goes to it.
                let device = loss.clone().without_autodiff().device();
                let scale = if scale.device() == device { scale } else { scale.to_device(&device) };
                loss * scale
            }
            None => loss * state.scale,
        }
    }

    /// The state as the device's verdict takes it, `[scale, good steps, skipped]` (`[3]` or more,
    /// f32, without autodiff), put on `device` from the host's values the first time.
    pub(crate) fn on_device(&self, device: &Device) -> Tensor<1> {
        let mut state = self.state();
        let values = [state.scale as f32, state.good_steps as f32, state.skipped as f32];
        state.on_device.get_or_insert_with(|| Tensor::<1>::from_floats(values, device).without_autodiff()).clone()
    }

    /// Keeps the state the device's verdict left (`[4]` f32: the scale, the good steps, the
    /// skipped steps, whether this step was skipped).
    pub(crate) fn set_on_device(&self, state_after: Tensor<1>) {
        self.state().on_device = Some(state_after);
    }

    /// The loss scale a run in `precision` needs: one from [`INITIAL_LOSS_SCALE`] for f16 mixed
    /// precision, none otherwise. The reliability tests make it start at 2^30, so that a short run's
    /// scaled gradients overflow and its scale moves (`LAYERNORM_SCALING_FAIL_AT=f16-overflow`).
    pub fn for_precision(precision: Precision) -> Option<Arc<Self>> {
        let initial = if crate::io::fault_injected("f16-overflow") { 2f64.powi(30) } else { INITIAL_LOSS_SCALE };
        precision.scales_loss().then(|| Arc::new(Self::new(initial)))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state with the device's read back (where the device fails, the last one read).
    fn read_state(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.state();
        state.read_back();
        state
    }

    /// The factor the loss is multiplied by now.
    pub fn scale(&self) -> f64 {
        self.read_state().scale
    }

    /// Steps skipped for overflow so far.
    pub fn skipped(&self) -> usize {
        self.read_state().skipped
    }

    /// Good steps in a row since the scale last changed (it doubles at [`GROWTH_INTERVAL`]).
    pub fn good_steps(&self) -> usize {
        self.read_state().good_steps
    }

    /// The scale now and the steps skipped so far, as the metrics report them after a step.
    pub fn report(&self) -> ScaleReport {
        let state = self.read_state();
        ScaleReport { scale: state.scale, skipped: state.skipped }
    }

    /// Sets the scale, its count of good steps and the steps skipped so far, as a checkpoint
    /// recorded them.
    pub fn restore(&self, scale: f64, good_steps: usize, skipped: usize) {
        let mut state = self.state();
        (state.scale, state.good_steps, state.skipped) = (scale, good_steps, skipped);
        state.on_device = None;
    }

    /// Decides an optimiser step from the global norm of its scaled gradients, and updates the
    /// scale: halved on overflow (not below [`MIN_LOSS_SCALE`]), doubled after
    /// [`GROWTH_INTERVAL`] good steps.
    pub fn step(&self, scaled_norm: f64) -> ScaledStep {
        let mut state = self.read_state();
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

/// The record's keys of the loss scale, of its count of good steps and of the steps skipped.
const SCALE_KEY: &str = "loss_scale";
const GOOD_STEPS_KEY: &str = "loss_scale_good_steps";
const SKIPPED_KEY: &str = "loss_scale_skipped";

/// A learning-rate schedule whose record (burn-train's `scheduler` checkpoint, taken with the
/// model's and the optimiser's at the end of an interval) also holds the run's loss scale, when it
/// has one: restoring the checkpoint restores the scale the step uses (the same [`LossScale`]).
#[derive(Clone, Debug)]
pub(crate) struct WithLossScale<S> {
    schedule: S,
    loss_scale: Option<Arc<LossScale>>,
    /// Where a checkpoint without the scale (written before it was kept) is reported.
    events: Events,
}

impl<S> WithLossScale<S> {
    /// `schedule`, recording `loss_scale` (none: the schedule's record alone) in its checkpoints.
    pub fn new(schedule: S, loss_scale: Option<Arc<LossScale>>, events: Events) -> Self {
        Self { schedule, loss_scale, events }
    }
}

impl<S: LrScheduler + Clone + 'static> LrScheduler for WithLossScale<S> {
    fn step(&mut self) -> LearningRate {
        self.schedule.step()
    }

    fn to_record(&self) -> LrSchedulerRecord {
        let record = self.schedule.to_record();
        match &self.loss_scale {
            Some(scale) => {
                let mut state = scale.state();
                if !state.read_back() {
                    self.events.warn(format!(
                        "the device did not give the f16 loss scale back for the checkpoint: it records the last one \
                         read ({}), and a run resumed from it may differ from this one",
                        state.scale
                    ));
                }
                record
                    .with_scalar(SCALE_KEY, state.scale)
                    .with_scalar(GOOD_STEPS_KEY, state.good_steps as u64)
                    .with_scalar(SKIPPED_KEY, state.skipped as u64)
            }
            None => record,
        }
    }

    fn load_record(&mut self, record: LrSchedulerRecord) {
        if let Some(loss_scale) = &self.loss_scale {
            let scale = record.scalar::<f64>(SCALE_KEY).filter(|scale| scale.is_finite() && *scale >= MIN_LOSS_SCALE);
            match (scale, record.scalar::<u64>(GOOD_STEPS_KEY)) {
                // Checkpoints from before the count was kept restart it at 0.
                (Some(scale), Some(good_steps)) => {
                    let skipped = record.scalar::<u64>(SKIPPED_KEY).unwrap_or(0) as usize;
                    loss_scale.restore(scale, good_steps as usize, skipped)
                }
                _ => self.events.warn(format!(
                    "the checkpoint holds no f16 loss scale (it was written before checkpoints kept it): the loss \
                     scale starts again from {}, so the resumed steps are not bit-identical to an uninterrupted \
                     run's",
                    loss_scale.scale()
                )),
            }
        }
        self.schedule.load_record(record);
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

    #[test]
    fn a_checkpoint_restores_the_scale_its_growth_count_and_the_skipped_steps() {
        let schedule = crate::train::WarmupCosineConfig::new(1e-3, 100).init().unwrap();
        let moved = Arc::new(LossScale::new(64.0));
        moved.step(f64::INFINITY);
        moved.step(1.0);
        moved.step(1.0);
        let mut saved = WithLossScale::new(schedule.clone(), Some(moved), Events::default());
        saved.step();
        let bytes = saved.to_record().into_bytes().unwrap();

        let fresh = Arc::new(LossScale::new(INITIAL_LOSS_SCALE));
        let mut resumed = WithLossScale::new(schedule.clone(), Some(fresh.clone()), Events::default());
        resumed.load_record(LrSchedulerRecord::from_bytes(bytes).unwrap());
        assert_eq!((fresh.scale(), fresh.good_steps()), (32.0, 2), "halved once, then two good steps");
        assert_eq!(fresh.report(), ScaleReport { scale: 32.0, skipped: 1 }, "the skipped step is counted on");
        assert_eq!(resumed.step(), saved.step(), "the schedule's step comes back too");
    }

    #[test]
    fn the_state_a_device_decided_is_read_back_for_the_checkpoint_and_restored_to_the_host() {
        let device = crate::device::parse_device("flex").unwrap();
        let scale = Arc::new(LossScale::new(64.0));
        let loss = Tensor::<1>::from_floats([2.0], &device);
        assert_eq!(scale.apply(loss.clone()).into_scalar::<f32>(), 128.0, "the host's scale before the device has one");
        assert_eq!(scale.on_device(&device).into_data().try_to_vec::<f32>().unwrap(), [64.0, 0.0, 0.0]);
        // A verdict left: scale 32, 5 good steps, 3 skipped, this one skipped.
        scale.set_on_device(Tensor::from_floats([32.0, 5.0, 3.0, 1.0], &device));
        assert_eq!(scale.apply(loss).into_scalar::<f32>(), 64.0, "the device's scale, read by no one");
        let schedule = crate::train::WarmupCosineConfig::new(1e-3, 100).init().unwrap();
        let record = WithLossScale::new(schedule, Some(scale.clone()), Events::default()).to_record();
        assert_eq!(record.scalar::<f64>(SCALE_KEY), Some(32.0));
        assert_eq!(record.scalar::<u64>(GOOD_STEPS_KEY), Some(5));
        assert_eq!(record.scalar::<u64>(SKIPPED_KEY), Some(3));
        // A restored checkpoint replaces the device's state: the next step starts from it.
        scale.restore(8.0, 1, 2);
        assert_eq!(scale.on_device(&device).into_data().try_to_vec::<f32>().unwrap(), [8.0, 1.0, 2.0]);
    }

    #[test]
    fn a_checkpoint_without_the_scale_starts_from_the_initial_one_and_says_so() {
        let schedule = crate::train::WarmupCosineConfig::new(1e-3, 100).init().unwrap();
        // A checkpoint of a build that did not keep the scale: the schedule's record alone.
        let old = LrSchedulerRecord::from_bytes(schedule.to_record().into_bytes().unwrap()).unwrap();
        let (events, received) = Events::channel();
        let fresh = Arc::new(LossScale::new(INITIAL_LOSS_SCALE));
        WithLossScale::new(schedule, Some(fresh.clone()), events).load_record(old);
        assert_eq!((fresh.scale(), fresh.good_steps()), (INITIAL_LOSS_SCALE, 0));
        let warnings: Vec<String> = received.try_iter().map(|event| event.to_string()).collect();
        assert!(warnings.len() == 1 && warnings[0].contains("65536"), "{warnings:?}");
    }
}
