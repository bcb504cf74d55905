//! The records of `metrics.jsonl`: every value a run's metrics log (loss, perplexity, learning
//! rate, tokens/s, gradient norm), one JSON line each; their reader, and `metrics.csv`, the same
//! values as a table for spreadsheets.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// One logged value of one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricRow {
    /// `train` or `valid`.
    pub split: String,
    /// The epoch (validation interval), from 1.
    pub epoch: usize,
    /// The batch within the epoch, from 1 (a micro-batch where gradients are accumulated); 0 for
    /// the epoch's final value.
    pub batch: usize,
    /// Optimiser steps done when the value was logged: the step the batch belongs to in
    /// training, the epoch's last step in validation.
    pub step: usize,
    /// The metric's name (`Loss`, `Perplexity`, `Learning Rate`, ...).
    pub metric: String,
    /// Its value (written as `null` when it is not finite: a diverged loss reads back as NaN).
    #[serde(deserialize_with = "null_as_nan")]
    pub value: f64,
    /// Items the value averages (tokens for the loss); absent for plain values. A count of 0
    /// means the batch reports nothing (the gradient norm of a micro-batch that is not the last
    /// of its step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Whether this is the epoch's final value (e.g. the perplexity of the whole epoch).
    #[serde(default, rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub is_final: bool,
}

impl MetricRow {
    /// Whether the row is a per-batch value that reports something (not a final, not count 0).
    pub fn is_batch_value(&self) -> bool {
        !self.is_final && self.count != Some(0)
    }

    /// Whether the row is a per-batch training loss.
    pub fn is_train_loss(&self) -> bool {
        self.split == "train" && self.metric == "Loss" && self.is_batch_value()
    }
}

/// The first per-batch training loss that is not finite: the run diverged there, even when its
/// weights stayed finite (a model that collapsed to a uniform output reports a finite loss after).
pub fn first_non_finite_loss(rows: &[MetricRow]) -> Option<&MetricRow> {
    rows.iter().find(|row| row.is_train_loss() && !row.value.is_finite())
}

/// A number, or `null` (how JSON writes NaN and infinities) as NaN.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// Reads `metrics.jsonl` of the run directory `dir`. A last line cut short (a training killed
/// while it wrote: it has no line end) is skipped; any other line that is not a record, a whole
/// last line among them, is an error naming it.
pub fn read_metrics(dir: &Path) -> Result<Vec<MetricRow>, Error> {
    let path = dir.join(super::METRICS);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::file(&path, format!("cannot read it: {e}")))?;
    let (rows, cut) = parse_metric_lines(&text);
    match cut {
        Some((line, what)) if line < text.lines().count() || text.ends_with('\n') => {
            Err(Error::file(&path, format!("line {line}: {what}")))
        }
        _ => Ok(rows),
    }
}

/// The records of `text` up to its first line that is not one, and that line's 1-based number
/// and error.
pub(crate) fn parse_metric_lines(text: &str) -> (Vec<MetricRow>, Option<(usize, String)>) {
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        match serde_json::from_str::<MetricRow>(line) {
            Ok(row) => rows.push(row),
            Err(e) => return (rows, Some((index + 1, format!("not a metric record: {e}")))),
        }
    }
    (rows, None)
}

/// Writes `<dir>/metrics.csv` (atomically) from `rows`: one line per batch value (the epochs'
/// final values and the batches that report nothing are left out).
pub fn write_metrics_csv(dir: &Path, rows: &[MetricRow]) -> std::io::Result<()> {
    let mut csv = String::from("split,epoch,batch,step,metric,value\n");
    for row in rows.iter().filter(|row| row.is_batch_value()) {
        csv.push_str(&format!("{},{},{},{},{},{}\n", row.split, row.epoch, row.batch, row.step, row.metric, row.value));
    }
    crate::io::write_atomically(&dir.join(super::METRICS_CSV), csv.as_bytes())
}
