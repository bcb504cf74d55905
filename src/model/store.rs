//! A trained model on disk: a run directory's final model (`model.bpk` with its checksum, and
//! `model.json`), its epoch checkpoints (`checkpoint/model-<epoch>.bpk`), and Hugging Face model
//! directories, loaded without burn-train.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::io::SumError;
use crate::model::Llama;
use crate::{Error, LlamaConfig};

/// The checkpoint kinds burn-train saves at each checkpointed epoch.
pub const CHECKPOINT_KINDS: [&str; 3] = ["model", "optim", "scheduler"];

/// The epochs that have a file of any kind in the checkpoint directory `dir`, oldest first.
pub fn checkpoint_epochs(dir: &Path) -> Vec<usize> {
    let mut epochs: Vec<usize> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let (kind, rest) = name.strip_suffix(".bpk")?.split_once('-')?;
                    CHECKPOINT_KINDS.contains(&kind).then(|| rest.parse::<usize>().ok())?
                })
                .collect()
        })
        .unwrap_or_default();
    epochs.sort_unstable();
    epochs.dedup();
    epochs
}

/// `<dir>/<kind>-<epoch>.bpk`.
pub fn checkpoint_file(dir: &Path, kind: &str, epoch: usize) -> PathBuf {
    dir.join(format!("{kind}-{epoch}.bpk"))
}

/// What a run directory records about its model: enough to rebuild it and its tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunModelInfo {
    /// The model's config.
    pub model: LlamaConfig,
    /// The tokenizer spec (`byte` or a `tokenizer.json` path).
    pub tokenizer: String,
    /// Optimiser steps taken.
    pub steps: usize,
    /// What the model trains on: the [content fingerprint](crate::data::TokenCache::content_fingerprint)
    /// of its token cache (a resume must train on the same data).
    #[serde(default)]
    pub data: Option<String>,
    /// What decides the tokens ([`Tokenizer::identity`](crate::data::Tokenizer::identity): `byte`,
    /// or a `tokenizer.json`'s size and CRC-32): a program that loads the model with another
    /// tokenizer is refused. `None` in runs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_identity: Option<String>,
}

/// Writes `<dir>/model.bpk` (with its checksum `model.bpk.sum`) and `<dir>/model.json`, each atomically.
pub fn save_run_model(dir: impl AsRef<Path>, model: &Llama, info: &RunModelInfo) -> Result<(), Error> {
    let dir = dir.as_ref();
    let path = dir.join("model.bpk");
    let error = |e: String| Error::file(&path, format!("cannot write it: {e}"));
    // burn-pack writes through a scratch file, synced and renamed into place; the sum follows.
    model.clone().save_file(&path).map_err(|e| error(e.to_string()))?;
    crate::io::write_sum(&path).map_err(|e| error(e.to_string()))?;
    let json = serde_json::to_string_pretty(info).map_err(|e| error(e.to_string()))?;
    crate::io::write_atomically(&dir.join("model.json"), json.as_bytes()).map_err(|e| error(e.to_string()))
}

/// Loads the model of a run directory (`model.json` + `model.bpk`), or of one of its epoch
/// checkpoints (`checkpoint/model-<epoch>.bpk`), onto `device`. A file that is missing, cut short
/// or corrupt (checked against its `.sum`) is an error that says what to do.
pub fn load_run_model(
    dir: impl AsRef<Path>,
    epoch: Option<usize>,
    device: &Device,
) -> Result<(Llama, RunModelInfo), Error> {
    let dir = dir.as_ref();
    let file_error = |path: &Path, message: String| Error::file(path, message);
    if let Some(state) = unfinished_start(dir).filter(|_| epoch.is_none()) {
        return Err(file_error(&dir.join("model.bpk"), state));
    }
    let info_path = dir.join("model.json");
    let text =
        std::fs::read_to_string(&info_path).map_err(|e| file_error(&info_path, format!("{e}; {}", not_a_run(dir))))?;
    let info: RunModelInfo =
        serde_json::from_str(&text).map_err(|e| file_error(&info_path, format!("not a run description: {e}")))?;
    info.model.validate()?;
    let epochs = checkpoint_epochs(&dir.join("checkpoint"));
    let listed = || {
        if epochs.is_empty() {
            "the run has no checkpoints".to_string()
        } else {
            format!(
                "the run's checkpoints are --epoch {}",
                epochs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
            )
        }
    };
    let (path, prefixed) = match epoch {
        None => (dir.join("model.bpk"), false),
        Some(epoch) => (dir.join("checkpoint").join(format!("model-{epoch}.bpk")), true),
    };
    let finish = format!("finish the run with `train --resume --out {}` (same settings)", dir.display());
    match (crate::io::verify_sum(&path), epoch) {
        (Ok(()), _) => {}
        (Err(SumError::Missing), None) => {
            return Err(file_error(
                &path,
                format!("missing: the training has not finished; {finish}, or load a checkpoint ({})", listed()),
            ))
        }
        (Err(SumError::Missing), Some(epoch)) => {
            return Err(file_error(&path, format!("no checkpoint of epoch {epoch}: {}", listed())))
        }
        (Err(problem), None) => {
            return Err(file_error(
                &path,
                format!("incomplete: {problem}; {finish}, or load a checkpoint ({})", listed()),
            ))
        }
        (Err(problem), Some(_)) => {
            return Err(file_error(&path, format!("{problem}; load another checkpoint ({})", listed())))
        }
    }
    let model = info.model.init(device)?;
    let mismatch = |e: String| {
        // Burn lists every mismatching tensor: the first ones say enough.
        let short: String = e.chars().take(300).collect();
        let more = if short.len() < e.len() { " ..." } else { "" };
        file_error(&path, format!("does not match model.json ({short}{more}); was model.json replaced?"))
    };
    let model = if prefixed {
        // Epoch checkpoints hold the training wrapper, whose parameters live under `model.`.
        Checkpointed { model }.try_load_file(&path).map_err(|e| mismatch(e.to_string()))?.model
    } else {
        model.try_load_file(&path).map_err(|e| mismatch(e.to_string()))?
    };
    Ok((model, info))
}

