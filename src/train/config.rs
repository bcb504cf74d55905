//! `TrainConfig`: every setting of a training run, in groups (`train/settings.rs`), read from TOML
//! or JSON, and the command line derived from it (each option overrides the field of the same
//! name); what ties the groups together (intervals, precision, the tokens a run trains).

use std::path::PathBuf;

use clap::ArgAction;
use serde::{Deserialize, Serialize};

use super::settings::{CheckpointSettings, DataSettings, EvalSettings, ModelSettings, OptimSettings, OutputSettings};
use crate::run::EpochSteps;
use crate::{config_error::ConfigError, device::Precision};

/// A training run, its settings in groups. Defaults give the crate's main command: a small LNS
/// model on the built-in corpus, a few minutes on a 2-core CPU.
///
/// It is also a command line (`clap::Args`, see [`crate::cli`]): every field of every group is an
/// option (`--seq-len 256`) applied over a config file or the defaults; an option not given leaves
/// the field as it was. In files and on the command line the groups are flat (`seq_len = 256`):
/// a field's name is its key and its option.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Run")]
pub struct TrainConfig {
    /// Device string (`auto`, `flex`, `wgpu`, `cuda:0`, ...), or a comma-separated list
    /// (`cuda:0,cuda:1`) for data-parallel training, the first device holding the optimiser.
    #[arg(long, required = false)]
    pub device: String,
    /// Seed of the weights and of the order of the training data (the validation split and the
    /// built-in corpus follow `data_seed`).
    #[arg(long, required = false)]
    pub seed: u64,
    /// Training precision: `f32`; `bf16`, the whole device (the paper's pure bf16); `bf16-mixed` or
    /// `f16-mixed`, f32 weights with the matrix products, attention and the LM head in half
    /// precision (f16 with a dynamic loss scale). See docs/precision.md. Unset: f32 (or `bf16`'s).
    #[arg(long, value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Shorthand for `--precision bf16`: bfloat16 for the whole device (`--bf16 false`: f32).
    /// Unset: `precision` decides.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bf16: Option<bool>,
    /// The model trained.
    #[command(flatten)]
    #[serde(flatten)]
    pub model: ModelSettings,
    /// The training data.
    #[command(flatten)]
    #[serde(flatten)]
    pub data: DataSettings,
    /// The optimiser, its batch and its schedule.
    #[command(flatten)]
    #[serde(flatten)]
    pub optim: OptimSettings,
    /// Validation.
    #[command(flatten)]
    #[serde(flatten)]
    pub eval: EvalSettings,
    /// Checkpoints.
    #[command(flatten)]
    #[serde(flatten)]
    pub checkpoints: CheckpointSettings,
    /// Where the run writes, and what it reports.
    #[command(flatten)]
    #[serde(flatten)]
    pub output: OutputSettings,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            model: ModelSettings::default(),
            data: DataSettings::default(),
            optim: OptimSettings::default(),
            eval: EvalSettings::default(),
            checkpoints: CheckpointSettings::default(),
            output: OutputSettings::default(),
            device: "auto".into(),
            seed: 1,
            precision: None,
            bf16: None,
        }
    }
}

impl TrainConfig {
    /// The training precision: `precision`, else whole-device bf16 where `bf16` is true, else f32.
    /// ([`validate`](Self::validate) refuses the two when they disagree.)
    pub fn training_precision(&self) -> Precision {
        match (self.precision, self.bf16) {
            (Some(precision), _) => precision,
            (None, Some(true)) => Precision::Bf16,
            (None, _) => Precision::F32,
        }
    }

    /// `precision` as `train.json` records it: `bf16 = true` and `precision = "bf16"` are one
    /// setting, and f32 is left unwritten, so that an f32 run's train.json stays readable by
    /// builds from before `precision`.
    pub(super) fn recorded_precision(&self) -> Option<Precision> {
        Some(self.training_precision()).filter(|&precision| precision != Precision::F32)
    }

