//! The burn-train adapter: the one place that builds burn-train's learner, its data loaders,
//! metrics, checkpointers and renderer, and runs it. burn-train calls a validation interval an
//! "epoch"; here an epoch is `eval_every` steps, and checkpoints are taken at their ends.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::transform::PartialDataset;
use burn::data::dataset::Dataset;
use burn::module::Module;
use burn::tensor::Device;
use burn::train::metric::Metric;
use burn::train::{ExecutionStrategy, Learner, LearningResult, MultiDeviceOptim, SupervisedTraining};

use super::budget::{DataBudget, RecordedSettings};
use super::checkpoint::{CheckpointKeeper, SummedCheckpointer};
use super::config::TrainConfig;
use super::events::TrainEvent;
use super::loader::StepLoader;
use super::loss_scale::{LossScale, WithLossScale};
use super::metric_logger::RunMetricLogger;
use super::metrics::{flops_per_token, StepMetric};
use super::monitor::RunMonitor;
use super::optimizer::optimizer;
use super::prepare::Prepared;
use super::renderer::PlainRenderer;
use super::settings::ModelSettings;
use super::step::{StepSettings, TrainingModel};
use super::strategy::RunCheckpointing;
use super::tensorboard_logger::TensorBoardLogger;
use super::tracking::Tracker;
use crate::data::LmBatcher;
use crate::divergence::Divergence;
use crate::error::Error;
use crate::model::Llama;
use crate::run::{read_metrics, write_metrics_csv, RunDir, METRICS, TENSORBOARD, TRACKING};
use crate::run_dir_error::RunDirError;
use crate::tensorboard::{own_event_files, start_run_events, EventSink};

/// What a fit trained: the model and the figures of this call (its losses are the monitor's).
pub(super) struct Fitted {
    pub model: Llama,
    pub steps_trained: usize,
    pub tokens: usize,
    pub seconds: f64,
}

/// Trains in the locked run directory from the last of the `existing` checkpoints (their steps;
/// from step 0 when there is none), which the checkpointing strategy keeps managing. Every part
/// of the run reports to `monitor`, which decides whether it diverged.
pub(super) fn fit(
    config: &TrainConfig,
    dir: &RunDir,
    prepared: &mut Prepared,
    existing: Vec<usize>,
    monitor: &Arc<RunMonitor>,
) -> Result<Fitted, Error> {
    let start_step = existing.last().copied().unwrap_or(0);
    // Each optimiser step sums the gradients of `grad_accum` micro-batches on every device.
    let micro_batches = config.optim.grad_accum * prepared.devices.len();
    let budget = DataBudget::new(&prepared.train, config.optim.steps, micro_batches, config.optim.batch_size);
    let recorded = TrainConfig {
        model: ModelSettings { init_from: prepared.init_dir.clone(), ..config.model.clone() },
        ..config.clone()
    };
    let settings = RecordedSettings { settings: &recorded, data_budget: budget };
    crate::run::record_start(dir.path(), &prepared.model_info(&recorded, 0), &settings)?;
    monitor.report(started(config, prepared, dir.path()));
    let devices: Vec<Device> = prepared.devices.iter().map(|d| d.clone().autodiff()).collect();
    monitor.report(TrainEvent::Data(budget));
    for warning in [budget.truncation_warning(), budget.repeat_warning()].into_iter().flatten() {
        monitor.warn(warning);
    }
    let keeper = CheckpointKeeper::new(&dir.checkpoint_dir(), existing.clone(), monitor.events());
    let tensorboard = tensorboard_events(config, dir.path(), start_step, monitor);
    let training =
        supervised_training(config, dir, prepared, &devices, (existing, tensorboard.clone()), &keeper, monitor)?;
    if start_step > 0 {
        monitor.report(TrainEvent::Resumed { step: start_step });
    }
    monitor.start_at(start_step);
    if !crate::memory::uses_host_memory(&prepared.devices[0]) {
        // A GPU compiles and autotunes its kernels during the first steps: say so, and how long.
        let cache = if cfg!(feature = "autotune-cache") {
            "autotune results are kept for the next run"
        } else {
            "each run autotunes again unless built with --features autotune-cache"
        };
        monitor.report(TrainEvent::Note(format!(
            "the first steps compile and autotune GPU kernels (minutes; {cache}; CUBECL_AUTOTUNE_LEVEL=minimal \
             shortens it: see docs/backends.md)"
        )));
        monitor.time_first_step();
    }
    monitor.stop_on_divergence(training.interrupter());
    let tracker = tracker(config, prepared, dir.path(), start_step, tensorboard, monitor)?;
    let loss_scale = LossScale::for_precision(config.training_precision());
    let settings = StepSettings {
        micro_batches,
        clip_grad_norm: config.optim.clip_grad_norm,
        loss_scale: loss_scale.clone(),
        monitor: monitor.clone(),
        tracker: tracker.clone(),
        ..StepSettings::default()
    };
    monitor.watch_soundness(settings.sound.clone());
    let model = TrainingModel::new(initial_model(prepared, &devices[0])?, settings);
    let optim = optimizer(config, &prepared.model, &model, model.gate());
    // The loss scale is checkpointed with the schedule, and restored with it on a resume.
    let schedule = WithLossScale::new(config.optim.schedule().init()?, loss_scale, monitor.events());
    let learner = Learner::new(model, optim, schedule);

    let started = Instant::now();
    let result = training.launch(learner);
    let seconds = started.elapsed().as_secs_f64();
    if let Some(tracker) = &tracker {
        tracker.finish();
    }
    // Every save is done (burn-train's checkpointer threads have ended): the last deletions.
    keeper.prune();
    let model = outcome(config, dir, result, monitor)?;
    let steps_trained = config.optim.steps - start_step;
    let tokens = steps_trained * micro_batches * config.optim.batch_size * config.data.seq_len;
    Ok(Fitted { model, steps_trained, tokens, seconds })
}

