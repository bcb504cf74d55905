//! `TrainConfig`: every setting of a training run, read from TOML or JSON, and the command line
//! derived from it (each option overrides the field of the same name).

use std::path::{Path, PathBuf};

use clap::ArgAction;
use serde::{Deserialize, Serialize};

use crate::data::SequenceMode;
use crate::run::EpochSteps;
use crate::{ConfigError, Error, InitScheme, NormScheme, Precision};

/// The data seed of a run that sets none ([`TrainConfig::data_seed`]): the same for every `seed`.
pub const DEFAULT_DATA_SEED: u64 = 1;

/// The most documents the built-in corpus makes (each is generated and held in memory).
pub const MAX_BUILTIN_DOCS: usize = 1_000_000;

/// The optimiser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// AdamW with decoupled weight decay (norms, embeddings and gates are never decayed).
    #[default]
    Adamw,
    /// Adam without weight decay (the paper's setup).
    Adam,
}

/// A training run. Defaults give the crate's main command: a small LNS model on the built-in
/// corpus, a few minutes on a 2-core CPU.
///
/// It is also a command line (`clap::Args`, see [`crate::cli`]): every field is an option
/// (`--seq-len 256`) applied over a config file or the defaults; an option not given leaves the
/// field as it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Training settings")]
pub struct TrainConfig {
    /// Model preset (`tiny-8l`, `tiny`, `9m`, ..., `7b`) or the path of a model JSON file.
    #[arg(long, required = false)]
    pub model: String,
    /// Number of layers, overriding the model's (unset: the model's own depth).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Normalisation scheme, overriding the model's: one of [`scheme_names`](crate::norm::scheme_names)
    /// (the norm kind, rms-norm, layer-norm or dyt, is the model's `norm_kind`).
    #[arg(long, help = norm_help(), long_help = norm_help())]
    #[serde(with = "crate::norm::scheme_as_string")]
    pub norm: Option<NormScheme>,
    /// How the output and down projections are initialised, overriding the model's: `normal`
    /// (`N(0, sigma)`), `scaled` (`sigma / sqrt(2L)`) or `depth-scaled` (`sigma / sqrt(2l)` in
    /// layer `l`); valid with every `norm` that does not set its own init.
    #[arg(long)]
    pub init: Option<InitScheme>,
    /// Device string (`auto`, `flex`, `wgpu`, `cuda:0`, ...), or a comma-separated list
    /// (`cuda:0,cuda:1`) for data-parallel training, the first device holding the optimiser.
    #[arg(long, required = false)]
    pub device: String,
    /// Corpus files and folders: text, JSON lines or JSON (`.jsonl`, `.json`, either `.gz`), Parquet
    /// (the `parquet` feature), or nanoGPT / llm.c token files (`.bin`); empty for the built-in
    /// corpus (docs/data.md).
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// The JSON field or Parquet column that holds each document's text.
    #[arg(long, required = false)]
    pub text_field: String,
    /// Documents of the built-in corpus.
    #[arg(long, required = false)]
    pub builtin_docs: usize,
    /// `byte` or the path of a Hugging Face `tokenizer.json`.
    #[arg(long, required = false)]
    pub tokenizer: String,
    /// Tokens per training sequence.
    #[arg(long, required = false)]
    pub seq_len: usize,
    /// Sequences per micro-batch and device.
    #[arg(long, required = false)]
    pub batch_size: usize,
    /// Micro-batches per optimiser step.
    #[arg(long, required = false)]
    pub grad_accum: usize,
    /// Optimiser steps.
    #[arg(long, required = false)]
    pub steps: usize,
    /// Peak learning rate.
    #[arg(long, required = false)]
    pub lr: f64,
    /// Linear warmup steps (unset: a tenth of the steps, at most 40).
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Final learning rate as a fraction of the peak (cosine decay).
    #[arg(long, required = false)]
    pub min_lr_ratio: f64,
    /// The optimiser.
    #[arg(long, value_enum, required = false)]
    pub optimizer: OptimizerKind,
    /// Decoupled weight decay of AdamW (not applied to norms, embeddings and gates).
    #[arg(long, required = false)]
    pub weight_decay: f64,
    /// Adam's beta1.
    #[arg(long, required = false)]
    pub beta1: f64,
    /// Adam's beta2.
    #[arg(long, required = false)]
    pub beta2: f64,
    /// Adam's epsilon (PyTorch's default 1e-8; Burn's is 1e-5).
    #[arg(long, required = false)]
    pub eps: f64,
    /// Clip gradients to this global L2 norm (PyTorch's `clip_grad_norm_`); none by default.
    #[arg(long)]
    pub clip_grad_norm: Option<f64>,
    /// Seed of the weights and of the order of the training data (the validation split and the
    /// built-in corpus follow `data_seed`).
    #[arg(long, required = false)]
    pub seed: u64,
    /// Seed of the data: which documents are held out for validation, and the built-in corpus.
    /// Unset: 1, whatever `seed` is, so that runs of every seed are evaluated on the same
    /// documents and a sweep's spread over seeds is the models' alone.
    #[arg(long)]
    pub data_seed: Option<u64>,
    /// Shorthand for `--precision bf16`: bfloat16 for the whole device (`--bf16 false`: f32).
    /// Unset: `precision` decides.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bf16: Option<bool>,
    /// Training precision: `f32`; `bf16`, the whole device (the paper's pure bf16); `bf16-mixed` or
    /// `f16-mixed`, f32 weights with the matrix products, attention and the LM head in half
    /// precision (f16 with a dynamic loss scale). See docs/precision.md. Unset: f32 (or `bf16`'s).
    #[arg(long, value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Run directory.
    #[arg(long, required = false)]
    pub out: PathBuf,
    /// Validate every this many steps (one "epoch"; the last one may be shorter). Unset: every
    /// 100 steps, or at the end of a shorter run (a divisor of `save_every` when that is set).
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Save a checkpoint every this many steps (a multiple of `eval_every`); the end of the run is
    /// always saved. Unset: at every validation.
    #[arg(long)]
    pub save_every: Option<usize>,
    /// Checkpoints kept besides the best one.
    #[arg(long, required = false)]
    pub keep_checkpoints: usize,
    /// Validation batches per evaluation.
    #[arg(long, required = false)]
    pub eval_batches: usize,
    /// Fraction of documents held out for validation (unused with `valid_data`).
    #[arg(long, required = false)]
    pub valid_fraction: f64,
    /// A validation corpus of its own (files and folders, as `data` takes them; C4's
    /// `c4-validation.*.json.gz`): every training document then trains, and validation reads these.
    #[arg(long, num_args = 1..)]
    pub valid_data: Vec<PathBuf>,
    /// Validate on the first sequences of the validation documents that hold this many target
    /// tokens (padding not counted), whatever the batch size: the same tokens for every run.
    /// Replaces `eval_batches`. Unset: `eval_batches` batches.
    #[arg(long)]
    pub valid_tokens: Option<u64>,
    /// How documents become sequences: `pack` (concatenated and cut into windows, every position
    /// a real token) or `truncate` (each document its own sequence, cut at `seq_len`, padded,
    /// padding masked from the loss and the token counts: the paper authors' mode).
    #[arg(long, value_enum, required = false)]
    pub sequences: SequenceMode,
    /// Where token caches live (default: `.token-cache` beside the run directory).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Peak TFLOP/s of the device for MFU, when it is not a known GPU.
    #[arg(long)]
    pub peak_tflops: Option<f64>,
    /// Samples generated at the end (at most 3: one per built-in prompt).
    #[arg(long, required = false, value_parser = crate::cli::size(0..=3))]
    pub samples: usize,
    /// Print a log line every this many steps (plain output).
    #[arg(long, required = false)]
    pub log_every: usize,
    /// Record the layer-wise variance and per-layer gradient norms every this many steps
    /// (`tracking.jsonl` in the run directory).
    #[arg(long)]
    pub track_every: Option<usize>,
    /// Start from the weights of a Hugging Face model directory (`config.json` + safetensors) or
    /// of a run directory (`model.json` + `model.bpk`) instead of a fresh init. The model's shape
    /// then comes from that directory (`model` and `layers` are not used); `norm`, when given,
    /// retrofits it to that scheme (e.g. `lns` on a pretrained Pre-LN model).
    #[arg(long)]
    pub init_from: Option<PathBuf>,
    /// Not a setting: what the run reads of its data ([`DataBudget`](crate::train::DataBudget)),
    /// which a run records in its `train.json`; read back, it changes nothing.
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_budget: Option<crate::train::DataBudget>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            model: "tiny-8l".into(),
            layers: None,
            norm: None,
            init: None,
            device: "auto".into(),
            data: Vec::new(),
            text_field: crate::data::DEFAULT_TEXT_FIELD.into(),
            builtin_docs: 20_000,
            tokenizer: "byte".into(),
            seq_len: 128,
            batch_size: 16,
            grad_accum: 1,
            steps: 400,
            lr: 2e-3,
            warmup: None,
            min_lr_ratio: 0.1,
            optimizer: OptimizerKind::Adamw,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            clip_grad_norm: None,
            seed: 1,
            data_seed: None,
            bf16: None,
            precision: None,
            out: PathBuf::from("runs/default"),
            eval_every: None,
            save_every: None,
            keep_checkpoints: 2,
            eval_batches: 20,
            valid_fraction: 0.05,
            valid_data: Vec::new(),
            valid_tokens: None,
            sequences: SequenceMode::Pack,
            cache_dir: None,
            peak_tflops: None,
            samples: 3,
            log_every: 20,
            track_every: None,
            init_from: None,
            data_budget: None,
        }
    }
}

