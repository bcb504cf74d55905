//! Checkpoints: burn-train's per-epoch records written atomically, and the run directory's final
//! model with its config, which generation and analysis load.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError};
use serde::{Deserialize, Serialize};

use crate::model::Llama;
use crate::{ConfigError, LlamaConfig};

/// Saves each epoch's record as `<dir>/<name>-<epoch>.bpk` through a temporary file that is
/// synced and renamed into place: a crash mid-write never leaves a checkpoint that loads wrongly.
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
        let path = self.path(epoch);
        let tmp = self.dir.join(format!(".{}-{epoch}.bpk.tmp{}", self.name, std::process::id()));
        let result = record.save(tmp.clone()).and_then(|()| {
            std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(CheckpointerError::IOError)?;
            std::fs::rename(&tmp, &path).map_err(CheckpointerError::IOError)
        });
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        let path = self.path(epoch);
        if path.exists() {
            std::fs::remove_file(path).map_err(CheckpointerError::IOError)?;
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
}

/// Writes `<dir>/model.bpk` and `<dir>/model.json`, each atomically.
pub fn save_run_model(dir: &Path, model: &Llama, info: &RunModelInfo) -> Result<(), ConfigError> {
    let io = |e: String| ConfigError::File { path: dir.display().to_string(), message: e };
    let tmp = dir.join(format!(".model.bpk.tmp{}", std::process::id()));
    model.clone().save_file(&tmp).map_err(|e| io(e.to_string()))?;
    std::fs::rename(&tmp, dir.join("model.bpk")).map_err(|e| io(e.to_string()))?;
    let json = serde_json::to_string_pretty(info).map_err(|e| io(e.to_string()))?;
    crate::io::write_atomically(&dir.join("model.json"), json.as_bytes()).map_err(|e| io(e.to_string()))
}

/// Loads the model of a run directory (`model.json` + `model.bpk`), or of one of its epoch
/// checkpoints (`checkpoint/model-<epoch>.bpk`), onto `device`.
pub fn load_run_model(dir: &Path, epoch: Option<usize>, device: &Device) -> Result<(Llama, RunModelInfo), ConfigError> {
    let file_error = |path: &Path, message: String| ConfigError::File { path: path.display().to_string(), message };
    let info_path = dir.join("model.json");
    let text = std::fs::read_to_string(&info_path)
        .map_err(|e| file_error(&info_path, format!("{e}; is {} a run directory of the train example?", dir.display())))?;
    let info: RunModelInfo =
        serde_json::from_str(&text).map_err(|e| file_error(&info_path, format!("not a run description: {e}")))?;
    info.model.validate()?;
    let model = info.model.init(device)?;
    let (path, prefixed) = match epoch {
        None => (dir.join("model.bpk"), false),
        Some(epoch) => (dir.join("checkpoint").join(format!("model-{epoch}.bpk")), true),
    };
    let model = if prefixed {
        // Epoch checkpoints hold the training wrapper, whose parameters live under `model.`.
        super::step::TrainingModel::new(model, Default::default())
            .try_load_file(&path)
            .map_err(|e| file_error(&path, format!("does not match model.json: {e}")))?
            .into_model()
    } else {
        model.try_load_file(&path).map_err(|e| file_error(&path, format!("does not match model.json: {e}")))?
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
    ConfigError::File { path: dir.display().to_string(), message: error.to_string() }
}

/// The config of the model in `dir`, a run directory or a Hugging Face directory, without its weights.
pub fn read_model_dir_config(dir: &Path) -> Result<LlamaConfig, ConfigError> {
    if is_hf_dir(dir) {
        return crate::hf::read_hf_config(dir).map_err(|e| hf_error(dir, e));
    }
    let path = dir.join("model.json");
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
        path: dir.display().to_string(),
        message: format!("{e}: not a run directory (model.json) nor a Hugging Face model directory (config.json)"),
    })?;
    let info: RunModelInfo = serde_json::from_str(&text)
        .map_err(|e| ConfigError::File { path: path.display().to_string(), message: format!("not a run description: {e}") })?;
    Ok(info.model)
}

/// Loads the model of a run directory (the final model, or the checkpoint of `epoch`) or of a
/// Hugging Face model directory onto `device`.
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
    Ok(LoadedModel { model, config: info.model, tokenizer: Some(info.tokenizer) })
}
