//! A training run, as the algorithm: prepare (everything checked before the run directory is
//! touched), open the run directory, decide where to start, fit, finish.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::config::TrainConfig;
use super::events::{Events, TrainEvent};
use super::fit::{fit, Fitted};
use super::monitor::RunMonitor;
use super::prepare::{prepare, Prepared};
use super::resume::{check_start, starting_point, Start, StartingPoint};
use super::run_verdict::RunFailure;
use crate::data::{CacheProblem, DataError, SequenceDataset, Tokenizer};
use crate::model::Llama;
use crate::run::{checkpoint_status, load_run_model, save_run_model, ReplacedRun, RunDir, CHECKPOINTS, PREVIOUS_RUN};
use crate::run_dir_error::RunDirError;
use crate::{error::Error, model::LlamaConfig};

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
    /// Why the run counts as failed though it ran to the end, if it does ([`RunFailure`]): a
    /// non-finite final validation loss, an explosion, a gradient that was 0 from the start, or a
    /// collapse (the gradient norm vanished while the loss did not fall;
    /// [`RunMonitor::verdict`](super::RunMonitor::verdict)). A run
    /// that diverged while training is an error instead; one that is only short, or validated on
    /// other data, is warned about.
    pub verdict: Option<RunFailure>,
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

/// Trains as `config` says, starting as `start` says in the run directory `config.output.out`, and hands
/// each [`TrainEvent`] (progress, notes, warnings) to `on_event` as the run goes: the library
/// prints nothing. The training runs on the calling thread; `on_event` is called on a thread of
/// its own, in the order the events were sent, and every event is handed over before this returns.
///
/// Every setting, the devices and the data are checked before the directory is touched; the
/// directory is locked for the run's life (a second training into it is refused).
///
/// ```no_run
/// use layernorm_scaling::train::{train, Start, TrainConfig};
///
/// let mut config = TrainConfig::default();
/// config.optim.steps = 100;
/// config.output.out = "runs/quick".into();
/// let report = train(&config, Start::New, |event| eprintln!("{event}"))?;
/// println!("validation loss {:.4}", report.valid_loss);
/// # Ok::<(), layernorm_scaling::Error>(())
/// ```
pub fn train(
    config: &TrainConfig,
    start: Start,
    on_event: impl FnMut(TrainEvent) + Send,
) -> Result<TrainReport, Error> {
    // The run sets the process's half type (mixed precision); the caller gets its own back.
    let _restore = crate::fused::RestoreHalfCompute::now();
    let (events, received) = Events::channel();
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let forwarder = scope.spawn(|| forward(received, &finished, on_event));
        let result = run(config, start, &events);
        drop(events);
        finished.store(true, Ordering::Release);
        if let Err(panic) = forwarder.join() {
            std::panic::resume_unwind(panic);
        }
        result
    })
}