impl TrainConfig {
    /// Reads a TOML (`.toml`) or JSON (`.json`) file; a file of another name is read as whichever
    /// of the two its content is (the error names both attempts). Missing fields take their
    /// defaults, unknown ones are errors.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
        let toml = || toml::from_str(&text).map_err(|e| e.to_string());
        let json = || serde_json::from_str(&text).map_err(|e| crate::config_error::json_error_in(&text, &e));
        let extension = path.extension().map(|ext| ext.to_string_lossy().to_lowercase());
        let parsed = match extension.as_deref() {
            Some("toml") => toml(),
            Some("json") => json(),
            _ => toml().or_else(|as_toml| {
                json().map_err(|as_json| {
                    format!(
                        "neither TOML nor JSON (read as TOML: {}; read as JSON: {as_json}); fix it, and name it \
                         .toml or .json",
                        as_toml.trim_end()
                    )
                })
            }),
        };
        parsed.map_err(|message| Error::file(path, ConfigError::Invalid { what: "training config", message }))
    }

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
    fn recorded_precision(&self) -> Option<Precision> {
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
        for (field, value) in [
            ("seq_len", Some(self.seq_len)),
            ("batch_size", Some(self.batch_size)),
            ("grad_accum", Some(self.grad_accum)),
            ("steps", Some(self.steps)),
            ("eval_every", self.eval_every),
            ("save_every", self.save_every),
            ("eval_batches", Some(self.eval_batches)),
            ("log_every", Some(self.log_every)),
            ("track_every", self.track_every),
            ("layers", self.layers),
            ("valid_tokens", self.valid_tokens.map(|n| n as usize)),
        ] {
            if value == Some(0) {
                return Err(ConfigError::Zero { field });
            }
        }
        if self.samples > 3 {
            let value = self.samples as f64;
            return Err(ConfigError::OutOfRange { field: "samples", value, expected: "at most 3 (one per prompt)" });
        }
        for (field, value) in [
            ("lr", Some(self.lr)),
            ("min_lr_ratio", Some(self.min_lr_ratio)),
            ("weight_decay", Some(self.weight_decay)),
            ("beta1", Some(self.beta1)),
            ("beta2", Some(self.beta2)),
            ("eps", Some(self.eps)),
            ("clip_grad_norm", self.clip_grad_norm),
            ("valid_fraction", Some(self.valid_fraction)),
            ("peak_tflops", self.peak_tflops),
        ] {
            if let Some(value) = value.filter(|v| !v.is_finite()) {
                return Err(ConfigError::OutOfRange { field, value, expected: "a finite number" });
            }
        }
        let tokens =
            [self.batch_size, self.grad_accum, self.seq_len, self.steps].iter().map(|&n| n as u128).product::<u128>();
        if tokens > 1 << 60 {
            return Err(ConfigError::Conflict(format!(
                "`batch_size` ({}) x `grad_accum` ({}) x `seq_len` ({}) x `steps` ({}) is more tokens than any run can \
                 train; lower them",
                self.batch_size, self.grad_accum, self.seq_len, self.steps
            )));
        }
        if self.builtin_docs > MAX_BUILTIN_DOCS {
            return Err(ConfigError::OutOfRange {
                field: "builtin_docs",
                value: self.builtin_docs as f64,
                expected: "at most 1,000,000 documents (for a larger corpus, give --data)",
            });
        }
        if (self.batch_size as u128) * (self.eval_batches as u128) > 1 << 40 {
            return Err(ConfigError::Conflict(format!(
                "`batch_size` ({}) x `eval_batches` ({}) is more sequences than any validation can hold; lower \
                 --batch-size or --eval-batches",
                self.batch_size, self.eval_batches
            )));
        }
        // A run records its settings, paths included, in train.json: JSON text holds no other bytes.
        let paths = self.data.iter().map(|p| ("data", p)).chain(self.valid_data.iter().map(|p| ("valid_data", p)));
        let paths = paths.chain([("out", &self.out)]).chain(self.cache_dir.iter().map(|p| ("cache_dir", p)));
        if let Some((field, path)) =
            paths.chain(self.init_from.iter().map(|p| ("init_from", p))).find(|(_, p)| p.to_str().is_none())
        {
            return Err(ConfigError::Conflict(format!(
                "`{field}` ({}) is not valid UTF-8, and a run records its paths in train.json (JSON text); rename it, \
                 or give it through a link whose name is UTF-8",
                path.display()
            )));
        }
        if self.text_field.is_empty() {
            return Err(ConfigError::Conflict(
                "`text_field` is empty; give the JSON field or Parquet column that holds the documents' text \
                 (default `text`)"
                    .into(),
            ));
        }
        if let (Some(save), Some(eval)) = (self.save_every, self.eval_every) {
            if save % eval != 0 {
                return Err(ConfigError::Conflict(format!(
                    "`save_every` ({save}) must be a multiple of `eval_every` ({eval}): checkpoints are written \
                     after validation; set --save-every to a multiple of {eval}, or leave one of them unset"
                )));
            }
        }
        if let Some(warmup) = self.warmup.filter(|&w| w > self.steps) {
            return Err(ConfigError::Conflict(format!(
                "`warmup` ({warmup}) is longer than the run's `steps` ({}); lower --warmup or leave it unset \
                 (a tenth of the steps)",
                self.steps
            )));
        }
        if let Some(max) = self.clip_grad_norm.filter(|&max| max <= 0.0) {
            return Err(ConfigError::OutOfRange { field: "clip_grad_norm", value: max, expected: "a number > 0" });
        }
        if let Some(peak) = self.peak_tflops.filter(|&peak| peak <= 0.0) {
            return Err(ConfigError::OutOfRange { field: "peak_tflops", value: peak, expected: "a number > 0" });
        }
        for (field, value) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&value) {
                return Err(ConfigError::OutOfRange { field, value, expected: "a number in [0, 1)" });
            }
        }
        if self.weight_decay < 0.0 {
            return Err(ConfigError::OutOfRange { field: "weight_decay", value: self.weight_decay, expected: ">= 0" });
        }
        if self.eps <= 0.0 {
            return Err(ConfigError::OutOfRange { field: "eps", value: self.eps, expected: "> 0" });
        }
        if !(self.valid_fraction > 0.0 && self.valid_fraction < 1.0) {
            return Err(ConfigError::OutOfRange {
                field: "valid_fraction",
                value: self.valid_fraction,
                expected: "a fraction in (0, 1)",
            });
        }
        self.schedule().init()?;
        Ok(())
    }

    /// The seed of the validation split and of the built-in corpus: `data_seed`, or
    /// [`DEFAULT_DATA_SEED`] when unset.
    pub fn data_seed(&self) -> u64 {
        self.data_seed.unwrap_or(DEFAULT_DATA_SEED)
    }

    /// A run's own `train.json`, as [`from_file`](Self::from_file) reads it, but for the data
    /// seed: a run written before `data_seed` existed (0.1) split its data with `seed`, and
    /// resuming it must keep that split.
    pub fn from_run_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let mut config = Self::from_file(path)?;
        config.data_seed = config.data_seed.or(Some(config.seed));
        // A run recorded before `precision` existed says `bf16 = true`: its precision, which the
        // options given on resuming are compared with (not a `--bf16` given beside them).
        (config.precision, config.bf16) = (config.recorded_precision(), None);
        Ok(config)
    }

    /// The settings the run in `dir` recorded (its `train.json`, read by
    /// [`from_run_file`](Self::from_run_file)), or `None` where it recorded none: what a resume
    /// without a config file starts from, before the options given change it.
    pub fn recorded_in(dir: impl AsRef<Path>) -> Result<Option<Self>, Error> {
        let recorded = dir.as_ref().join(crate::run::TRAIN_CONFIG);
        // Anything there is read: a directory or a dangling link in its place is an error, not
        // "no settings".
        match std::fs::symlink_metadata(&recorded) {
            Ok(_) => Self::from_run_file(&recorded).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::file(&recorded, e)),
        }
    }

    /// The learning-rate schedule of the run.
    pub fn schedule(&self) -> crate::train::WarmupCosineConfig {
        crate::train::WarmupCosineConfig::new(self.lr, self.steps)
            .with_warmup_steps(self.warmup())
            .with_min_lr_ratio(self.min_lr_ratio)
    }

    /// Steps between validations: the set value, else 100 (or the whole run when shorter), a
    /// divisor of `save_every` when only that is set.
    pub fn eval_every(&self) -> usize {
        let most = 100.min(self.steps).max(1);
        match (self.eval_every, self.save_every) {
            (Some(eval), _) => eval,
            (None, Some(save)) => (1..=most.min(save)).rev().find(|d| save % d == 0).unwrap_or(1),
            (None, None) => most,
        }
    }

    /// Steps between checkpoints: the set value, else every validation.
    pub fn save_every(&self) -> usize {
        self.save_every.unwrap_or_else(|| self.eval_every())
    }

    /// Warmup steps: the set value, else a tenth of the steps, at most 40.
    pub fn warmup(&self) -> usize {
        self.warmup.unwrap_or((self.steps / 10).min(40))
    }

    /// This config with every unset interval (`eval_every`, `save_every`, `warmup`) filled in with
    /// the value the run uses, and `bf16` folded into `precision`: what `train.json` records.
    pub fn resolved(&self) -> Self {
        Self {
            data_seed: Some(self.data_seed()),
            eval_every: Some(self.eval_every()),
            save_every: Some(self.save_every()),
            warmup: Some(self.warmup()),
            precision: self.recorded_precision(),
            bf16: None,
            ..self.clone()
        }
    }

    /// The validation sequences each evaluation reads, of `available` (with a global batch of
    /// `global_batch` sequences): all of them when `valid_tokens` chose the subset, else the
    /// first `eval_batches` batches.
    pub fn eval_sequences(&self, global_batch: usize, available: usize) -> usize {
        match self.valid_tokens {
            Some(_) => available,
            None => global_batch.saturating_mul(self.eval_batches).min(available),
        }
    }

    /// How the run's validation intervals (burn-train's epochs) map to optimiser steps.
    pub(crate) fn epoch_steps(&self) -> EpochSteps {
        EpochSteps { steps_per_epoch: self.eval_every(), steps: self.steps }
    }

    /// The number of validation/checkpoint intervals ("epochs") of the run; the last one is
    /// shorter when `eval_every` does not divide `steps`.
    pub fn epochs(&self) -> usize {
        self.steps.div_ceil(self.eval_every())
    }
}

/// `--norm`'s help: the scheme strings, from the scheme table.
fn norm_help() -> String {
    format!(
        "Normalisation scheme, overriding the model's: {} (the norm kind, rms-norm, layer-norm, dyt, derf or \
         bhyt, is the model's `norm_kind`)",
        crate::norm::scheme_names()
    )
}

#[cfg(test)]
mod tests {
    use super::TrainConfig;

    fn with(steps: usize, eval_every: Option<usize>, save_every: Option<usize>) -> TrainConfig {
        TrainConfig { steps, eval_every, save_every, ..TrainConfig::default() }
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
        assert_eq!(config.epochs(), 3);
        assert_eq!((1..=3).map(|e| config.epoch_steps().step(e)).collect::<Vec<_>>(), vec![100, 200, 250]);
        assert_eq!(with(400, None, None).warmup(), 40);
        assert_eq!(with(100, None, None).warmup(), 10);
        let resolved = with(250, None, Some(50)).resolved();
        assert_eq!((resolved.eval_every, resolved.save_every, resolved.warmup), (Some(50), Some(50), Some(25)));
        assert_eq!(resolved.resolved(), resolved, "resolving is idempotent");
    }
}
