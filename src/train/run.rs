//! A whole training run: checks every input before anything in the run directory is touched,
//! prepares the data, trains on burn-train, and writes the run directory ([`RunDir`]).
//!
//! The run directory holds `train.json` (the full config, every interval resolved), `model.json`
//! and `model.bpk` (the final model), `checkpoint/{model,optim,scheduler}-<epoch>.bpk` (every
//! `save_every` steps, the last `keep_checkpoints` and the best; each with a `.sum`), and
//! `metrics.jsonl` (every metric value, as it is logged) with `metrics.csv`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::transform::PartialDataset;
use burn::data::dataset::Dataset;
use burn::module::{Module, ParamGroup};
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer};
use burn::tensor::Device;
use burn::train::metric::{LearningRateMetric, LossMetric, Metric};
use burn::train::{ExecutionStrategy, Learner, MultiDeviceOptim, SupervisedTraining};

use super::checkpoint::{CheckpointKeeper, SummedCheckpointer};
use super::config::{OptimizerKind, TrainConfig};
use super::export::write_metrics_csv;
use super::loader::StepLoader;
use super::metric_logger::RunMetricLogger;
use super::metrics::{flops_per_token, StepMetric};
use super::renderer::PlainRenderer;
use super::run_dir::RunDir;
use super::step::{StepSettings, TrainingModel};
use super::strategy::RunCheckpointing;
use super::tracking::Tracker;
use crate::data::{tokenize_corpus, train_valid_datasets, CorpusSource, LmBatcher, PackedDataset, Tokenizer};
use crate::io::write_atomically;
use crate::measure::read_metrics;
use crate::memory::{available_memory_bytes, format_bytes, uses_host_memory};
use crate::model::{first_non_finite_parameter, Llama};
use crate::run::{
    load_model_dir, load_run_model, read_model_dir_config, save_run_model, RunModelInfo, METRICS, MODEL, MODEL_INFO,
    PREVIOUS_RUN, TRACKING, TRAIN_CONFIG,
};
use crate::{parse_devices, set_precision, ConfigError, Error, LlamaConfig, Precision};

/// How a training starts in its run directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A new run: the directory must be new or empty.
    New,
    /// Continue the run in the directory from its last complete checkpoint (from step 0 when it
    /// has none yet; when every step is done but the final model was cut short, write the final
    /// model). The settings that decide what is trained must be the run's own.
    Resume,
    /// Replace the run in the directory. The old run is set aside, and only removed once the new
    /// one has a checkpoint; a new run that fails before that puts it back.
    Overwrite,
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
    /// Optimiser steps this call trained (fewer than the run's when resumed).
    pub steps_trained: usize,
    /// Tokens per second over the whole run.
    pub tokens_per_second: f64,
    /// Wall time of the training itself, in seconds.
    pub seconds: f64,
    /// The run directory.
    pub out: PathBuf,
}

/// The model config a training config asks for: the preset or file of `model`, with `layers`
/// and `norm` applied when set (or the shape of `init_from`, retrofitted to `norm`).
pub fn model_config(config: &TrainConfig) -> Result<LlamaConfig, Error> {
    let path = Path::new(&config.model);
    let mut model = if let Some(source) = &config.init_from {
        if let Some(layers) = config.layers {
            return Err(ConfigError::Conflict(format!(
                "`layers` ({layers}) cannot change the depth of the model of `init_from` ({}); leave --layers unset",
                source.display()
            ))
            .into());
        }
        read_model_dir_config(source)?
    } else if config.model.ends_with(".json") || path.is_file() {
        LlamaConfig::from_file(path)?
    } else {
        LlamaConfig::preset(&config.model)?
    };
    if let Some(layers) = config.layers {
        model.n_layers = layers;
    }
    if let Some(norm) = &config.norm {
        model.norm_scheme = norm.clone();
    }
    model.validate()?;
    Ok(model)
}

