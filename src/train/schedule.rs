//! The learning-rate schedule of the paper: linear warmup, then cosine decay to a fraction of the peak.

use burn::config::Config;
use burn::lr_scheduler::{LrScheduler, LrSchedulerRecord};
use burn::optim::{LearningRate, RecordState, StateSink, StateSource};
use burn::tensor::Device;

use crate::config_error::ConfigError;

/// Linear warmup from 0 to `peak` over `warmup` steps, then cosine decay to `min_ratio * peak` at
/// step `total`, constant after:
///
/// ```text
/// lr(s) = peak * s / warmup                                         for s <= warmup
/// lr(s) = peak * (m + (1 - m) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2)   after
/// ```
///
/// Steps are numbered from 1: [`LrScheduler::step`] returns the rate of the next step.
#[derive(Clone, Debug, PartialEq)]
pub struct WarmupCosine {
    peak: f64,
    warmup: usize,
    total: usize,
    min_ratio: f64,
    step: usize,
}

/// The settings of a [`WarmupCosine`] schedule of `total_steps` steps peaking at `peak_lr`.
#[derive(Config, Debug)]
pub struct WarmupCosineConfig {
    /// The learning rate at the end of the warmup.
    pub peak_lr: f64,
    /// Steps of the whole schedule.
    pub total_steps: usize,
    /// Steps of the linear warmup.
    #[config(default = 0)]
    pub warmup_steps: usize,
    /// The final learning rate as a fraction of the peak.
    #[config(default = 0.1)]
    pub min_lr_ratio: f64,
}

/// The saved state of a [`WarmupCosine`]: the last step taken.
#[derive(Clone, Debug)]
pub struct WarmupCosineState {
    step: usize,
}

impl RecordState for WarmupCosineState {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        out.push_scalar(prefix, "step", (self.step as u64).into());
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, _device: &Device) -> Option<Self> {
        let step = u64::try_from(src.take_scalar(prefix, "step")?).ok()?;
        Some(Self { step: step as usize })
    }
}

impl WarmupCosineConfig {
    /// The schedule; an error names the setting that is out of range.
    pub fn init(&self) -> Result<WarmupCosine, ConfigError> {
        let (peak, warmup, total, min_ratio) = (self.peak_lr, self.warmup_steps, self.total_steps, self.min_lr_ratio);
        // The optimiser computes in f32: 1e-50 would be 0 there, a run that never moves.
        crate::config_error::check_positive_f32("lr", peak)?;
        if total == 0 {
            return Err(ConfigError::Zero { field: "steps" });
        }
        if warmup > total {
            return Err(ConfigError::OutOfRange {
                field: "warmup",
                value: warmup as f64,
                expected: "at most the number of steps",
            });
        }
        if !(0.0..=1.0).contains(&min_ratio) {
            return Err(ConfigError::OutOfRange {
                field: "min_lr_ratio",
                value: min_ratio,
                expected: "a fraction in [0, 1]",
            });
        }
        Ok(WarmupCosine { peak, warmup, total, min_ratio, step: 0 })
    }
}

impl WarmupCosine {
    /// The learning rate of step `step` (1-based).
    pub fn lr_at(&self, step: usize) -> f64 {
        if step <= self.warmup {
            return self.peak * step as f64 / self.warmup as f64;
        }
        let decay_steps = (self.total - self.warmup).max(1);
        let progress = ((step - self.warmup) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.peak * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
    }

    /// The number of steps taken.
    pub fn steps_taken(&self) -> usize {
        self.step
    }
}

impl LrScheduler for WarmupCosine {
    fn step(&mut self) -> LearningRate {
        self.step += 1;
        self.lr_at(self.step)
    }

    fn to_record(&self) -> LrSchedulerRecord {
        LrSchedulerRecord::from_state(&WarmupCosineState { step: self.step })
    }

    fn load_record(&mut self, record: LrSchedulerRecord) {
        if let Some(state) = record.into_state::<WarmupCosineState>() {
            self.step = state.step;
        }
    }
}