    /// Checks the settings that need no file or device. Only values the user set can conflict
    /// with each other; the error names both and the fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let (Some(bf16), Some(precision)) = (self.bf16, self.precision) {
            if bf16 != (precision == Precision::Bf16) {
                return Err(ConfigError::Conflict(format!(
                    "`bf16` = {bf16} (--bf16: the whole device in bfloat16) and `precision` = {precision} \
                     contradict each other: give `precision` alone"
                )));
            }
        }
        self.model.validate()?;
        self.data.validate()?;
        self.optim.validate()?;
        self.eval.validate()?;
        self.checkpoints.validate()?;
        self.output.validate()?;
        let (optim, data) = (&self.optim, &self.data);
        let tokens = [optim.batch_size, optim.grad_accum, data.seq_len, optim.steps]
            .iter()
            .map(|&n| n as u128)
            .product::<u128>();
        if tokens > 1 << 60 {
            return Err(ConfigError::Conflict(format!(
                "`batch_size` ({}) x `grad_accum` ({}) x `seq_len` ({}) x `steps` ({}) is more tokens than any run can \
                 train; lower them",
                optim.batch_size, optim.grad_accum, data.seq_len, optim.steps
            )));
        }
        if (optim.batch_size as u128) * (self.eval.eval_batches as u128) > 1 << 40 {
            return Err(ConfigError::Conflict(format!(
                "`batch_size` ({}) x `eval_batches` ({}) is more sequences than any validation can hold; lower \
                 --batch-size or --eval-batches",
                optim.batch_size, self.eval.eval_batches
            )));
        }
        // A run records its settings, paths included, in train.json: JSON text holds no other bytes.
        let paths = self.data.files.iter().map(|p| ("data", p));
        let paths = paths.chain(self.eval.valid_data.iter().map(|p| ("valid_data", p)));
        let paths =
            paths.chain([("out", &self.output.out)]).chain(self.data.cache_dir.iter().map(|p| ("cache_dir", p)));
        utf8_paths(paths.chain(self.model.init_from.iter().map(|p| ("init_from", p))))?;
        if let (Some(save), Some(eval)) = (self.checkpoints.save_every, self.eval.eval_every) {
            if save % eval != 0 {
                return Err(ConfigError::Conflict(format!(
                    "`save_every` ({save}) must be a multiple of `eval_every` ({eval}): checkpoints are written \
                     after validation; set --save-every to a multiple of {eval}, or leave one of them unset"
                )));
            }
        }
        Ok(())
    }

    /// Steps between validations: the set value, else 100 (or the whole run when shorter), a
    /// divisor of `save_every` when only that is set.
    pub fn eval_every(&self) -> usize {
        let most = 100.min(self.optim.steps).max(1);
        match (self.eval.eval_every, self.checkpoints.save_every) {
            (Some(eval), _) => eval,
            (None, Some(save)) => (1..=most.min(save)).rev().find(|d| save % d == 0).unwrap_or(1),
            (None, None) => most,
        }
    }

    /// Steps between checkpoints: the set value, else every validation.
    pub fn save_every(&self) -> usize {
        self.checkpoints.save_every.unwrap_or_else(|| self.eval_every())
    }

    /// This config with every unset interval (`eval_every`, `save_every`, `warmup`) filled in with
    /// the value the run uses, and `bf16` folded into `precision`: what `train.json` records.
    pub fn resolved(&self) -> Self {
        let mut resolved = self.clone();
        resolved.data.data_seed = Some(self.data.data_seed());
        resolved.eval.eval_every = Some(self.eval_every());
        resolved.checkpoints.save_every = Some(self.save_every());
        resolved.optim.warmup = Some(self.optim.warmup());
        (resolved.precision, resolved.bf16) = (self.recorded_precision(), None);
        resolved
    }

    /// How the run's validation intervals (burn-train's epochs) map to optimiser steps.
    pub(crate) fn epoch_steps(&self) -> EpochSteps {
        EpochSteps { steps_per_epoch: self.eval_every(), steps: self.optim.steps }
    }

    /// How many times the run validates: every `eval_every` steps, and at its end when
    /// `eval_every` does not divide `steps` (the last interval is then shorter).
    pub fn validations(&self) -> usize {
        self.epoch_steps().epochs()
    }
}

/// An error naming the first path that is not UTF-8.
fn utf8_paths<'a>(paths: impl IntoIterator<Item = (&'static str, &'a PathBuf)>) -> Result<(), ConfigError> {
    match paths.into_iter().find(|(_, path)| path.to_str().is_none()) {
        Some((field, path)) => Err(ConfigError::Conflict(format!(
            "`{field}` ({}) is not valid UTF-8, and a run records its paths in train.json (JSON text); rename it, \
             or give it through a link whose name is UTF-8",
            path.display()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::TrainConfig;

    fn with(steps: usize, eval_every: Option<usize>, save_every: Option<usize>) -> TrainConfig {
        let mut config = TrainConfig::default();
        (config.optim.steps, config.eval.eval_every, config.checkpoints.save_every) = (steps, eval_every, save_every);
        config
    }

    #[test]
    fn intervals_default_to_100_steps_or_the_whole_run_and_divide_save_every() {
        assert_eq!(with(400, None, None).eval_every(), 100);
        assert_eq!(with(30, None, None).eval_every(), 30);
        assert_eq!(with(0, None, None).eval_every(), 1);
        // Only save_every set: the largest divisor of it up to the default interval.
        assert_eq!(with(1000, None, Some(250)).eval_every(), 50);
        assert_eq!(with(1000, None, Some(97)).eval_every(), 97);
        assert_eq!(with(1000, None, Some(101)).eval_every(), 1);
        assert_eq!(with(1000, Some(7), Some(250)).eval_every(), 7);
        assert_eq!(with(1000, Some(40), None).save_every(), 40);
    }

    #[test]
    fn the_last_interval_is_short_when_eval_every_does_not_divide_steps() {
        let config = with(250, Some(100), None);
        assert_eq!(config.validations(), 3);
        assert_eq!((1..=3).map(|e| config.epoch_steps().step(e)).collect::<Vec<_>>(), vec![100, 200, 250]);
        assert_eq!(with(400, None, None).optim.warmup(), 40);
        assert_eq!(with(100, None, None).optim.warmup(), 10);
        let resolved = with(250, None, Some(50)).resolved();
        let intervals = (resolved.eval.eval_every, resolved.checkpoints.save_every, resolved.optim.warmup);
        assert_eq!(intervals, (Some(50), Some(50), Some(25)));
        assert_eq!(resolved.resolved(), resolved, "resolving is idempotent");
    }
}