/// Settings a resumed run may change (with a notice): they do not change what is trained.
pub(crate) const RESUME_MAY_CHANGE: [&str; 11] = [
    "device",
    "out",
    "samples",
    "log_every",
    "peak_tflops",
    "save_every",
    "keep_checkpoints",
    "cache_dir",
    "lr",
    "clip_grad_norm",
    "track_every",
];

/// Settings compared by what they make rather than as written: the model config (from `model`,
/// `layers`, `norm`, `init_from`) and the data (content of `data`, `tokenizer`, `builtin_docs`).
const RESUME_COMPARED_BY_EFFECT: [&str; 7] =
    ["model", "layers", "norm", "init_from", "data", "tokenizer", "builtin_docs"];

/// The settings of `now` that differ from the run's `saved` ones, as `field: saved -> now`, split
/// into those a resume may change and those it may not.
fn resume_changes(saved: &TrainConfig, now: &TrainConfig) -> (Vec<String>, Vec<String>) {
    let (mut allowed, mut refused) = (Vec::new(), Vec::new());
    for (field, change) in setting_changes(saved, now) {
        if RESUME_COMPARED_BY_EFFECT.contains(&field.as_str()) {
            continue;
        }
        if RESUME_MAY_CHANGE.contains(&field.as_str()) {
            allowed.push(change)
        } else {
            refused.push(change)
        }
    }
    (allowed, refused)
}

/// The settings of `now` that differ from `saved` (defaults resolved), as `(field, "field: saved
/// -> now")`. The output directory is left out: it is the same one, however it is spelled.
pub(crate) fn setting_changes(saved: &TrainConfig, now: &TrainConfig) -> Vec<(String, String)> {
    let to_map = |config: &TrainConfig| match serde_json::to_value(config.resolved()) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (saved, now) = (to_map(saved), to_map(now));
    now.into_iter()
        .filter(|(field, _)| field != "out")
        .filter_map(|(field, value)| {
            let old = saved.get(&field).cloned().unwrap_or(serde_json::Value::Null);
            (old != value).then(|| (field.clone(), format!("{field}: {old} -> {value}")))
        })
        .collect()
}