/// The event that starts a run: what is trained, for how long, where.
fn started(config: &TrainConfig, prepared: &Prepared, out: &Path) -> TrainEvent {
    let model = &prepared.model;
    TrainEvent::Started {
        layers: model.n_layers,
        d_model: model.d_model,
        parameters: model.num_params(),
        scheme: model.norm_scheme.to_string(),
        steps: config.optim.steps,
        // `auto` names what it picked.
        device: if config.device == "auto" {
            format!("auto ({:?})", prepared.devices[0])
        } else {
            config.device.clone()
        },
        out: out.to_path_buf(),
    }
}

/// burn-train's training, wired: the data loaders, the metric logger, metrics, checkpointers and
/// checkpointing strategy, the renderer (when standard output is not a terminal), and the start
/// from the last of the `existing` checkpoints.
fn supervised_training(
    config: &TrainConfig,
    dir: &RunDir,
    prepared: &Prepared,
    devices: &[Device],
    (existing, tensorboard): (Vec<usize>, Option<EventSink>),
    keeper: &CheckpointKeeper,
    monitor: &Arc<RunMonitor>,
) -> Result<SupervisedTraining<TrainingModel>, Error> {
    let steps = config.epoch_steps();
    let start_epoch = steps.epoch(existing.last().copied().unwrap_or(0));
    let out = dir.path();
    let micro_batches = config.optim.grad_accum * devices.len();
    let steps_per_epoch = config.eval_every();
    let train_loader = Arc::new(StepLoader::new(
        prepared.train.clone(),
        config.optim.batch_size,
        steps_per_epoch * micro_batches,
        config.optim.steps * micro_batches,
        config.seed,
        start_epoch,
        devices[0].clone(),
    ));
    // Validation runs on the main device with the global batch (batch_size per device), on a
    // fixed subset: the first `eval_batches` global batches, or the `valid_tokens` subset.
    let global_batch = config.optim.batch_size * devices.len();
    let valid_windows = config.eval.eval_sequences(global_batch, prepared.valid.len());
    let valid_subset = PartialDataset::new(prepared.valid.clone(), 0, valid_windows);
    let valid_loader = DataLoaderBuilder::new(LmBatcher).batch_size(global_batch).build(valid_subset);

    let logger =
        RunMetricLogger::open(out, start_epoch, (steps_per_epoch, micro_batches, config.optim.steps), monitor.clone())
            .map_err(|e| Error::run_dir(out, RunDirError::io(format!("write {METRICS}"), e)))?;
    let loss_metric = StepMetric::loss();
    let checkpoint_dir = dir.checkpoint_dir();
    let mut training = SupervisedTraining::new(out, train_loader, valid_loader)
        .num_epochs(config.epoch_steps().epochs())
        // burn-train would otherwise train on `Device::default()`, not the chosen device.
        .with_training_strategy(
            if devices.len() == 1 {
                ExecutionStrategy::single(devices[0].clone())
            } else {
                ExecutionStrategy::multi(devices.to_vec(), MultiDeviceOptim::OptimMainDevice)
            }
            .into(),
        )
        // No application logger: it would install a process-wide panic hook and tracing subscriber.
        .with_application_logger(None)
        .with_metric_logger(logger)
        .metrics((StepMetric::loss(), StepMetric::perplexity()))
        .metric_train_numeric(StepMetric::learning_rate(
            config.optim.schedule().init()?,
            existing.last().copied().unwrap_or(0),
            micro_batches,
        ))
        .metric_train_numeric(StepMetric::tokens_per_second())
        .metric_train_numeric(StepMetric::grad_norm())
        .with_custom_checkpointers(
            SummedCheckpointer::new(&checkpoint_dir, "model", steps),
            SummedCheckpointer::new(&checkpoint_dir, "optim", steps),
            SummedCheckpointer::new(&checkpoint_dir, "scheduler", steps),
        )
        .with_checkpointing_strategy(RunCheckpointing::new(
            config.save_every() / steps_per_epoch,
            config.checkpoints.keep_checkpoints,
            &existing,
            steps,
            keeper.clone(),
            loss_metric.name(),
            monitor.clone(),
        ));
    if let Some(sink) = tensorboard {
        // After the run's own logger, which burn-train asks first for the values it reads back.
        let start_step = start_epoch * steps_per_epoch;
        training = training.with_metric_logger(
            TensorBoardLogger::to_sink(sink).with_micro_batches(micro_batches).starting_after(start_step),
        );
    }
    if config.training_precision().scales_loss() {
        training =
            training.metric_train_numeric(StepMetric::loss_scale()).metric_train_numeric(StepMetric::skipped_steps());
    }
    if let Some(peak) = config.output.peak_tflops {
        training =
            training.metric_train_numeric(StepMetric::mfu(flops_per_token(&prepared.model, config.data.seq_len), peak));
    }
    if config.optim.grad_accum > 1 {
        training = training.grads_accumulation(config.optim.grad_accum);
    }
    if !std::io::stdout().is_terminal() {
        training = training.renderer(Box::new(PlainRenderer::new(
            monitor.events(),
            config.optim.steps,
            steps_per_epoch,
            micro_batches,
            config.output.log_every,
        )));
    }
    if start_epoch > 0 {
        training = training.checkpoint(start_epoch);
    }
    Ok(training)
}

