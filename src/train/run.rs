//! A training run, as the algorithm: prepare (everything checked before the run directory is
//! touched), open the run directory, decide where to start, fit, finish.

use std::path::PathBuf;

use super::config::TrainConfig;
use super::fit::{fit, Fitted};
use super::prepare::{prepare, Prepared};
use super::resume::{check_start, starting_point, StartingPoint};
use super::run_dir::RunDir;
use crate::data::{PackedDataset, Tokenizer};
use crate::model::Llama;
use crate::run::{load_run_model, save_run_model};
use crate::{Error, LlamaConfig};

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

/// Trains as `config` says, starting as `start` says in the run directory `config.out`.
///
/// Every setting, the devices and the data are checked before the directory is touched; the
/// directory is locked for the run's life (a second training into it is refused).
pub fn train(config: &TrainConfig, start: Start) -> Result<TrainReport, Error> {
    RunDir::check(&config.out)?;
    check_start(&config.out, start)?;
    let mut prepared = prepare(config)?;
    let config = config.resolved();
    let dir = RunDir::open(&config.out)?;
    let StartingPoint { existing, finish_at } = starting_point(&dir, &config, &prepared, start)?;
    if start == Start::Overwrite {
        dir.replace_run()?;
    }
    let result = match finish_at {
        Some(epoch) => finish_from_checkpoint(&config, &dir, prepared, epoch),
        None => fit(&config, &dir, &mut prepared, existing).and_then(|fitted| finish_fitted(&config, prepared, fitted)),
    };
    dir.end_replacement();
    result
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

/// The report of a fit, once its final model is saved; an error when its metric log failed.
fn finish_fitted(config: &TrainConfig, prepared: Prepared, fitted: Fitted) -> Result<TrainReport, Error> {
    let Fitted { model, train_losses, steps_trained, tokens, seconds, log_failure } = fitted;
    let report = finish(config, prepared, model, train_losses, steps_trained, tokens, seconds)?;
    match log_failure {
        Some(message) => {
            Err(Error::RunDir { path: config.out.clone(), message: format!("the model is saved, but {message}") })
        }
        None => Ok(report),
    }
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
    save_run_model(&config.out, &model, &prepared.model_info(config, config.steps))?;
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