/// An error unless `config` trains what the run in `dir` trained: the same settings (but those
/// a resume may change, returned as `field: saved -> now`), the same model config and the same
/// data content.
fn check_resume(dir: &RunDir, config: &TrainConfig, prepared: &Prepared) -> Result<Vec<String>, String> {
    let saved = TrainConfig::from_file(dir.path().join(TRAIN_CONFIG)).map_err(|e| format!("nothing to resume: {e}"))?;
    let info_path = dir.path().join(MODEL_INFO);
    let info: RunModelInfo = std::fs::read_to_string(&info_path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        .map_err(|e| format!("nothing to resume: {}: {e}", info_path.display()))?;
    let (allowed, mut refused) = resume_changes(&saved, config);
    if info.model != prepared.model {
        let describe = |m: &LlamaConfig| format!("{} layers x d_model {} ({})", m.n_layers, m.d_model, m.norm_scheme);
        refused.push(format!(
            "model: {} -> {} (as model.json records it)",
            describe(&info.model),
            describe(&prepared.model)
        ));
    }
    if info.data.as_ref().is_some_and(|data| *data != prepared.data) {
        refused.push("data: the content of the data (or the tokenizer) is not the run's".into());
    }
    if !refused.is_empty() {
        let advice = if dir.path().join(PREVIOUS_RUN).exists() {
            format!(
                "this run is an unfinished --overwrite of another (kept in {}): `train --config {}/train.json \
                 --resume` finishes it",
                dir.path().join(PREVIOUS_RUN).display(),
                dir.path().display()
            )
        } else {
            format!(
                "Resume with the run's own settings and data, or start a new run from this one with --init-from {} \
                 --out NEW_DIR",
                dir.path().display()
            )
        };
        return Err(format!(
            "resuming must keep what is trained, but these differ from the run's: {}. {advice}",
            refused.join("; ")
        ));
    }
    Ok(allowed)
}

/// Everything checked and prepared before the run directory is touched.
struct Prepared {
    model: LlamaConfig,
    tokenizer: Tokenizer,
    /// The training devices; the first is the main one.
    devices: Vec<Device>,
    train: Arc<PackedDataset>,
    valid: Arc<PackedDataset>,
    /// The data's content fingerprint.
    data: String,
    /// The weights of `init_from`, retrofitted to the run's scheme, on the main training device:
    /// read before the run directory is touched, so a run may replace the one it starts from.
    init: Option<Llama>,
}

/// Bytes a training step needs at least, activations only: the logits with their softmax and
/// gradient (`3 B T V`), and per layer the saved activations (`~16 B T d`) and attention scores
/// (`2 B h T^2`), all f32.
fn step_bytes_lower_bound(model: &LlamaConfig, batch: usize, seq: usize) -> f64 {
    let (b, t) = (batch as f64, seq as f64);
    let per_layer = 16.0 * b * t * model.d_model as f64 + 2.0 * b * model.n_heads as f64 * t * t;
    4.0 * (3.0 * b * t * model.vocab_size as f64 + model.n_layers as f64 * per_layer)
}

/// An error when the model's training state or a step of `batch_size` sequences cannot fit in the
/// machine's memory (checked on devices that use it): a failed allocation would abort the process.
pub(crate) fn check_step_memory(
    config: &TrainConfig,
    model: &LlamaConfig,
    devices: &[Device],
) -> Result<(), ConfigError> {
    let Some(available) = available_memory_bytes().filter(|_| devices.iter().any(uses_host_memory)) else {
        return Ok(());
    };
    // The weights, their gradients and Adam's two moments: the model is named first, since no
    // batch size can make a model that does not fit.
    model.check_fits(16, available)?;
    let batch = config.batch_size.max(config.batch_size * devices.len());
    let needed = step_bytes_lower_bound(model, batch, config.seq_len);
    if needed > available as f64 {
        return Err(ConfigError::Conflict(format!(
            "`batch_size` ({}) x `seq_len` ({}) needs at least {} for one training step's activations, but the \
             machine has {} available; lower --batch-size and raise --grad-accum to keep the tokens per step",
            config.batch_size,
            config.seq_len,
            format_bytes(needed.min(u64::MAX as f64) as u64),
            format_bytes(available)
        )));
    }
    Ok(())
}

/// Checks every setting, the devices and the data (tokenising it into the cache) without
/// touching the run directory.
fn prepare(config: &TrainConfig) -> Result<Prepared, Error> {
    config.validate()?;
    let model = model_config(config)?;
    let tokenizer = Tokenizer::from_spec(&config.tokenizer)?;
    tokenizer.check_fits(model.vocab_size)?;
    if config.seq_len > model.max_seq_len {
        return Err(ConfigError::Conflict(format!(
            "`seq_len` ({}) is longer than the model's `max_seq_len` ({}); lower --seq-len",
            config.seq_len, model.max_seq_len
        ))
        .into());
    }
    let mut devices = parse_devices(&config.device)?;
    for device in &mut devices {
        if config.bf16 {
            set_precision(device, Precision::Bf16)?;
        }
        device.seed(config.seed);
    }
    check_step_memory(config, &model, &devices)?;
    let (train, valid, data) = datasets(config, &tokenizer, model.vocab_size)?;
    let init = match &config.init_from {
        Some(source) => {
            let loaded = load_model_dir(source, None, &devices[0].clone().autodiff())?;
            Some(crate::model::retrofit(loaded.model, &loaded.config, model.norm_scheme.clone())?.0)
        }
        None => None,
    };
    Ok(Prepared { model, tokenizer, devices, train: Arc::new(train), valid: Arc::new(valid), data, init })
}

/// The validation windows a run of `config` evaluates on (its held-out documents), for measuring
/// its model afterwards.
pub fn validation_data(config: &TrainConfig) -> Result<PackedDataset, Error> {
    let tokenizer = Tokenizer::from_spec(&config.tokenizer)?;
    Ok(datasets(config, &tokenizer, model_config(config)?.vocab_size)?.1)
}

/// The training and validation windows of `config`'s corpus, tokenised (through the token cache),
/// and the corpus's fingerprint. A token id of `vocab_size` or more is an error.
fn datasets(
    config: &TrainConfig,
    tokenizer: &Tokenizer,
    vocab_size: usize,
) -> Result<(PackedDataset, PackedDataset, String), Error> {
    let source = if config.data.is_empty() {
        CorpusSource::Builtin { n_docs: config.builtin_docs, seed: config.seed }
    } else {
        CorpusSource::Files { paths: config.data.clone(), text_field: config.text_field.clone() }
    };
    let out = &config.out;
    // Beside the run directory (never inside it: `--out .` must stay a run of ours only).
    let cache_root = match &config.cache_dir {
        Some(dir) => dir.clone(),
        None => {
            let absolute = out.canonicalize().or_else(|_| std::path::absolute(out)).unwrap_or_else(|_| out.clone());
            absolute.parent().unwrap_or(Path::new("/")).join(".token-cache")
        }
    };
    let cache = Arc::new(tokenize_corpus(&source, tokenizer, &cache_root)?);
    cache.check_vocabulary(tokenizer, vocab_size)?;
    let data = cache.content_fingerprint();
    let (train, valid) = train_valid_datasets(cache, config.seq_len, config.valid_fraction, config.seed)?;
    Ok((train, valid, data))
}

/// The checkpoints a resumed run keeps, oldest first, ending with the one it starts from: the
/// newest that is complete (its files match their checksums) and sound (finite weights); empty
/// when there is none. Newer checkpoints that are not are named; the resumed run writes them again.
fn resume_checkpoints(dir: &RunDir, device: &Device) -> Result<Vec<usize>, Error> {
    let (mut complete, broken) = dir.checkpoints();
    let newest_complete = complete.last().copied().unwrap_or(0);
    for (epoch, problem) in broken.iter().filter(|(epoch, _)| *epoch > newest_complete) {
        crate::errln!("warning: skipping the checkpoint of epoch {epoch}: {problem}");
    }
    while let Some(&epoch) = complete.last() {
        let (model, _) = load_run_model(dir.path(), Some(epoch), device)?;
        match first_non_finite_parameter(&model) {
            None => break,
            Some(name) => {
                crate::errln!("warning: skipping the checkpoint of epoch {epoch}: its weights are not finite ({name})");
                complete.pop();
            }
        }
    }
    Ok(complete)
}

pub(crate) fn optimizer(config: &TrainConfig) -> ModuleOptimizer {
    let (beta1, beta2, eps) = (config.beta1 as f32, config.beta2 as f32, config.eps as f32);
    match config.optimizer {
        OptimizerKind::Adam => AdamConfig::new().with_beta_1(beta1).with_beta_2(beta2).with_epsilon(eps).init(),
        OptimizerKind::Adamw => {
            let adamw = |decay: f64| {
                AdamWConfig::new()
                    .with_beta_1(beta1)
                    .with_beta_2(beta2)
                    .with_epsilon(eps)
                    .with_weight_decay(decay as f32)
            };
            // Norms, embeddings and branch gates are never decayed.
            let no_decay = ParamGroup::from_any_predicates(vec!["norm", "embed_tokens", "attn_gate", "ffn_gate"]);
            adamw(config.weight_decay).init().with_group(no_decay, adamw(0.0).build(), None)
        }
    }
}

/// Trains as `config` says, starting as `start` says in the run directory `config.out`.
///
/// Every setting, the devices and the data are checked before the directory is touched; the
/// directory is locked for the run's life (a second training into it is refused).
pub fn train(config: &TrainConfig, start: Start) -> Result<TrainReport, Error> {
    RunDir::check(&config.out)?;
    // (An interrupted --overwrite may have set the run's train.json aside: it is put back under the lock.)
    if start == Start::Resume && !config.out.join(TRAIN_CONFIG).is_file() && !config.out.join(PREVIOUS_RUN).exists() {
        return Err(Error::RunDir {
            path: config.out.clone(),
            message: "nothing to resume: it holds no train.json; start a new run without --resume".into(),
        });
    }
    let prepared = prepare(config)?;
    let config = config.resolved();
    let run_dir_error = |message: String| Error::RunDir { path: config.out.clone(), message };
    let dir = RunDir::open(&config.out)?;
    // The checkpoints already on disk that the run keeps, the last one its start; and the
    // checkpoint to write the final model from when every step is done.
    let (existing, finish_at) =
        match start {
            Start::New if dir.holds_run() => return Err(run_dir_error(
                "already holds a run; pass --resume to continue it, --overwrite to replace it, or choose another --out"
                    .into(),
            )),
            Start::New | Start::Overwrite => (Vec::new(), None),
            Start::Resume => {
                // Read under the lock, after an interrupted --overwrite was undone.
                let changes = check_resume(&dir, &config, &prepared).map_err(run_dir_error)?;
                // Finished, with or without its checkpoints (deleted to free the disk, say).
                if crate::io::verify_sum(&dir.path().join(MODEL)).is_ok() {
                    return Err(finished(&config));
                }
                for change in changes {
                    crate::outln!("resuming with a changed setting: {change}");
                }
                let kept = resume_checkpoints(&dir, &prepared.devices[0])?;
                match kept.last() {
                    Some(&epoch) if epoch >= config.epochs() => (kept, Some(epoch)),
                    Some(_) => (kept, None),
                    None if reached_the_end(&dir, &config) => {
                        return Err(run_dir_error(
                            "finished (its final model.bpk, or its checksum, or its metrics' last step is there) but \
                             its final model does not verify and no checkpoint is complete: resuming would train \
                             it again from step 0 over its model and history. Check model.bpk (load it with \
                             generate); to train again, use --overwrite or a new --out"
                                .into(),
                        ))
                    }
                    None => {
                        crate::outln!("the run has no complete checkpoint yet: starting it again from step 0");
                        (kept, None)
                    }
                }
            }
        };
    if start == Start::Overwrite {
        // An earlier replacement of this run, killed after its first checkpoint, is replaced in turn.
        dir.finish_replacement().map_err(|e| run_dir_error(format!("cannot discard the replaced run: {e}")))?;
        if dir.holds_run() {
            dir.set_aside().map_err(|e| run_dir_error(format!("cannot set the old run aside: {e}")))?;
        }
    }
    let result = match finish_at {
        Some(epoch) => finish_from_checkpoint(&config, &dir, prepared, epoch),
        None => run(&config, &dir, prepared, existing),
    };
    // After an --overwrite, or a resume of one that was killed after its first checkpoint.
    if dir.path().join(PREVIOUS_RUN).exists() {
        match dir.finish_replacement() {
            Ok(true) => crate::errln!("note: the new run has no checkpoint; the run it was replacing is restored"),
            Ok(false) => {}
            Err(e) => {
                crate::errln!("warning: the replaced run is still in {}: {e}", dir.path().join(PREVIOUS_RUN).display())
            }
        }
    }
    result
}

/// Whether the run in `dir` got to its end: its final model or that model's checksum is there
/// (written only when a run finishes), or its metrics record a training loss at its last step.
fn reached_the_end(dir: &RunDir, config: &TrainConfig) -> bool {
    let path = dir.path();
    path.join(MODEL).exists()
        || crate::io::sum_path(&path.join(MODEL)).exists()
        || read_metrics(path).is_ok_and(|rows| rows.iter().any(|r| r.is_train_loss() && r.step >= config.steps))
}

/// The error of resuming a finished run (its final model verifies).
fn finished(config: &TrainConfig) -> Error {
    Error::RunDir {
        path: config.out.clone(),
        message: format!(
            "the run is finished ({} steps); to train longer, start a new run from it with --init-from {} --out NEW_DIR",
            config.steps,
            config.out.display()
        ),
    }
}

/// A resumed run whose every step is checkpointed but whose final model is missing or cut short:
/// writes it from the last checkpoint.
fn finish_from_checkpoint(
    config: &TrainConfig,
    dir: &RunDir,
    prepared: Prepared,
    epoch: usize,
) -> Result<TrainReport, Error> {
    crate::outln!(
        "every step is done: writing the final model from the checkpoint at step {}",
        config.step_at_epoch_end(epoch)
    );
    let (model, _) = load_run_model(dir.path(), Some(epoch), &prepared.devices[0])?;
    finish(config, prepared, model, Vec::new(), 0, 0, 0.0)
}

/// The validation loss a run reports: `config.eval_batches` batches of the global batch size.
pub(crate) fn validation_loss(
    config: &TrainConfig,
    model: &Llama,
    valid: &PackedDataset,
    n_devices: usize,
) -> Result<f64, Error> {
    crate::measure::mean_loss(model, valid, config.batch_size * n_devices, config.eval_batches, &[])
}

/// Saves the final model into the run directory and reports the run: `steps_trained` steps of
/// `tokens` in `seconds` by this call.
fn finish(
    config: &TrainConfig,
    prepared: Prepared,
    model: Llama,
    train_losses: Vec<f64>,
    steps_trained: usize,
    tokens: usize,
    seconds: f64,
) -> Result<TrainReport, Error> {
    let info = RunModelInfo {
        model: prepared.model.clone(),
        tokenizer: config.tokenizer.clone(),
        steps: config.steps,
        data: Some(prepared.data.clone()),
        tokenizer_identity: Some(prepared.tokenizer.identity()),
    };
    save_run_model(&config.out, &model, &info)?;
    let valid_loss = validation_loss(config, &model, &prepared.valid, prepared.devices.len())?;
    Ok(TrainReport {
        model,
        model_config: prepared.model,
        tokenizer: prepared.tokenizer,
        valid_loss,
        train_losses,
        steps_trained,
        tokens_per_second: if seconds > 0.0 { tokens as f64 / seconds } else { 0.0 },
        seconds,
        out: config.out.clone(),
    })
}

/// Trains in the locked run directory from the last of the `existing` checkpoints (from step 0
/// when there is none), which the checkpointing strategy keeps managing.
fn run(config: &TrainConfig, dir: &RunDir, mut prepared: Prepared, existing: Vec<usize>) -> Result<TrainReport, Error> {
    let start_epoch = existing.last().copied().unwrap_or(0);
    let out = dir.path().to_path_buf();
    record_run(config, &out, &prepared)?;
    let devices: Vec<Device> = prepared.devices.iter().map(|d| d.clone().autodiff()).collect();
    let device = devices[0].clone();
    let model = &prepared.model;
    crate::outln!(
        "training {} layers x d_model {} ({} parameters, {}) for {} steps on {} into {}",
        model.n_layers,
        model.d_model,
        model.num_params(),
        model.norm_scheme,
        config.steps,
        // `auto` names what it picked.
        if config.device == "auto" { format!("auto ({:?})", prepared.devices[0]) } else { config.device.clone() },
        out.display()
    );
    // Each optimiser step sums the gradients of `grad_accum` micro-batches on every device.
    let micro_batches = config.grad_accum * devices.len();
    let steps_per_epoch = config.eval_every();
    let train_loader = Arc::new(StepLoader::new(
        prepared.train.clone(),
        config.batch_size,
        steps_per_epoch * micro_batches,
        config.steps * micro_batches,
        config.seed,
        start_epoch,
        device.clone(),
    ));
    // Validation runs on the main device with the global batch (batch_size per device), on a
    // fixed subset: the first `eval_batches` global batches.
    let global_batch = config.batch_size * devices.len();
    let valid_windows = global_batch.saturating_mul(config.eval_batches).min(prepared.valid.len());
    let valid_subset = PartialDataset::new(prepared.valid.clone(), 0, valid_windows);
    let valid_loader = DataLoaderBuilder::new(LmBatcher).batch_size(global_batch).build(valid_subset);

    let failure = Arc::new(Mutex::new(None));
    let log_failure = Arc::new(Mutex::new(None));
    let logger = RunMetricLogger::open(
        &out,
        start_epoch,
        (steps_per_epoch, micro_batches),
        log_failure.clone(),
        failure.clone(),
    )
    .map_err(|e| Error::RunDir { path: out.clone(), message: format!("cannot write {METRICS}: {e}") })?;
    let loss_metric = LossMetric::new();
    let checkpoint_dir = dir.checkpoint_dir();
    let keeper = CheckpointKeeper::new(&checkpoint_dir, existing.clone());
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
        .with_metric_logger(logger)
        .metrics((LossMetric::new(), StepMetric::perplexity()))
        .metric_train_numeric(LearningRateMetric::new())
        .metric_train_numeric(StepMetric::tokens_per_second())
        .metric_train_numeric(StepMetric::grad_norm())
        .with_custom_checkpointers(
            SummedCheckpointer::new(&checkpoint_dir, "model"),
            SummedCheckpointer::new(&checkpoint_dir, "optim"),
            SummedCheckpointer::new(&checkpoint_dir, "scheduler"),
        )
        .with_checkpointing_strategy(RunCheckpointing::new(
            config.save_every() / steps_per_epoch,
            config.epochs(),
            config.keep_checkpoints,
            existing,
            keeper.clone(),
            loss_metric.name(),
            failure.clone(),
        ));
    if let Some(peak) = config.peak_tflops {
        training =
            training.metric_train_numeric(StepMetric::mfu(flops_per_token(&prepared.model, config.seq_len), peak));
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
    if start_epoch > 0 {
        crate::outln!("resuming from the checkpoint at step {}", config.step_at_epoch_end(start_epoch));
        training = training.checkpoint(start_epoch);
    }

    let start_step = config.step_at_epoch_end(start_epoch);
    let settings = StepSettings {
        micro_batches,
        clip_grad_norm: config.clip_grad_norm,
        interrupter: Some(training.interrupter()),
        failure: failure.clone(),
        tracker: tracker(config, &prepared, &out, start_step)?,
        ..StepSettings::default()
    };
    let model = TrainingModel::new(initial_model(&mut prepared, &device)?, settings);
    let learner = Learner::new(model, optimizer(config), config.schedule().init()?);

    let started = Instant::now();
    let result = training.launch(learner);
    let seconds = started.elapsed().as_secs_f64();
    // Every save is done (burn-train's checkpointer threads have ended): the last deletions.
    keeper.prune();
    let rows = read_metrics(&out)?;
    write_metrics_csv(&out, &rows).map_err(|e| Error::RunDir {
        path: out.clone(),
        message: format!("cannot write {}: {e}", crate::run::METRICS_CSV),
    })?;
    if let Some(reason) = failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(diverged(config, dir, reason));
    }
    if let Some(row) = crate::measure::first_non_finite_loss(&rows) {
        let reason = format!(
            "the training loss is not finite at step {}: the loss diverged (try a lower --lr or --clip-grad-norm)",
            row.step
        );
        return Err(diverged(config, dir, reason));
    }
    if let Some(error) = result.error {
        return Err(Error::Training(error.to_string()));
    }
    if let Some(interruption) = result.interrupted {
        return Err(Error::Training(format!("interrupted: {interruption:?}")));
    }

    let model = result.model.into_model().valid();
    let train_losses: Vec<f64> =
        rows.iter().filter(|r| r.is_train_loss() && r.epoch > start_epoch).map(|r| r.value).collect();
    let steps_trained = config.steps - start_step;
    let tokens = steps_trained * micro_batches * config.batch_size * config.seq_len;
    let report = finish(config, prepared, model, train_losses, steps_trained, tokens, seconds)?;
    let log_failure = log_failure.lock().unwrap_or_else(|e| e.into_inner()).take();
    match log_failure {
        Some(message) => Err(Error::RunDir { path: out, message: format!("the model is saved, but {message}") }),
        None => Ok(report),
    }
}

/// Writes `model.json` (the model, before its weights, so that the checkpoints of an interrupted
/// run can be loaded) and `train.json` (every setting, resolved).
fn record_run(config: &TrainConfig, out: &Path, prepared: &Prepared) -> Result<(), Error> {
    let info = RunModelInfo {
        model: prepared.model.clone(),
        tokenizer: config.tokenizer.clone(),
        steps: 0,
        data: Some(prepared.data.clone()),
        tokenizer_identity: Some(prepared.tokenizer.identity()),
    };
    let write = |name: &str, json: serde_json::Result<String>| {
        let written =
            json.map_err(std::io::Error::other).and_then(|json| write_atomically(&out.join(name), json.as_bytes()));
        written.map_err(|e| Error::RunDir { path: out.to_path_buf(), message: format!("cannot write {name}: {e}") })
    };
    // `model.json` first: a directory holding only it is a start cut short, which a new run may use.
    write(MODEL_INFO, serde_json::to_string_pretty(&info))?;
    crate::io::crash_point("record:model.json");
    write(TRAIN_CONFIG, serde_json::to_string_pretty(config))
}

/// The `track_every` recorder, probing with the first validation sequences (the same at every record).
fn tracker(
    config: &TrainConfig,
    prepared: &Prepared,
    out: &Path,
    start_step: usize,
) -> Result<Option<Arc<Tracker>>, Error> {
    let Some(every) = config.track_every else {
        return Ok(None);
    };
    let n = prepared.valid.len().min(config.batch_size).min(8);
    let probe = LmBatcher.batch((0..n).map(|i| prepared.valid.window(i)).collect(), &prepared.devices[0]);
    let tracker = Tracker::new(out, every, probe.inputs.into_data(), start_step)
        .map_err(|e| Error::RunDir { path: out.to_path_buf(), message: format!("cannot write {TRACKING}: {e}") })?;
    Ok(Some(Arc::new(tracker)))
}

/// The weights the run starts from: `init_from`'s (retrofitted to the run's scheme), or a fresh init.
fn initial_model(prepared: &mut Prepared, device: &Device) -> Result<Llama, Error> {
    match prepared.init.take() {
        Some(model) => Ok(model),
        None => Ok(prepared.model.init(device)?),
    }
}

/// The error of a run stopped for a non-finite value, naming the checkpoint it can resume from.
fn diverged(config: &TrainConfig, dir: &RunDir, reason: String) -> Error {
    let kept = match dir.checkpoints().0.last() {
        Some(&epoch) => format!(
            "the last checkpoint with finite weights and validation loss is at step {} ({}); resume from it with a \
             learning rate well below {:e} (--resume --lr ...) or with --clip-grad-norm 1",
            config.step_at_epoch_end(epoch),
            dir.checkpoint_dir().display(),
            config.lr
        ),
        None => "no checkpoint was written before it diverged; start again with a lower --lr".into(),
    };
    Error::Diverged(format!("{reason}; {kept}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_from_train_json_are_unchanged() {
        // Values that serde_json without `float_roundtrip` reads back one ulp off.
        let config =
            TrainConfig { lr: 0.00020412414523193154, valid_fraction: 0.09090909090909091, ..Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TRAIN_CONFIG);
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let saved = TrainConfig::from_file(&path).unwrap();
        assert_eq!(resume_changes(&saved, &config), (Vec::new(), Vec::new()));
    }
}
