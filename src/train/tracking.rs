//! `track_every`: the layer-wise variance, per-layer gradient norms and largest activations
//! recorded during training (the paper's figure 6, Mix-LN's gradient figure, Peri-LN's activation
//! margin), one JSON line per record in `<run>/tracking.jsonl`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Int, Tensor, TensorData};

use super::clip::global_grad_norm;
use super::events::Events;
use crate::measure::{layer_variances, max_abs_activations};
use crate::model::Llama;
use crate::run::{read_tracking_lines, RecordLog, TrackRecord, TRACKING};

/// Records a [`TrackRecord`] every `every` optimiser steps, on a fixed probe batch.
#[derive(Debug)]
pub struct Tracker {
    every: usize,
    probe: TensorData,
    /// `tracking.jsonl`, and whether a failed write was reported.
    log: Mutex<(RecordLog, bool)>,
    /// Optimiser steps taken so far (including those of the run being resumed).
    steps: AtomicUsize,
    /// Where bad lines and a failed write are reported.
    events: Events,
}

impl Tracker {
    /// A tracker appending to `<dir>/tracking.jsonl`, probing with `probe` (token ids `[batch, seq]`).
    ///
    /// `start_step` is the step the run starts from: records of later steps (left by an
    /// interrupted run being resumed) are dropped, so every step appears once. Every valid record
    /// before it is kept; bad lines (e.g. one cut short by a crash) are skipped with a warning
    /// naming them, sent to `events` (as is a record that cannot be written).
    pub fn new(
        dir: &Path,
        every: usize,
        probe: TensorData,
        start_step: usize,
        events: Events,
    ) -> std::io::Result<Self> {
        let path = dir.join(TRACKING);
        let kept = if start_step == 0 || !path.exists() {
            Vec::new()
        } else {
            let (records, bad) = read_tracking_lines(&path).map_err(std::io::Error::other)?;
            if let Some((_, first)) = bad.first() {
                let lines: Vec<String> = bad.iter().map(|(line, _)| line.to_string()).collect();
                events.warn(format!(
                    "{}: skipping {} bad line(s) (line {}; the first: {first}); keeping every valid record",
                    path.display(),
                    bad.len(),
                    lines.join(", ")
                ));
            }
            records.into_iter().filter(|r| r.step < start_step).collect()
        };
        let log = Mutex::new((RecordLog::restart(&path, &kept)?, false));
        Ok(Self { every: every.max(1), probe, log, steps: AtomicUsize::new(start_step), events })
    }

    /// Called with each optimiser step's gradients before they are applied: records when due.
    pub(crate) fn observe(&self, model: &Llama, grads: &GradientsParams) {
        let step = self.steps.fetch_add(1, Ordering::SeqCst);
        if !step.is_multiple_of(self.every) {
            return;
        }
        let record = record(step, model, grads, self.probe.clone());
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (file, warned) = &mut *log;
        // A failed write is reported once; later records are still tried (a disk may be freed).
        if let Err(error) = file.append(&[record]) {
            if !*warned {
                self.events.warn(format!("cannot write {}: {error}", file.path().display()));
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
        max_abs_activation: max_abs_activations(&trace),
    }
}