/// What a finished fit gives: the trained model, once `metrics.csv` is written from the log and
/// the monitor has judged every loss in it; an error for a divergence, a training error or an
/// interruption, in that order, and only then for a log that cannot be read or a table that
/// cannot be written.
fn outcome(
    config: &TrainConfig,
    dir: &RunDir,
    result: LearningResult<TrainingModel>,
    monitor: &RunMonitor,
) -> Result<Llama, Error> {
    // The log is read and the table written whatever the outcome (a diverged run's table is worth
    // reading), but a failure of the training itself (a checkpoint a full disk refused) is the
    // error to report first, and a failure to read or write them last.
    let rows = read_metrics(dir.path());
    let csv = rows.as_ref().map_or(Ok(()), |rows| {
        write_metrics_csv(dir.path(), rows)
            .map_err(|e| Error::run_dir(dir.path(), RunDirError::io(format!("write {}", crate::run::METRICS_CSV), e)))
    });
    // Every loss the log holds is judged, should one have reached the file but not the monitor.
    if let Ok(rows) = &rows {
        monitor.read_log(rows);
    }
    if let Some(reason) = monitor.divergence() {
        return Err(diverged(config, dir, reason));
    }
    if let Some(error) = result.error {
        return Err(Error::Training(error.to_string()));
    }
    if let Some(interruption) = result.interrupted {
        return Err(Error::Training(format!("interrupted: {interruption:?}")));
    }
    rows?;
    csv?;
    Ok(result.model.into_model().valid())
}

/// The `track_every` recorder, probing with the first validation sequences (the same at every record).
fn tracker(
    config: &TrainConfig,
    prepared: &Prepared,
    out: &Path,
    start_step: usize,
    tensorboard: Option<EventSink>,
    monitor: &RunMonitor,
) -> Result<Option<Arc<Tracker>>, Error> {
    // TensorBoard shows the curse itself by default: the layers' variance at every validation.
    let every = config.output.track_every.or(tensorboard.is_some().then(|| config.eval_every()));
    let Some(every) = every else {
        return Ok(None);
    };
    let n = prepared.valid.len().min(config.optim.batch_size).min(8);
    let probe = LmBatcher.batch((0..n).map(|i| prepared.valid.window(i)).collect(), &prepared.devices[0]);
    let layers = prepared.model.n_layers;
    let tracker = Tracker::new(out, every, probe.inputs.into_data(), start_step, layers, monitor.events())
        .map_err(|e| Error::run_dir(out, RunDirError::io(format!("write {TRACKING}"), e)))?
        .with_tensorboard(tensorboard);
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
fn diverged(config: &TrainConfig, dir: &RunDir, reason: Divergence) -> Error {
    let checkpoint = dir.checkpoints().0.last().map(|&step| (step, dir.checkpoint_dir()));
    Error::Diverged { reason, checkpoint, lr: config.optim.lr }
}

/// The run's TensorBoard events (`tensorboard/` in `out`), started from its history up to
/// `start_step`, unless they are turned off; `None` with a warning when the file cannot be
/// started: the run goes on without it, as after a failed write.
fn tensorboard_events(
    config: &TrainConfig,
    out: &Path,
    start_step: usize,
    monitor: &Arc<RunMonitor>,
) -> Option<EventSink> {
    if !config.output.tensorboard {
        let events = out.join(TENSORBOARD);
        if own_event_files(&events).is_ok_and(|files| !files.is_empty()) {
            monitor.warn(format!(
                "--tensorboard false: the event files in {} stop at this start; the `tensorboard` example \
                 writes them anew from the run's records",
                events.display()
            ));
        }
        return None;
    }
    match start_run_events(out, Some(start_step)) {
        Ok(events) => {
            let monitor = monitor.clone();
            Some(EventSink::new(events.writer).on_error(move |message| monitor.warn(message)))
        }
        Err(e) => {
            monitor.warn(format!(
                "cannot start TensorBoard's event file in {}: {e}; the run goes on without it",
                out.join(TENSORBOARD).display()
            ));
            None
        }
    }
}
