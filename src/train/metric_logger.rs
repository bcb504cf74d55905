//! The run's own metric logger (burn-train's `MetricLogger` extension point): every value the
//! metrics log is appended to `metrics.jsonl` as one [`MetricRow`], and burn-train reads the
//! values back from memory (the checkpointing strategy's validation loss).
//!
//! It replaces burn-train's file logger, whose per-epoch files are its own internal format and
//! which panics when a write fails: here a failed write (a full disk) stops the logging, is
//! reported once, and the run goes on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use burn::train::logger::MetricLogger;
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};

use super::monitor::RunMonitor;
use crate::run::{keep_damaged_metrics, parse_metric_lines, MetricRow, RecordLog, METRICS};

/// Appends a run's metric values to `<run>/metrics.jsonl`.
pub struct RunMetricLogger {
    /// `metrics.jsonl`, until a write fails.
    log: Option<RecordLog>,
    names: HashMap<MetricId, String>,
    /// The entries of each `(split, metric, epoch)`, in order, as burn-train reads them back.
    entries: HashMap<(String, String, usize), Vec<NumericEntry>>,
    /// The batches (micro-batches in training) logged so far in each `(split, epoch)` of this
    /// process: a metric logged once per optimiser step logs at its step's last.
    batches: HashMap<(String, usize), usize>,
    steps_per_epoch: usize,
    micro_batches: usize,
    /// The run's last step: its last validation interval may be shorter than the others.
    total_steps: usize,
    /// Sees every training loss (a non-finite one stops the run: the loss's gradient, taken in
    /// closed form, can stay finite) and a failed write.
    monitor: Arc<RunMonitor>,
}

impl RunMetricLogger {
    /// Opens the log of the run in `dir`, keeping the values of epochs up to `start_epoch` (those
    /// of a resumed run's checkpoint; a killed run may have logged later ones) and dropping the
    /// rest. `micro_batches` batches make one of the `steps_per_epoch` optimiser steps, of
    /// `total_steps` in all. Every
    /// training loss, the kept ones first, is reported to `monitor`.
    pub fn open(
        dir: &Path,
        start_epoch: usize,
        (steps_per_epoch, micro_batches, total_steps): (usize, usize, usize),
        monitor: Arc<RunMonitor>,
    ) -> std::io::Result<Self> {
        let path = dir.join(METRICS);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let (rows, damaged) = parse_metric_lines(&text);
        let kept: Vec<MetricRow> = rows.into_iter().filter(|row| row.epoch <= start_epoch).collect();
        // A resume keeps the history up to its checkpoint: say so when part of it is gone. A
        // damaged line before the end (not the cut-short last line of a killed run) drops the
        // lines after it: the file as it was is kept beside it first.
        if let Some((line, why)) = damaged {
            let cut_short_end = line == text.lines().count() && !text.ends_with('\n');
            let kept_note = match cut_short_end {
                true => String::new(),
                false => {
                    let kept_as = keep_damaged_metrics(dir, &text)?;
                    format!(" (the file as it was is kept as {})", kept_as.display())
                }
            };
            monitor.warn(format!(
                "{}: line {line} is damaged ({why}); the history from there on is dropped{kept_note}",
                path.display()
            ));
        }
        let resumed_at = start_epoch * steps_per_epoch;
        let last_logged = kept.iter().filter(|row| row.is_train_loss()).map(|row| row.step).max().unwrap_or(0);
        if resumed_at > 0 && last_logged < resumed_at {
            monitor.warn(format!(
                "{}: training losses are recorded up to step {last_logged}, but the run resumes from step \
                 {resumed_at}: steps {}..={resumed_at} have no history (the file was cut short or emptied)",
                path.display(),
                last_logged + 1
            ));
        }
        let mut logger = Self {
            log: Some(RecordLog::restart(&path, &kept)?),
            names: HashMap::new(),
            entries: HashMap::new(),
            batches: HashMap::new(),
            steps_per_epoch,
            micro_batches: micro_batches.max(1),
            total_steps,
            monitor,
        };
        logger.monitor.read_log(&kept);
        for row in kept {
            logger.remember(&row);
        }
        Ok(logger)
    }

