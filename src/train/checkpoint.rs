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
