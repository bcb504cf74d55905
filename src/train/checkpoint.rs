//! Checkpoints: burn-train's per-epoch records written atomically, and the run directory's final
//! model with its config, which generation and analysis load.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError};
use serde::{Deserialize, Serialize};

use crate::io::SumError;
use crate::model::Llama;
use crate::{ConfigError, LlamaConfig};

/// Saves each epoch's record as `<dir>/<name>-<epoch>.bpk` through a temporary file that is
/// synced and renamed into place, then its checksum as `<name>-<epoch>.bpk.sum`: a checkpoint
/// cut short by a crash, or damaged later, is told from a complete one ([`crate::io::verify_sum`]).
pub struct AtomicCheckpointer {
    dir: PathBuf,
    name: String,
}

impl AtomicCheckpointer {
    /// Checkpoints named `name` in `dir` (created if missing).
    pub fn new(dir: impl AsRef<Path>, name: &str) -> Self {
        let dir = dir.as_ref().to_path_buf();
        let _ = std::fs::create_dir_all(&dir);
        Self { dir, name: name.to_string() }
    }

    fn path(&self, epoch: usize) -> PathBuf {
        self.dir.join(format!("{}-{epoch}.bpk", self.name))
    }
}

impl<R: Checkpoint> Checkpointer<R> for AtomicCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        crate::io::save_with_sum(&self.path(epoch), |tmp| record.save(tmp.to_path_buf()))
            .map_err(CheckpointerError::IOError)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        let path = self.path(epoch);
        for file in [crate::io::sum_path(&path), path] {
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(CheckpointerError::IOError(e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        R::load(self.path(epoch))
    }
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
}

/// Writes `<dir>/model.bpk` (with its checksum `model.bpk.sum`) and `<dir>/model.json`, each atomically.
pub fn save_run_model(dir: &Path, model: &Llama, info: &RunModelInfo) -> Result<(), ConfigError> {
    let path = dir.join("model.bpk");
    let error = |e: String| ConfigError::ModelFile {
        path: path.display().to_string(),
        message: format!("cannot write it: {e}"),
    };
    crate::io::save_with_sum(&path, |tmp| model.clone().save_file(tmp)).map_err(|e| error(e.to_string()))?;
    let json = serde_json::to_string_pretty(info).map_err(|e| error(e.to_string()))?;
    crate::io::write_atomically(&dir.join("model.json"), json.as_bytes()).map_err(|e| error(e.to_string()))
}

/// Loads the model of a run directory (`model.json` + `model.bpk`), or of one of its epoch
/// checkpoints (`checkpoint/model-<epoch>.bpk`), onto `device`. A file that is missing, cut short
/// or corrupt (checked against its `.sum`) is an error that says what to do.
pub fn load_run_model(dir: &Path, epoch: Option<usize>, device: &Device) -> Result<(Llama, RunModelInfo), ConfigError> {
    let file_error =
        |path: &Path, message: String| ConfigError::ModelFile { path: path.display().to_string(), message };
    let info_path = dir.join("model.json");
    let text = std::fs::read_to_string(&info_path).map_err(|e| {
        file_error(&info_path, format!("{e}; is {} a run directory of the train example?", dir.display()))
    })?;
    let info: RunModelInfo =
        serde_json::from_str(&text).map_err(|e| file_error(&info_path, format!("not a run description: {e}")))?;
    info.model.validate()?;
    let epochs = super::run_dir::checkpoint_epochs(&dir.join("checkpoint"));
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
        super::step::TrainingModel::new(model, Default::default())
            .try_load_file(&path)
            .map_err(|e| mismatch(e.to_string()))?
            .into_model()
    } else {
        model.try_load_file(&path).map_err(|e| mismatch(e.to_string()))?
    };
    Ok((model, info))
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
}

impl LoadedModel {
    /// The model's tokenizer; an error when the directory has none.
    pub fn tokenizer(&self) -> Result<crate::data::Tokenizer, ConfigError> {
        let spec = self.tokenizer.as_deref().ok_or_else(|| {
            ConfigError::Unsupported("the model directory has no tokenizer.json; add one or give token ids".into())
        })?;
        crate::data::Tokenizer::from_spec(spec).map_err(|e| ConfigError::Unsupported(e.to_string()))
    }
}

/// Whether `dir` is a Hugging Face model directory (`config.json`) rather than a run directory.
pub fn is_hf_dir(dir: &Path) -> bool {
    dir.join("config.json").is_file()
}

fn hf_error(dir: &Path, error: crate::hf::HfError) -> ConfigError {
    ConfigError::ModelFile { path: dir.display().to_string(), message: error.to_string() }
}

/// The config of the model in `dir`, a run directory or a Hugging Face directory, without its weights.
pub fn read_model_dir_config(dir: &Path) -> Result<LlamaConfig, ConfigError> {
    if is_hf_dir(dir) {
        return crate::hf::read_hf_config(dir).map_err(|e| hf_error(dir, e));
    }
    let path = dir.join("model.json");
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::ModelFile {
        path: dir.display().to_string(),
        message: format!("{e}: not a run directory (model.json) nor a Hugging Face model directory (config.json)"),
    })?;
    let info: RunModelInfo = serde_json::from_str(&text).map_err(|e| ConfigError::ModelFile {
        path: path.display().to_string(),
        message: format!("not a run description: {e}"),
    })?;
    Ok(info.model)
}

/// Loads the model of a run directory (the final model, or the checkpoint of `epoch`) or of a
/// Hugging Face model directory onto `device`; a run's model with non-finite weights is an error.
pub fn load_model_dir(dir: &Path, epoch: Option<usize>, device: &Device) -> Result<LoadedModel, ConfigError> {
    if is_hf_dir(dir) {
        if epoch.is_some() {
            return Err(ConfigError::Unsupported(format!(
                "{} is a Hugging Face model directory: it has no epoch checkpoints",
                dir.display()
            )));
        }
        let hf = crate::hf::load_hf_model(dir, device).map_err(|e| hf_error(dir, e))?;
        let tokenizer = hf.tokenizer.map(|path| path.display().to_string());
        return Ok(LoadedModel { model: hf.model, config: hf.config, tokenizer });
    }
    let (model, info) = load_run_model(dir, epoch, device)?;
    if let Some(name) = crate::model::first_non_finite_parameter(&model) {
        return Err(ConfigError::ModelFile {
            path: dir.display().to_string(),
            message: format!(
                "the weight `{name}` is not finite (NaN or infinite): the run diverged; load an earlier checkpoint \
                 with --epoch N, or train again with a lower learning rate"
            ),
        });
    }
    Ok(LoadedModel { model, config: info.model, tokenizer: Some(info.tokenizer) })
}
