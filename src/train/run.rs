//! A whole training run: checks every input before any work, prepares the data, trains on
//! burn-train, and writes the run directory.
//!
//! The run directory holds `train.json` (the full config), `model.json` + `model.bpk` (the final
//! model), `checkpoint/{model,optim,scheduler}-<epoch>.bpk` (every `save_every` steps, the last
//! `keep_checkpoints` and the best), burn-train's logs, and `metrics.csv` / `metrics.jsonl`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::data::dataloader::DataLoaderBuilder;
use burn::module::{Module, ParamGroup};
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer};
use burn::tensor::Device;
use burn::train::metric::{LearningRateMetric, LossMetric, Metric};
use burn::train::{ExecutionStrategy, Learner, MultiDeviceOptim, SupervisedTraining};

use super::checkpoint::{load_model_dir, read_model_dir_config, save_run_model, AtomicCheckpointer, RunModelInfo};
use super::config::{OptimizerKind, TrainConfig};
use super::export::export_metrics;
use super::loader::{FirstWindows, StepLoader};
use super::metrics::{flops_per_token, StepMetric};
use super::renderer::PlainRenderer;
use super::step::{StepSettings, TrainingModel};
use super::strategy::RunCheckpointing;
use super::tracking::{Tracker, TRACKING_FILE};
use super::WarmupCosine;
use crate::data::{tokenize_corpus, train_valid_datasets, CorpusSource, DataError, LmBatcher, PackedDataset, Tokenizer};
use crate::model::Llama;
use crate::{parse_devices, set_precision, ConfigError, LlamaConfig, NormScheme, Precision};

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A bad setting.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Bad or missing data.
    #[error("{0}")]
    Data(#[from] DataError),
    /// The run directory cannot be used.
    #[error("run directory {path}: {message}")]
    RunDir {
        /// The directory.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The loss or gradients became non-finite; the last good checkpoint is kept.
    #[error("training stopped: {0}")]
    Diverged(String),
    /// burn-train failed.
    #[error("training failed: {0}")]
    Training(String),
}

/// What a finished run reports.
#[derive(Debug)]
pub struct TrainReport {
    /// The trained model (no autodiff).
    pub model: Llama,
    /// Its config.
    pub model_config: LlamaConfig,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// Mean validation loss of the final model.
    pub valid_loss: f64,
    /// Training loss of every micro-batch, in order (this process's steps only when resumed).
    pub train_losses: Vec<f64>,
    /// Tokens per second over the whole run.
    pub tokens_per_second: f64,
    /// Wall time of the training itself, in seconds.
    pub seconds: f64,
    /// The run directory.
    pub out: PathBuf,
}

/// The model config a training config asks for.
pub fn model_config(config: &TrainConfig) -> Result<LlamaConfig, ConfigError> {
    let path = Path::new(&config.model);
    let mut model = if let Some(source) = &config.init_from {
        let mut model = read_model_dir_config(source)?;
        if let Some(norm) = &config.norm {
            model.norm_scheme = norm.parse::<NormScheme>()?;
        }
        model.validate()?;
        return Ok(model);
    } else if config.model.ends_with(".json") || path.is_file() {
        LlamaConfig::from_file(path)?
    } else {
        LlamaConfig::preset(&config.model)?
    };
    if let Some(layers) = config.layers {
        model.n_layers = layers;
    }
    if let Some(norm) = &config.norm {
        model.norm_scheme = norm.parse::<NormScheme>()?;
    }
    model.validate()?;
    Ok(model)
}

/// Epochs whose model checkpoint (with its optimiser and scheduler state) is complete on disk.
fn complete_checkpoints(dir: &Path) -> Vec<usize> {
    let mut epochs: Vec<usize> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("model-")?.strip_suffix(".bpk")?.parse::<usize>().ok()
                })
                .filter(|epoch| {
                    ["optim", "scheduler"].iter().all(|kind| dir.join(format!("{kind}-{epoch}.bpk")).is_file())
                })
                .collect()
        })
        .unwrap_or_default();
    epochs.sort_unstable();
    epochs
}

