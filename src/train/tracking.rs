//! `track_every`: the layer-wise variance and per-layer gradient norms recorded during training
//! (the paper's figure 6), one JSON line per record in `<run>/tracking.jsonl`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::clip::global_grad_norm;
use crate::analysis::layer_variances;
use crate::model::Llama;

/// The file a run's records are appended to.
pub const TRACKING_FILE: &str = "tracking.jsonl";

/// What is recorded at one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrackRecord {
    /// Optimiser updates applied before this record (0: the initial weights).
    pub step: usize,
    /// Variance of the embedding output and of each block's output on the probe batch (`n_layers + 1`).
    pub block_output_variance: Vec<f64>,
    /// Variance after each block's attention sub-layer (`n_layers`).
    pub after_attention_variance: Vec<f64>,
    /// L2 norm of the gradients of each block's parameters for the next update (`n_layers`).
    pub grad_norm: Vec<f64>,
}

/// Records a [`TrackRecord`] every `every` optimiser steps, on a fixed probe batch.
#[derive(Debug)]
pub struct Tracker {
    every: usize,
    probe: TensorData,
    path: PathBuf,
    /// Optimiser steps taken so far (including those of the run being resumed).
    steps: AtomicUsize,
    warned: Mutex<bool>,
}

impl Tracker {
    /// A tracker appending to `<dir>/tracking.jsonl`, probing with `probe` (token ids `[batch, seq]`).
    ///
    /// `start_step` is the step the run starts from: records of later steps (left by an
    /// interrupted run being resumed) are dropped, so every step appears once. Every valid record
    /// before it is kept; bad lines (e.g. one cut short by a crash) are skipped with a warning
    /// naming them.
    pub fn new(dir: &Path, every: usize, probe: TensorData, start_step: usize) -> std::io::Result<Self> {
        let path = dir.join(TRACKING_FILE);
        let kept = if start_step == 0 || !path.exists() {
            Vec::new()
        } else {
            let (records, bad) = read_tracking_lines(&path).map_err(std::io::Error::other)?;
            if let Some((_, first)) = bad.first() {
                let lines: Vec<String> = bad.iter().map(|(line, _)| line.to_string()).collect();
                eprintln!(
                    "warning: {}: skipping {} bad line(s) (line {}; the first: {first}); keeping every valid record",
                    path.display(),
                    bad.len(),
                    lines.join(", ")
                );
            }
            records.into_iter().filter(|r| r.step < start_step).collect()
        };
        let mut text = String::new();
        for record in &kept {
            text.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        crate::io::write_atomically(&path, text.as_bytes())?;
        Ok(Self { every: every.max(1), probe, path, steps: AtomicUsize::new(start_step), warned: Mutex::new(false) })
    }

    /// Called with each optimiser step's gradients before they are applied: records when due.
    pub(crate) fn observe(&self, model: &Llama, grads: &GradientsParams) {
        let step = self.steps.fetch_add(1, Ordering::SeqCst);
        if step % self.every != 0 {
            return;
        }
        let record = record(step, model, grads, self.probe.clone());
        let written = serde_json::to_string(&record).map_err(std::io::Error::other).and_then(|line| {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
            file.write_all(format!("{line}\n").as_bytes())
        });
        if let Err(error) = written {
            let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
            if !*warned {
                eprintln!("warning: cannot write {}: {error}", self.path.display());
                *warned = true;
            }
        }
    }
}

/// Measures `model` (which may be on an autodiff device) and the per-block norms of `grads`.
pub fn record(step: usize, model: &Llama, grads: &GradientsParams, probe: TensorData) -> TrackRecord {
    let grad_norm = model.layers.iter().map(|block| global_grad_norm(grads, block)).collect();
    let inner = model.valid();
    let device = inner.embed_tokens.weight.device();
    let trace = inner.forward_trace(Tensor::<2, Int>::from_data(probe, &device));
    let variances = layer_variances(&trace);
    TrackRecord {
        step,
        block_output_variance: variances.block_output,
        after_attention_variance: variances.after_attention,
        grad_norm,
    }
}

/// Reads `tracking.jsonl` (a path to the file or to its run directory). Every record must have
/// the same number of layers, with `n_layers + 1` variances and `n_layers` of the rest; an error
/// names the line that does not.
pub fn read_tracking(path: &Path) -> Result<Vec<TrackRecord>, String> {
    let (records, bad) = read_tracking_lines(path)?;
    match bad.into_iter().next() {
        None => Ok(records),
        Some((line, what)) => Err(format!("{} line {line}: {what}", tracking_path(path).display())),
    }
}

/// `tracking.jsonl` itself, given the file or its run directory.
fn tracking_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(TRACKING_FILE)
    } else {
        path.to_path_buf()
    }
}

/// The valid records of `tracking.jsonl`, and the 1-based number and error of each bad line
/// (not JSON, not a record, or not as many layers as the first record); an error only when the
/// file cannot be read.
fn read_tracking_lines(path: &Path) -> Result<(Vec<TrackRecord>, Vec<(usize, String)>), String> {
    let path = tracking_path(path);
    // Read as bytes: a corrupt line need not be UTF-8, and is then one bad line, not a bad file.
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut records: Vec<TrackRecord> = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate().filter(|(_, line)| !line.trim_ascii().is_empty()) {
        let parsed = serde_json::from_slice::<TrackRecord>(line)
            .map_err(|e| format!("not a tracking record: {e}"))
            .and_then(|record| check_record(&record, records.first()).map(|()| record));
        match parsed {
            Ok(record) => records.push(record),
            Err(what) => bad.push((i + 1, what)),
        }
    }
    Ok((records, bad))
}

/// An error unless `record` has `n_layers + 1` variances and `n_layers` of the rest, with as many
/// layers as the `first` record of its file.
fn check_record(record: &TrackRecord, first: Option<&TrackRecord>) -> Result<(), String> {
    let layers = record.grad_norm.len();
    if layers == 0
        || record.block_output_variance.len() != layers + 1
        || record.after_attention_variance.len() != layers
    {
        return Err(format!(
            "expected n_layers + 1 block output variances and n_layers after-attention variances and \
             gradient norms, found {}, {} and {}",
            record.block_output_variance.len(),
            record.after_attention_variance.len(),
            layers
        ));
    }
    match first.map(|first| first.grad_norm.len()) {
        Some(expected) if expected != layers => Err(format!("{layers} layers where the first record has {expected}")),
        _ => Ok(()),
    }
}