    /// Keeps `row` for burn-train to read back.
    fn remember(&mut self, row: &MetricRow) {
        let entry = match (row.is_final, row.count) {
            (true, _) => NumericEntry::Final(row.value),
            (false, Some(count)) => NumericEntry::Aggregated { aggregated_value: row.value, count },
            (false, None) => NumericEntry::Value(row.value),
        };
        self.entries.entry((row.split.clone(), row.metric.clone(), row.epoch)).or_default().push(entry);
    }

    /// The row of one entry logged at `batch` (from 1; ignored for an epoch's final value).
    fn row(&self, metric: &str, entry: NumericEntry, epoch: usize, split: &str, batch: usize) -> MetricRow {
        let (value, count, is_final) = match entry {
            NumericEntry::Value(value) => (value, None, false),
            NumericEntry::Aggregated { aggregated_value, count } => (aggregated_value, Some(count), false),
            NumericEntry::Final(value) => (value, None, true),
        };
        let batch = if is_final { 0 } else { batch };
        let epoch_start = (epoch.saturating_sub(1)) * self.steps_per_epoch;
        let step = if split == "train" && !is_final {
            epoch_start + batch.div_ceil(self.micro_batches)
        } else {
            (epoch_start + self.steps_per_epoch).min(self.total_steps)
        };
        MetricRow { split: split.to_string(), epoch, batch, step, metric: metric.to_string(), value, count, is_final }
    }

    /// Appends `rows` to the file; after a failure, reports it once and writes no more.
    fn append(&mut self, rows: &[MetricRow]) {
        let Some(log) = self.log.as_mut() else { return };
        if let Err(e) = log.append(rows) {
            let message =
                format!("cannot write {}: {e}; the metrics after this point are not logged", log.path().display());
            self.monitor.log_failed(message);
            self.log = None;
        }
    }
}

impl MetricLogger for RunMetricLogger {
    fn log(&mut self, update: MetricsUpdate, epoch: usize, split: &Split) {
        let split = split.to_string();
        // Every update but an epoch's end (its final values) is one batch's, whose metrics may log
        // nothing for it (those logged once per optimiser step, before the step's last batch).
        let epoch_end = update.entries_numeric.iter().all(|numeric| {
            let serialized = &numeric.entry.serialized_entry;
            !serialized.is_not_available()
                && matches!(NumericEntry::deserialize(&serialized.serialized), Ok(NumericEntry::Final(_)))
        });
        let batch = self.batches.entry((split.clone(), epoch)).or_default();
        if !epoch_end {
            *batch += 1;
        }
        let batch = *batch;
        let mut rows = Vec::new();
        for numeric in &update.entries_numeric {
            let entry = &numeric.entry;
            let Some(metric) = self.names.get(&entry.metric_id).cloned() else { continue };
            if entry.serialized_entry.is_not_available() {
                continue;
            }
            let Ok(value) = NumericEntry::deserialize(&entry.serialized_entry.serialized) else { continue };
            let row = self.row(&metric, value, epoch, &split, batch);
            if row.is_train_loss() {
                self.monitor.train_loss(row.step, row.value, true);
            }
            self.remember(&row);
            rows.push(row);
        }
        if !rows.is_empty() {
            self.append(&rows);
        }
    }

    fn read_numeric(&mut self, name: &str, epoch: usize, split: &Split) -> Result<Vec<NumericEntry>, String> {
        Ok(self.entries.get(&(split.to_string(), name.to_string(), epoch)).cloned().unwrap_or_default())
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id.clone(), definition.name.to_string());
    }

    fn log_epoch_summary(&mut self, _summary: EpochSummary) {
        if let Some(log) = &self.log {
            // Durable at every validation: what a crash loses is at most the epoch in progress.
            let _ = log.sync();
        }
    }
}