/// Everything checked and prepared before training starts.
struct Prepared {
    model: LlamaConfig,
    tokenizer: Tokenizer,
    /// The training devices; the first is the main one.
    devices: Vec<Device>,
    train: Arc<PackedDataset>,
    valid: Arc<PackedDataset>,
    resume_epoch: Option<usize>,
    /// Complete checkpoints already on disk (those of the run being resumed).
    checkpoints: Vec<usize>,
}

fn prepare(config: &TrainConfig, resume: bool, overwrite: bool) -> Result<Prepared, TrainError> {
    config.validate()?;
    let model = model_config(config)?;
    let tokenizer = Tokenizer::from_spec(&config.tokenizer)?;
    if tokenizer.vocab_size() > model.vocab_size {
        return Err(ConfigError::Unsupported(format!(
            "the tokenizer has {} tokens but the model's vocabulary is {}; use a model config with vocab_size >= {}",
            tokenizer.vocab_size(),
            model.vocab_size,
            tokenizer.vocab_size()
        ))
        .into());
    }
    if config.seq_len > model.max_seq_len {
        return Err(ConfigError::OutOfRange {
            field: "seq_len",
            value: config.seq_len as f64,
            expected: "at most the model's max_seq_len",
        }
        .into());
    }

    let out = &config.out;
    let run_dir_error = |message: String| TrainError::RunDir { path: out.display().to_string(), message };
    std::fs::create_dir_all(out).map_err(|e| run_dir_error(format!("cannot create it: {e}")))?;
    crate::io::write_atomically(&out.join(".write-test"), b"ok")
        .map_err(|e| run_dir_error(format!("cannot write into it: {e}")))?;
    let _ = std::fs::remove_file(out.join(".write-test"));
    let checkpoints = complete_checkpoints(&out.join("checkpoint"));
    let resume_epoch = if resume {
        let saved = out.join("train.json");
        let previous = TrainConfig::from_file(&saved)
            .map_err(|e| run_dir_error(format!("nothing to resume: {e}")))?;
        let previous_model = model_config(&previous)?;
        if previous_model != model {
            return Err(run_dir_error(
                "its checkpoints are of another model config; resume with the same --model, --layers and --norm".into(),
            ));
        }
        if (previous.seq_len, previous.batch_size, previous.grad_accum, previous.eval_every, previous.seed)
            != (config.seq_len, config.batch_size, config.grad_accum, config.eval_every, config.seed)
        {
            return Err(run_dir_error(
                "resuming needs the same seq_len, batch_size, grad_accum, eval_every and seed as the original run".into(),
            ));
        }
        let last = *checkpoints.last().ok_or_else(|| run_dir_error("has no complete checkpoint to resume from".into()))?;
        if last >= config.epochs() {
            return Err(run_dir_error(format!(
                "the checkpoint is at step {}, already at or past --steps {}",
                last * config.eval_every,
                config.steps
            )));
        }
        Some(last)
    } else {
        let holds_run = !checkpoints.is_empty() || out.join("model.bpk").exists() || out.join("train.json").exists();
        if holds_run && !overwrite {
            return Err(run_dir_error(
                "already holds a run; pass --resume to continue it, --overwrite to replace it, or choose another --out"
                    .into(),
            ));
        }
        if holds_run {
            // Only what a run writes is removed; anything else in the directory stays.
            for name in ["checkpoint", "train", "valid", "model.bpk", "model.json", "train.json", "metrics.csv", "metrics.jsonl", "tracking.jsonl"] {
                let path = out.join(name);
                let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
                if let Err(e) = removed.or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }) {
                    return Err(run_dir_error(format!("cannot remove the old run's {name}: {e}")));
                }
            }
        }
        None
    };

    let mut devices = parse_devices(&config.device)?;
    for device in &mut devices {
        if config.bf16 {
            set_precision(device, Precision::Bf16)?;
        }
        device.seed(config.seed);
    }

    let source = if config.data.is_empty() {
        CorpusSource::Builtin { n_docs: config.builtin_docs, seed: config.seed }
    } else {
        CorpusSource::Files(config.data.clone())
    };
    let cache_root = config.cache_dir.clone().unwrap_or_else(|| {
        out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).join(".token-cache")
    });
    let cache = Arc::new(tokenize_corpus(&source, &tokenizer, &cache_root)?);
    let (train, valid) = train_valid_datasets(cache, config.seq_len, config.valid_fraction, config.seed)?;
    let checkpoints = if resume { checkpoints } else { Vec::new() };
    Ok(Prepared { model, tokenizer, devices, train: Arc::new(train), valid: Arc::new(valid), resume_epoch, checkpoints })
}

