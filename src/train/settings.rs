//! The groups of a training run's settings ([`TrainConfig`](super::TrainConfig) holds one of
//! each): the model, the data, the optimiser and its schedule, evaluation, checkpoints and
//! output. Each checks its own values ([`validate`](ModelSettings::validate)); what ties two
//! groups together (the tokens a run trains, validation against checkpoint intervals) is
//! `TrainConfig`'s to check.
//!
//! In a config file and on the command line the groups are flat: `seq_len = 256`, `--seq-len 256`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::data::SequenceMode;
use crate::{config_error::ConfigError, norm::InitScheme, norm::NormScheme};

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

/// The data seed of a run that sets none ([`DataSettings::data_seed`]): the same for every `seed`.
pub const DEFAULT_DATA_SEED: u64 = 1;

/// The model trained: its preset or file, and what overrides it. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Model")]
pub struct ModelSettings {
    /// Model preset (`tiny-8l`, `tiny`, `9m`, ..., `7b`) or the path of a model JSON file.
    #[arg(id = "model", long = "model", value_name = "MODEL", required = false)]
    #[serde(rename = "model")]
    pub preset: String,
    /// Number of layers, overriding the model's (unset: the model's own depth).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Normalisation scheme, overriding the model's: one of [`scheme_names`](crate::norm::scheme_names)
    /// (the norm kind, rms-norm, layer-norm, dyt, derf or bhyt, is the model's `norm_kind`).
    #[arg(long, help = norm_help(), long_help = norm_help())]
    #[serde(with = "crate::norm::scheme_as_string")]
    pub norm: Option<NormScheme>,
    /// How the output and down projections are initialised, overriding the model's: `normal`
    /// (`N(0, sigma)`), `scaled` (`sigma / sqrt(2L)`) or `depth-scaled` (`sigma / sqrt(2l)` in
    /// layer `l`); valid with every `norm` that does not set its own init.
    #[arg(long)]
    pub init: Option<InitScheme>,
    /// Start from the weights of a Hugging Face model directory (`config.json` + safetensors) or
    /// of a run directory (`model.json` + `model.bpk`) instead of a fresh init. The model's shape
    /// then comes from that directory (`model` and `layers` are not used); `norm`, when given,
    /// retrofits it to that scheme (e.g. `lns` on a pretrained Pre-LN model).
    #[arg(long)]
    pub init_from: Option<PathBuf>,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self { preset: "tiny-8l".into(), layers: None, norm: None, init: None, init_from: None }
    }
}

/// The training data and how it becomes sequences. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Data")]
pub struct DataSettings {
    /// Corpus files and folders: text, JSON lines or JSON (`.jsonl`, `.json`, either `.gz`), Parquet
    /// (the `parquet` feature), or nanoGPT / llm.c token files (`.bin`); empty for the built-in
    /// corpus (docs/data.md).
    #[arg(id = "data", long = "data", value_name = "DATA", num_args = 1..)]
    #[serde(rename = "data")]
    pub files: Vec<PathBuf>,
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
    /// How documents become sequences: `pack` (concatenated and cut into windows, every position
    /// a real token) or `truncate` (each document its own sequence, cut at `seq_len`, padded,
    /// padding masked from the loss and the token counts: the paper authors' mode).
    #[arg(long, value_enum, required = false)]
    pub sequences: SequenceMode,
    /// Seed of the data: which documents are held out for validation, and the built-in corpus.
    /// Unset: 1, whatever `seed` is, so that runs of every seed are evaluated on the same
    /// documents and a sweep's spread over seeds is the models' alone.
    #[arg(long)]
    pub data_seed: Option<u64>,
    /// Where token caches live (default: `.token-cache` beside the run directory).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

impl Default for DataSettings {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            text_field: crate::data::DEFAULT_TEXT_FIELD.into(),
            builtin_docs: 20_000,
            tokenizer: "byte".into(),
            seq_len: 128,
            sequences: SequenceMode::Pack,
            data_seed: None,
            cache_dir: None,
        }
    }
}