/// The first folder directly inside `dir` that holds a run (`model.json`), by name.
fn first_run_inside(dir: &Path) -> Option<std::path::PathBuf> {
    let mut runs: Vec<_> =
        std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).filter(|p| p.join("model.json").is_file()).collect();
    runs.sort();
    runs.into_iter().next()
}

/// Why a run directory without a final model has none when a training was replacing or starting
/// it: an `--overwrite` under way or killed (the replaced run is in `.previous-run/`), or a start
/// killed before its settings were written.
fn unfinished_start(dir: &Path) -> Option<String> {
    if dir.join("model.bpk").is_file() {
        return None;
    }
    let (aside, d) = (dir.join(".previous-run"), dir.display());
    if aside.is_dir() {
        return Some(format!(
            "missing: an --overwrite is replacing this run (or was killed); the run it replaces is in {}. If the new \
             run has no checkpoint yet, the next training into {d} puts the old run back; if it has one, \
             `train --config {d}/train.json --resume` finishes the new run and then deletes the old one",
            aside.display()
        ));
    }
    let started = dir.join("model.json").is_file() && !dir.join("train.json").exists();
    started.then(|| {
        format!("missing: the training into {d} was stopped before it started; train into it again, without --resume")
    })
}

/// What a directory without `model.json` is, for an error: a sweep (`sweep.json`, the sweep
/// example's; named here so that the model stays free of `train`), or something else.
fn not_a_run(dir: &Path) -> String {
    if dir.join("sweep.json").is_file() {
        format!("{} is a sweep: give one of its runs, {}/<scheme>/seed-<n>", dir.display(), dir.display())
    } else if !dir.is_dir() {
        format!("{} is not a folder", dir.display())
    } else if let Some(run) = first_run_inside(dir) {
        format!("{} holds runs: give one of them, e.g. {}", dir.display(), run.display())
    } else {
        format!("is {} a run directory of the train example?", dir.display())
    }
}

/// The record layout of an epoch checkpoint: burn-train saves the training wrapper, whose only
/// parameters are the model's, under `model.`.
#[derive(Module, Debug)]
struct Checkpointed {
    model: Llama,
}

/// A model loaded from a directory of either kind, with its config and tokenizer spec.
#[derive(Debug)]
pub struct LoadedModel {
    /// The model.
    pub model: Llama,
    /// Its config.
    pub config: LlamaConfig,
    /// The tokenizer spec (`byte` or a `tokenizer.json` path); `None` for a Hugging Face
    /// directory without a `tokenizer.json`.
    pub tokenizer: Option<String>,
    /// The identity of the tokenizer a run trained with ([`RunModelInfo::tokenizer_identity`]).
    pub tokenizer_identity: Option<String>,
}

impl LoadedModel {
    /// The model's tokenizer, or the one at `given` (a `--tokenizer` option) instead; an error
    /// when there is none ([`tokenizer_spec`]) or it has more tokens than the model.
    #[cfg(feature = "data")]
    pub fn tokenizer(&self, given: Option<&Path>) -> Result<crate::data::Tokenizer, Error> {
        let spec = tokenizer_spec(self.tokenizer.as_deref(), given)?;
        let tokenizer = crate::data::Tokenizer::from_spec(&spec)?;
        check_tokenizer_identity(&tokenizer, &spec, self.tokenizer_identity.as_deref())?;
        tokenizer.check_fits(self.config.vocab_size).map_err(|e| Error::file(&spec, e))?;
        Ok(tokenizer)
    }
}