fn optimizer(config: &TrainConfig) -> ModuleOptimizer {
    let (beta1, beta2, eps) = (config.beta1 as f32, config.beta2 as f32, config.eps as f32);
    match config.optimizer {
        OptimizerKind::Adam => AdamConfig::new().with_beta_1(beta1).with_beta_2(beta2).with_epsilon(eps).init(),
        OptimizerKind::Adamw => {
            let adamw = |decay: f64| {
                AdamWConfig::new().with_beta_1(beta1).with_beta_2(beta2).with_epsilon(eps).with_weight_decay(decay as f32)
            };
            // Norms, embeddings and branch gates are never decayed.
            let no_decay = ParamGroup::from_any_predicates(vec!["norm", "embed_tokens", "attn_gate", "ffn_gate"]);
            adamw(config.weight_decay).init().with_group(no_decay, adamw(0.0).build(), None)
        }
    }
}

/// Trains as `config` says; `resume` continues the run in `config.out` from its last checkpoint.
pub fn train(config: &TrainConfig, resume: bool) -> Result<TrainReport, TrainError> {
    run(config, resume, false)
}

/// As [`train`], replacing a run already in `config.out` (its checkpoints, model, logs and metrics).
pub fn train_overwriting(config: &TrainConfig) -> Result<TrainReport, TrainError> {
    run(config, false, true)
}