/// The optimiser, its batch and its learning-rate schedule. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Optimiser and schedule")]
pub struct OptimSettings {
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
}

impl Default for OptimSettings {
    fn default() -> Self {
        Self {
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
        }
    }
}

/// How often the run validates, and on what. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Evaluation")]
pub struct EvalSettings {
    /// Validate every this many steps (the last interval may be shorter). Unset: every
    /// 100 steps, or at the end of a shorter run (a divisor of `save_every` when that is set).
    #[arg(long)]
    pub eval_every: Option<usize>,
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
}

impl Default for EvalSettings {
    fn default() -> Self {
        Self { eval_every: None, eval_batches: 20, valid_fraction: 0.05, valid_data: Vec::new(), valid_tokens: None }
    }
}

/// When the run saves, and what it keeps. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Checkpoints")]
pub struct CheckpointSettings {
    /// Save a checkpoint every this many steps (a multiple of `eval_every`); the end of the run is
    /// always saved. Unset: at every validation.
    #[arg(long)]
    pub save_every: Option<usize>,
    /// Checkpoints kept besides the best one.
    #[arg(long, required = false)]
    pub keep_checkpoints: usize,
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self { save_every: None, keep_checkpoints: 2 }
    }
}

/// Where the run writes, and what it reports. One of [`TrainConfig`](super::TrainConfig)'s groups
/// (flat in config files and on the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
#[command(next_help_heading = "Output")]
pub struct OutputSettings {
    /// Run directory.
    #[arg(long, required = false)]
    pub out: PathBuf,
    /// Samples generated at the end (at most 3: one per built-in prompt).
    #[arg(long, required = false, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=3))]
    pub samples: usize,
    /// Print a log line every this many steps (plain output).
    #[arg(long, required = false)]
    pub log_every: usize,
    /// Record the layer-wise variance and per-layer gradient norms every this many steps
    /// (`tracking.jsonl` in the run directory). Unset: at every validation while TensorBoard
    /// files are written, else never.
    #[arg(long)]
    pub track_every: Option<usize>,
    /// Write TensorBoard event files (`tensorboard/` in the run directory): `--tensorboard false`
    /// turns them off.
    #[arg(long, required = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub tensorboard: bool,
    /// Peak TFLOP/s of the device for MFU, when it is not a known GPU.
    #[arg(long)]
    pub peak_tflops: Option<f64>,
}

impl Default for OutputSettings {
    fn default() -> Self {
        Self {
            out: PathBuf::from("runs/default"),
            samples: 3,
            log_every: 20,
            track_every: None,
            tensorboard: true,
            peak_tflops: None,
        }
    }
}