/// An error unless `tokenizer` (loaded from `spec`) is the one a run `recorded` it trained with
/// (by content; runs that recorded none are not checked).
#[cfg(feature = "data")]
pub fn check_tokenizer_identity(
    tokenizer: &crate::data::Tokenizer,
    spec: &str,
    recorded: Option<&str>,
) -> Result<(), Error> {
    match recorded {
        Some(recorded) if recorded != tokenizer.identity() => Err(Error::file(
            spec,
            format!(
                "is not the tokenizer the model was trained with (it is {}, the run's was {recorded}); give the \
                 run's own tokenizer with --tokenizer PATH",
                tokenizer.identity()
            ),
        )),
        _ => Ok(()),
    }
}

/// The tokenizer spec to load: `given` (a `--tokenizer` option), else the `recorded` one (`byte`
/// or a `tokenizer.json` path). A recorded path is relative to the folder its training ran in:
/// when it is not found from here, or nothing is recorded, the error names `--tokenizer`.
pub fn tokenizer_spec(recorded: Option<&str>, given: Option<&Path>) -> Result<String, Error> {
    if let Some(path) = given {
        return Ok(path.display().to_string());
    }
    let Some(spec) = recorded else {
        return Err(Error::Config(crate::ConfigError::Conflict(
            "the model directory has no tokenizer.json; give one with --tokenizer PATH".into(),
        )));
    };
    if spec == "byte" || Path::new(spec).is_file() {
        return Ok(spec.to_string());
    }
    let advice = "give the tokenizer.json with --tokenizer PATH";
    let message = if Path::new(spec).is_relative() {
        let here = std::env::current_dir().map(|dir| format!(" from {}", dir.display())).unwrap_or_default();
        format!(
            "the model's tokenizer, a path relative to the folder its training ran in, is not found{here}; run \
             from that folder, or {advice}"
        )
    } else {
        format!("the model's tokenizer is not found (moved or deleted?); {advice}")
    };
    Err(Error::file(spec, message))
}

/// Whether `dir` is a Hugging Face model directory (`config.json`) rather than a run directory.
pub fn is_hf_dir(dir: &Path) -> bool {
    dir.join("config.json").is_file()
}

#[cfg(feature = "hf")]
fn hf_error(dir: &Path, error: crate::hf::HfError) -> Error {
    Error::file(dir, error)
}

#[cfg(feature = "hf")]
fn load_hf_dir(dir: &Path, device: &Device) -> Result<LoadedModel, Error> {
    let hf = crate::hf::load_hf_model(dir, device).map_err(|e| hf_error(dir, e))?;
    let tokenizer = hf.tokenizer.map(|path| path.display().to_string());
    Ok(LoadedModel { model: hf.model, config: hf.config, tokenizer, tokenizer_identity: None })
}

#[cfg(not(feature = "hf"))]
fn load_hf_dir(dir: &Path, _device: &Device) -> Result<LoadedModel, Error> {
    Err(Error::file(dir, "a Hugging Face model directory needs the `hf` cargo feature of layernorm-scaling"))
}

/// The config of the model in `dir`, a run directory or a Hugging Face directory, without its weights.
pub fn read_model_dir_config(dir: impl AsRef<Path>) -> Result<LlamaConfig, Error> {
    let dir = dir.as_ref();
    if is_hf_dir(dir) {
        #[cfg(feature = "hf")]
        return crate::hf::read_hf_config(dir).map_err(|e| hf_error(dir, e));
        #[cfg(not(feature = "hf"))]
        return Err(Error::file(
            dir,
            "a Hugging Face model directory needs the `hf` cargo feature of layernorm-scaling",
        ));
    }
    let path = dir.join("model.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::file(
            dir,
            format!(
                "{e}: not a run directory (model.json) nor a Hugging Face model directory (config.json); {}",
                not_a_run(dir)
            ),
        )
    })?;
    let info: RunModelInfo =
        serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not a run description: {e}")))?;
    Ok(info.model)
}

/// Loads the model of a run directory (the final model, or the checkpoint of `epoch`) or of a
/// Hugging Face model directory onto `device`; a run's model with non-finite weights is an error.
pub fn load_model_dir(dir: impl AsRef<Path>, epoch: Option<usize>, device: &Device) -> Result<LoadedModel, Error> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::file(
            dir,
            "no such folder: give a run directory of the train example or a Hugging Face model directory",
        ));
    }
    if is_hf_dir(dir) {
        if epoch.is_some() {
            return Err(Error::file(dir, "a Hugging Face model directory has no epoch checkpoints: drop --epoch"));
        }
        return load_hf_dir(dir, device);
    }
    let (model, info) = load_run_model(dir, epoch, device)?;
    if let Some(parameter) = crate::model::first_non_finite_parameter(&model) {
        return Err(Error::NonFinite {
            parameter,
            advice: format!(
                "the run in {} diverged; load an earlier checkpoint with --epoch N, or train again with a lower \
                 learning rate",
                dir.display()
            ),
        });
    }
    Ok(LoadedModel {
        model,
        config: info.model,
        tokenizer: Some(info.tokenizer),
        tokenizer_identity: info.tokenizer_identity,
    })
}