fn run(config: &TrainConfig, resume: bool, overwrite: bool) -> Result<TrainReport, TrainError> {
    let prepared = prepare(config, resume, overwrite)?;
    let out = config.out.clone();
    let run_dir_error = |message: String| TrainError::RunDir { path: out.display().to_string(), message };
    let json = serde_json::to_string_pretty(config).map_err(|e| run_dir_error(e.to_string()))?;
    crate::io::write_atomically(&out.join("train.json"), json.as_bytes()).map_err(|e| run_dir_error(e.to_string()))?;
    // Written first so that the checkpoints of an interrupted run can be loaded.
    let mut info = RunModelInfo { model: prepared.model.clone(), tokenizer: config.tokenizer.clone(), steps: 0 };
    let info_json = serde_json::to_string_pretty(&info).map_err(|e| run_dir_error(e.to_string()))?;
    crate::io::write_atomically(&out.join("model.json"), info_json.as_bytes()).map_err(|e| run_dir_error(e.to_string()))?;

    let devices: Vec<Device> = prepared.devices.iter().map(|d| d.clone().autodiff()).collect();
    let device = devices[0].clone();
    // Each optimiser step sums the gradients of `grad_accum` micro-batches on every device.
    let micro_batches = config.grad_accum * devices.len();
    let steps_per_epoch = config.eval_every;
    let start_epoch = prepared.resume_epoch.unwrap_or(0);
    let train_loader = Arc::new(StepLoader::new(
        prepared.train.clone(),
        config.batch_size,
        steps_per_epoch * micro_batches,
        config.seed,
        start_epoch,
        device.clone(),
    ));
    // Validation runs on the main device with the global batch (batch_size per device).
    let global_batch = config.batch_size * devices.len();
    let valid_loader = DataLoaderBuilder::new(LmBatcher)
        .batch_size(global_batch)
        .build(FirstWindows::new(prepared.valid.clone(), global_batch * config.eval_batches));

    let last_grad_norm = Arc::new(Mutex::new(f64::NAN));
    let failure = Arc::new(Mutex::new(None));
    let loss_metric = LossMetric::new();
    let mut training = SupervisedTraining::new(&out, train_loader, valid_loader)
        .num_epochs(config.epochs())
        // burn-train would otherwise train on `Device::default()`, not the chosen device.
        .with_training_strategy(
            if devices.len() == 1 {
                ExecutionStrategy::single(device.clone())
            } else {
                ExecutionStrategy::multi(devices.clone(), MultiDeviceOptim::OptimMainDevice)
            }
            .into(),
        )
        // No application logger: it would install a process-wide panic hook and tracing subscriber.
        .with_application_logger(None)
        .metrics((LossMetric::new(), StepMetric::perplexity()))
        .metric_train_numeric(LearningRateMetric::new())
        .metric_train_numeric(StepMetric::tokens_per_second())
        .metric_train_numeric(StepMetric::grad_norm(last_grad_norm.clone()))
        .with_custom_checkpointers(
            AtomicCheckpointer::new(out.join("checkpoint"), "model"),
            AtomicCheckpointer::new(out.join("checkpoint"), "optim"),
            AtomicCheckpointer::new(out.join("checkpoint"), "scheduler"),
        )
        .with_checkpointing_strategy(RunCheckpointing::new(
            config.save_every / config.eval_every,
            config.epochs(),
            config.keep_checkpoints,
            prepared.checkpoints.clone(),
            loss_metric.name(),
        ));
    if let Some(peak) = config.peak_tflops {
        training = training.metric_train_numeric(StepMetric::mfu(flops_per_token(&prepared.model, config.seq_len), peak));
    }
    if config.grad_accum > 1 {
        training = training.grads_accumulation(config.grad_accum);
    }
    if !std::io::stdout().is_terminal() {
        training = training.renderer(Box::new(PlainRenderer::new(
            config.steps,
            steps_per_epoch,
            micro_batches,
            config.log_every,
        )));
    }
    if let Some(epoch) = prepared.resume_epoch {
        println!("resuming from the checkpoint at step {}", epoch * steps_per_epoch);
        training = training.checkpoint(epoch);
    }

    let tracker = match config.track_every {
        Some(every) => {
            // The probe: the first validation sequences, the same at every record.
            let n = prepared.valid.len().min(config.batch_size).min(8);
            let probe = LmBatcher.batch((0..n).map(|i| prepared.valid.window(i)).collect(), &prepared.devices[0]);
            let tracker = Tracker::new(&out, every, probe.inputs.into_data(), start_epoch * steps_per_epoch)
                .map_err(|e| run_dir_error(format!("cannot write {TRACKING_FILE}: {e}")))?;
            Some(Arc::new(tracker))
        }
        None => None,
    };
    let settings = StepSettings {
        micro_batches,
        clip_grad_norm: config.clip_grad_norm,
        last_grad_norm,
        interrupter: Some(training.interrupter()),
        failure: failure.clone(),
        tracker,
    };
    let initial = match &config.init_from {
        Some(source) => {
            let loaded = load_model_dir(source, None, &device)?;
            crate::model::retrofit(loaded.model, &loaded.config, prepared.model.norm_scheme.clone())?.0
        }
        None => prepared.model.init(&device)?,
    };
    let model = TrainingModel::new(initial, settings);
    let schedule = WarmupCosine::new(config.lr, config.warmup, config.steps, config.min_lr_ratio)?;
    let learner = Learner::new(model, optimizer(config), schedule);

    let started = Instant::now();
    let result = training.launch(learner);
    let seconds = started.elapsed().as_secs_f64();
    let rows = export_metrics(&out).map_err(|e| run_dir_error(format!("cannot write metrics: {e}")))?;
    if let Some(reason) = failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(TrainError::Diverged(format!(
            "{reason}; the last good checkpoint is kept in {}",
            out.join("checkpoint").display()
        )));
    }
    if let Some(error) = result.error {
        return Err(TrainError::Training(error.to_string()));
    }
    if let Some(interruption) = result.interrupted {
        return Err(TrainError::Training(format!("interrupted: {interruption:?}")));
    }

    let model = result.model.into_model().valid();
    info.steps = config.steps;
    save_run_model(&out, &model, &info)?;
    let train_losses: Vec<f64> =
        rows.iter().filter(|r| r.split == "train" && r.metric == "Loss").map(|r| r.value).collect();
    let trained_steps = config.steps - start_epoch * steps_per_epoch;
    let tokens = trained_steps * micro_batches * config.batch_size * config.seq_len;
    let valid_loss = crate::analysis::mean_loss(&model, &prepared.valid, global_batch, config.eval_batches, &[])?;
    Ok(TrainReport {
        model,
        model_config: prepared.model,
        tokenizer: prepared.tokenizer,
        valid_loss,
        train_losses,
        tokens_per_second: tokens as f64 / seconds,
        seconds,
        out,
    })
}
