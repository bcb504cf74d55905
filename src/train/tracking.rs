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
use crate::tensorboard::history::layer_points;
use crate::tensorboard::EventSink;

/// Records a [`TrackRecord`] every `every` optimiser steps, on a fixed probe batch.
#[derive(Debug)]
pub struct Tracker {
    every: usize,
    probe: TensorData,
    /// `tracking.jsonl`, and the records not written since the last that was: `(the first one's
    /// step, how many)`.
    log: Mutex<(RecordLog, Option<(usize, usize)>)>,
    /// Optimiser steps taken so far (including those of the run being resumed).
    steps: AtomicUsize,
    /// Where bad lines and a failed write are reported.
    events: Events,
    /// The run's TensorBoard events, which get each record's per-layer values too.
    tensorboard: Option<EventSink>,
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
        n_layers: usize,
        events: Events,
    ) -> std::io::Result<Self> {
        let path = dir.join(TRACKING);
        let kept = if start_step == 0 || !path.exists() {
            Vec::new()
        } else {
            let (records, bad) = read_tracking_lines(&path, Some(n_layers)).map_err(std::io::Error::other)?;
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
        let log = Mutex::new((RecordLog::restart(&path, &kept)?, None));
        Ok(Self { every: every.max(1), probe, log, steps: AtomicUsize::new(start_step), events, tensorboard: None })
    }

    /// Writes each record's per-layer values to `sink` too, as scalars
    /// ([`layer_points`](crate::tensorboard::history::layer_points)).
    pub fn with_tensorboard(mut self, sink: Option<EventSink>) -> Self {
        self.tensorboard = sink;
        self
    }

    /// Called with each optimiser step's gradients before they are applied: records when due.
    pub(crate) fn observe(&self, model: &Llama, grads: &GradientsParams) {
        self.observe_scaled(model, grads, || Some(1.0));
    }

    /// [`observe`](Self::observe) for gradients still to be multiplied by a factor (a loss scale's
    /// unscaling, left to the batched update): the record's are, on the steps it records. `factor`
    /// is asked only then (it may read the device); `None`: the step was skipped for an f16
    /// overflow, and nothing is recorded.
    pub(crate) fn observe_scaled(&self, model: &Llama, grads: &GradientsParams, factor: impl FnOnce() -> Option<f64>) {
        let step = self.steps.fetch_add(1, Ordering::SeqCst);
        if !step.is_multiple_of(self.every) {
            return;
        }
        let Some(factor) = factor() else { return };
        let record = if factor == 1.0 {
            record(step, model, grads, self.probe.clone())
        } else {
            let mut scaled = super::batched_update::copy_of(grads, model);
            super::clip::scale_grads(&mut scaled, model, factor);
            record(step, model, &scaled, self.probe.clone())
        };
        if let Some(sink) = &self.tensorboard {
            sink.scalars(step as u64, &layer_points(&record));
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (file, unwritten) = &mut *log;
        let written = file.append(&[record]);
        if let Some(warning) = write_warning(file.path(), step, written, unwritten) {
            self.events.warn(warning);
        }
    }

    /// Called once the training ended: says how many records are missing when the writes failed
    /// to the end.
    pub(crate) fn finish(&self) {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (file, unwritten) = &*log;
        if let Some(warning) = missing_at_end(file.path(), *unwritten) {
            self.events.warn(warning);
        }
    }
}

/// What to say at the end of a training whose last records were not written (`unwritten`: the
/// first one's step, how many).
fn missing_at_end(path: &Path, unwritten: Option<(usize, usize)>) -> Option<String> {
    let (first, count) = unwritten?;
    Some(format!(
        "{}: {count} record(s) from step {first} on could not be written; it ends before them",
        path.display()
    ))
}

/// What to say of the write of step `step`'s record to `path` (`written`), given the records
/// not written since the last that was (`unwritten`: the first one's step, how many), which it
/// updates. A run of failed writes is reported where it starts and where it ends: later records
/// are still tried, as a disk may be freed.
fn write_warning(
    path: &Path,
    step: usize,
    written: std::io::Result<()>,
    unwritten: &mut Option<(usize, usize)>,
) -> Option<String> {
    match (written, unwritten.as_mut()) {
        (Err(error), None) => {
            *unwritten = Some((step, 1));
            Some(format!("cannot write {} at step {step}: {error}; the next records are tried", path.display()))
        }
        (Err(_), Some((_, count))) => {
            *count += 1;
            None
        }
        (Ok(()), Some(&mut (first, count))) => {
            *unwritten = None;
            Some(format!(
                "{} is written again from step {step}: {count} record(s) from step {first} on are missing",
                path.display()
            ))
        }
        (Ok(()), None) => None,
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

#[cfg(test)]
mod tests {
    use super::{missing_at_end, write_warning};
    use std::path::Path;

    #[test]
    fn a_run_of_failed_writes_is_reported_where_it_starts_and_where_it_ends() {
        let path = Path::new("run/tracking.jsonl");
        let full = || Err(std::io::Error::other("no space left on device"));
        let mut unwritten = None;
        assert_eq!(write_warning(path, 0, Ok(()), &mut unwritten), None);
        let first = write_warning(path, 10, full(), &mut unwritten).unwrap();
        assert!(first.contains("at step 10") && first.contains("no space left"), "{first}");
        assert_eq!(write_warning(path, 20, full(), &mut unwritten), None);
        assert_eq!(write_warning(path, 30, full(), &mut unwritten), None);
        let end = write_warning(path, 40, Ok(()), &mut unwritten).unwrap();
        assert!(end.contains("from step 40") && end.contains("3 record(s) from step 10"), "{end}");
        assert_eq!(write_warning(path, 50, Ok(()), &mut unwritten), None);
        // A second run of failures is reported again, and at the end when it lasts.
        assert!(write_warning(path, 60, full(), &mut unwritten).is_some());
        assert_eq!(write_warning(path, 70, full(), &mut unwritten), None);
        let end = missing_at_end(path, unwritten).unwrap();
        assert!(end.contains("2 record(s) from step 60"), "{end}");
        assert_eq!(missing_at_end(path, None), None);
    }
}