/// Hands every event received to `on_event` until the run has `finished` and nothing is left
/// (a sender burn-train's threads still hold does not keep it waiting).
fn forward(received: Receiver<TrainEvent>, finished: &AtomicBool, mut on_event: impl FnMut(TrainEvent)) {
    loop {
        match received.recv_timeout(Duration::from_millis(20)) {
            Ok(event) => on_event(event),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) if finished.load(Ordering::Acquire) => {
                received.try_iter().for_each(&mut on_event);
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// [`train`], sending its events to `events`.
fn run(config: &TrainConfig, start: Start, events: &Events) -> Result<TrainReport, Error> {
    // The directory and the start rules are checked now, before the data is tokenised (minutes,
    // for a large corpus), so that a mistake costs nothing; `RunDir::open` and `starting_point`
    // ask again under the lock, since another program may change the directory meanwhile.
    RunDir::check(&config.output.out, TrainConfig::check_run_settings)?;
    if let Some(cache_dir) = &config.data.cache_dir {
        check_cache_dir(&config.output.out, cache_dir)?;
    }
    check_start(&config.output.out, config, start)?;
    // A resume goes on from a checkpoint, which holds the weights; one killed before its first
    // checkpoint starts again from step 0, from `init_from`'s weights (it trained from scratch).
    let from_checkpoint =
        start == Start::Resume && !checkpoint_status(&config.output.out.join(CHECKPOINTS)).0.is_empty();
    let mut prepared = prepare(config, from_checkpoint, events)?;
    let config = config.resolved();
    let dir = RunDir::open(&config.output.out, TrainConfig::check_run_settings)?;
    if dir.restored() {
        events.send(TrainEvent::Note(format!(
            "an earlier --overwrite of {} stopped before its first checkpoint; the run it was replacing is restored",
            dir.path().display()
        )));
    }
    let StartingPoint { existing, finish_at } = starting_point(&dir, &config, &prepared, start, events)?;
    if start == Start::Overwrite {
        dir.replace_run()?;
    }
    let monitor = RunMonitor::new(events.clone());
    if config.training_precision().scales_loss() {
        monitor.in_f16();
    }
    let result = match finish_at {
        Some(step) => finish_from_checkpoint(&config, &dir, prepared, step, &monitor),
        None => fit(&config, &dir, &mut prepared, existing, &monitor)
            .and_then(|fitted| finish_fitted(&config, prepared, fitted, &monitor)),
    };
    if let Some(replaced) = dir.end_replacement() {
        events.send(replaced_run_event(&dir, replaced));
    }
    result
}

/// What the user should know of the run an `--overwrite` replaced, once the new run ends.
fn replaced_run_event(dir: &RunDir, replaced: ReplacedRun) -> TrainEvent {
    let aside = dir.path().join(PREVIOUS_RUN);
    match replaced {
        ReplacedRun::Waiting => TrainEvent::Note(format!(
            "the new run stopped before its end: the run it replaces stays in {} until it finishes \
             (`train --resume` goes on with the new run)",
            aside.display()
        )),
        ReplacedRun::Restored => {
            TrainEvent::Note("the new run has no checkpoint; the run it was replacing is restored".into())
        }
        ReplacedRun::StillAside(e) => {
            TrainEvent::Warning(format!("the replaced run is still in {}: {e}", aside.display()))
        }
    }
}

/// Whether `cache_dir` (`--cache-dir`) may hold the token cache of a run in `out`, checked
/// before any tokenising: a folder, or a path where one can be made, and neither the run
/// directory nor inside it (the run directory holds the run alone).
fn check_cache_dir(out: &Path, cache_dir: &Path) -> Result<(), Error> {
    let refused = |problem| Error::Data(DataError::Cache { dir: cache_dir.to_path_buf(), problem });
    if let Some(problem) = crate::io::folder_path_problem(cache_dir) {
        return Err(refused(CacheProblem::NoFolder(problem)));
    }
    let resolved = |path: &Path| {
        std::path::absolute(path).map(|p| {
            // The longest existing ancestor resolved (links, `..`), the rest as given.
            let base = p.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
            let rest = p.strip_prefix(base).unwrap_or(Path::new(""));
            base.canonicalize().unwrap_or_else(|_| base.to_path_buf()).join(rest)
        })
    };
    if let (Ok(cache), Ok(run)) = (resolved(cache_dir), resolved(out)) {
        if cache.starts_with(&run) {
            return Err(refused(CacheProblem::InRunDirectory { run: out.to_path_buf() }));
        }
    }
    Ok(())
}

/// A resumed run whose every step is checkpointed but whose final model is missing or cut short:
/// writes it from the last checkpoint.
fn finish_from_checkpoint(
    config: &TrainConfig,
    dir: &RunDir,
    prepared: Prepared,
    step: usize,
    monitor: &RunMonitor,
) -> Result<TrainReport, Error> {
    monitor.report(TrainEvent::WritingFinalModel { step });
    match crate::run::read_metrics(dir.path()) {
        Ok(rows) => {
            monitor.read_log(&rows);
            // A run killed while writing metrics.csv (after its last step) has none yet.
            crate::run::write_metrics_csv(dir.path(), &rows).map_err(|e| {
                Error::run_dir(dir.path(), RunDirError::io(format!("write {}", crate::run::METRICS_CSV), e))
            })?;
        }
        Err(e) => monitor
            .warn(format!("cannot read the run's training losses ({e}); it is judged by its validation loss alone")),
    }
    let (model, _) = load_run_model(dir.path(), Some(step), &prepared.devices[0])?;
    finish(config, prepared, model, monitor, 0, 0, 0.0)
}

/// The report of a fit, once its final model is saved; an error when its metric log failed.
fn finish_fitted(
    config: &TrainConfig,
    prepared: Prepared,
    fitted: Fitted,
    monitor: &RunMonitor,
) -> Result<TrainReport, Error> {
    let Fitted { model, steps_trained, tokens, seconds } = fitted;
    let report = finish(config, prepared, model, monitor, steps_trained, tokens, seconds)?;
    match monitor.log_failure() {
        Some(failure) => Err(Error::run_dir(&config.output.out, RunDirError::LogFailed { failure })),
        None => Ok(report),
    }
}

/// The validation loss a run reports: on the sequences it validates on during training
/// ([`TrainConfig::eval_sequences`]), in batches of the global batch size.
pub(crate) fn validation_loss(
    config: &TrainConfig,
    model: &Llama,
    valid: &SequenceDataset,
    n_devices: usize,
) -> Result<f64, Error> {
    use burn::data::dataset::Dataset;
    let batch = config.optim.batch_size * n_devices;
    let batches = config.eval.eval_sequences(batch, valid.len()).div_ceil(batch);
    crate::measure::mean_loss(model, valid, batch, batches, &[])
}

/// Saves the final model into the run directory and reports the run: `steps_trained` steps of
/// `tokens` in `seconds` by this call, judged by `monitor`.
fn finish(
    config: &TrainConfig,
    prepared: Prepared,
    model: Llama,
    monitor: &RunMonitor,
    steps_trained: usize,
    tokens: usize,
    seconds: f64,
) -> Result<TrainReport, Error> {
    save_run_model(&config.output.out, &model, &prepared.model_info(config, config.optim.steps))?;
    let valid_loss = validation_loss(config, &model, &prepared.valid, prepared.devices.len())?;
    if let Some(caution) = monitor.caution(valid_loss) {
        monitor.warn(caution.to_string());
    }
    Ok(TrainReport {
        model,
        model_config: prepared.model,
        tokenizer: prepared.tokenizer,
        valid_loss,
        verdict: monitor.verdict(valid_loss),
        train_losses: monitor.train_losses(),
        steps_trained,
        tokens_per_second: if seconds > 0.0 { tokens as f64 / seconds } else { 0.0 },
        seconds,
        out: config.output.out.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_became_of_a_replaced_run_is_said_with_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::open(dir.path(), TrainConfig::check_run_settings).unwrap();
        let aside = dir.path().join(PREVIOUS_RUN).display().to_string();
        let TrainEvent::Note(waiting) = replaced_run_event(&run, ReplacedRun::Waiting) else { panic!() };
        assert!(waiting.contains(&format!("stays in {aside} until")) && waiting.contains("`train --resume`"));
        let TrainEvent::Note(restored) = replaced_run_event(&run, ReplacedRun::Restored) else { panic!() };
        assert!(restored.ends_with("the run it was replacing is restored"), "{restored}");
        let failed = RunDirError::io("discard or put back the replaced run", std::io::Error::other("disk full"));
        let TrainEvent::Warning(still) = replaced_run_event(&run, ReplacedRun::StillAside(failed)) else { panic!() };
        assert!(still.starts_with(&format!("the replaced run is still in {aside}: cannot")) && still.ends_with("full"));
    }
}