/// An error naming `field` when a count that must be positive is 0.
fn nonzero(fields: &[(&'static str, Option<usize>)]) -> Result<(), ConfigError> {
    match fields.iter().find(|(_, value)| *value == Some(0)) {
        Some(&(field, _)) => Err(ConfigError::Zero { field }),
        None => Ok(()),
    }
}

/// An error naming `field` when a number is infinite or NaN.
fn finite(fields: &[(&'static str, Option<f64>)]) -> Result<(), ConfigError> {
    match fields.iter().find_map(|&(field, value)| value.filter(|v| !v.is_finite()).map(|v| (field, v))) {
        Some((field, value)) => Err(ConfigError::OutOfRange { field, value, expected: "a finite number" }),
        None => Ok(()),
    }
}

impl ModelSettings {
    /// Checks the depth.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("layers", self.layers)])
    }
}

impl DataSettings {
    /// Checks the sequence length, the built-in corpus's size and the text field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("seq_len", Some(self.seq_len))])?;
        if self.builtin_docs > MAX_BUILTIN_DOCS {
            return Err(ConfigError::OutOfRange {
                field: "builtin_docs",
                value: self.builtin_docs as f64,
                expected: "at most 1,000,000 documents (for a larger corpus, give --data)",
            });
        }
        if self.text_field.is_empty() {
            return Err(ConfigError::Conflict(
                "`text_field` is empty; give the JSON field or Parquet column that holds the documents' text \
                 (default `text`)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The seed of the validation split and of the built-in corpus: `data_seed`, or
    /// [`DEFAULT_DATA_SEED`] when unset.
    pub fn data_seed(&self) -> u64 {
        self.data_seed.unwrap_or(DEFAULT_DATA_SEED)
    }
}

impl OptimSettings {
    /// Checks the batch, the number of steps, the optimiser's numbers and the schedule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("batch_size", Some(self.batch_size)),
            ("grad_accum", Some(self.grad_accum)),
            ("steps", Some(self.steps)),
        ])?;
        finite(&[
            ("lr", Some(self.lr)),
            ("min_lr_ratio", Some(self.min_lr_ratio)),
            ("weight_decay", Some(self.weight_decay)),
            ("beta1", Some(self.beta1)),
            ("beta2", Some(self.beta2)),
            ("eps", Some(self.eps)),
            ("clip_grad_norm", self.clip_grad_norm),
        ])?;
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
        for (field, value) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            // The optimiser computes in f32, where 0.99999999 is 1: its bias correction `1 - b^t`
            // would be 0 and the first update NaN.
            if !(0.0..1.0).contains(&value) || value as f32 >= 1.0 {
                return Err(ConfigError::OutOfRange {
                    field,
                    value,
                    expected: "a number in [0, 1) that stays below 1 in f32 (at most 0.99999994)",
                });
            }
        }
        if self.weight_decay < 0.0 {
            return Err(ConfigError::OutOfRange { field: "weight_decay", value: self.weight_decay, expected: ">= 0" });
        }
        if self.eps <= 0.0 {
            return Err(ConfigError::OutOfRange { field: "eps", value: self.eps, expected: "> 0" });
        }
        self.schedule().init()?;
        Ok(())
    }

    /// Warmup steps: the set value, else a tenth of the steps, at most 40.
    pub fn warmup(&self) -> usize {
        self.warmup.unwrap_or((self.steps / 10).min(40))
    }

    /// The learning-rate schedule of the run.
    pub fn schedule(&self) -> crate::train::WarmupCosineConfig {
        crate::train::WarmupCosineConfig::new(self.lr, self.steps)
            .with_warmup_steps(self.warmup())
            .with_min_lr_ratio(self.min_lr_ratio)
    }
}

impl EvalSettings {
    /// Checks the interval and the validation's size.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("eval_every", self.eval_every),
            ("eval_batches", Some(self.eval_batches)),
            ("valid_tokens", self.valid_tokens.map(|n| n as usize)),
        ])?;
        finite(&[("valid_fraction", Some(self.valid_fraction))])?;
        if !(self.valid_fraction > 0.0 && self.valid_fraction < 1.0) {
            return Err(ConfigError::OutOfRange {
                field: "valid_fraction",
                value: self.valid_fraction,
                expected: "a fraction in (0, 1)",
            });
        }
        Ok(())
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
}

impl CheckpointSettings {
    /// Checks the interval.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("save_every", self.save_every)])
    }
}

impl OutputSettings {
    /// Checks the intervals, the samples and the device's peak.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("log_every", Some(self.log_every)), ("track_every", self.track_every)])?;
        if self.samples > 3 {
            let value = self.samples as f64;
            return Err(ConfigError::OutOfRange { field: "samples", value, expected: "at most 3 (one per prompt)" });
        }
        finite(&[("peak_tflops", self.peak_tflops)])?;
        if let Some(peak) = self.peak_tflops.filter(|&peak| peak <= 0.0) {
            return Err(ConfigError::OutOfRange { field: "peak_tflops", value: peak, expected: "a number > 0" });
        }
        Ok(())
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
