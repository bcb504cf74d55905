//! What the analysis module's unit tests share: a run directory holding an untrained tiny model,
//! and a small request on flex.

use std::path::{Path, PathBuf};

use burn::tensor::Device;

use super::{AnalysisOptions, AnalysisRequest, ModelSource};
use crate::model::LlamaConfig;
use crate::run::{save_run_model, RunModelInfo};

/// The flex device.
pub(super) fn flex() -> Device {
    crate::device::parse_device("flex").unwrap()
}

/// A run directory `root/name` holding an untrained tiny model with the byte tokenizer.
pub(super) fn run_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir(&dir).unwrap();
    let config = LlamaConfig::tiny();
    let info = RunModelInfo {
        model: config.clone(),
        tokenizer: "byte".into(),
        steps: 0,
        data: None,
        tokenizer_identity: None,
    };
    save_run_model(&dir, &config.init(&flex()).unwrap(), &info).unwrap();
    dir
}

/// The analysis of `models` on flex, in sequences of 16 tokens, one batch of two.
pub(super) fn request(models: Vec<ModelSource>) -> AnalysisRequest {
    AnalysisRequest {
        seq_len: 16,
        device: "flex".into(),
        options: AnalysisOptions { batch_size: 2, batches: 1, ..AnalysisOptions::default() },
        ..AnalysisRequest::new(models)
    }
}
