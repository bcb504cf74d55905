//! The records of `tracking.jsonl`: the layer-wise variance and per-layer gradient norms that a
//! run records while it trains (the paper's figure 6), one JSON line each, and their reader.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// What is recorded at one step. A value that is not finite (a run blowing up) is written as
/// `null`, JSON having no other way, and reads back as NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrackRecord {
    /// Optimiser updates applied before this record (0: the initial weights).
    pub step: usize,
    /// Variance of the embedding output and of each block's output on the probe batch (`n_layers + 1`).
    #[serde(deserialize_with = "nulls_as_nan")]
    pub block_output_variance: Vec<f64>,
    /// Variance after each block's attention sub-layer (`n_layers`).
    #[serde(deserialize_with = "nulls_as_nan")]
    pub after_attention_variance: Vec<f64>,
    /// L2 norm of the gradients of each block's parameters for the next update (`n_layers`).
    #[serde(deserialize_with = "nulls_as_nan")]
    pub grad_norm: Vec<f64>,
    /// The largest absolute value of the embedding output and of each block's output on the
    /// probe batch (`n_layers + 1`; empty in records written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "nulls_as_nan")]
    pub max_abs_activation: Vec<f64>,
}

/// Numbers, each `null` (how JSON writes NaN and infinities) read as NaN.
fn nulls_as_nan<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
    let values = Vec::<Option<f64>>::deserialize(deserializer)?;
    Ok(values.into_iter().map(|value| value.unwrap_or(f64::NAN)).collect())
}

/// Reads `tracking.jsonl` (a path to the file or to its run directory). Every record must have
/// the same number of layers, with `n_layers + 1` variances and `n_layers` of the rest; an error
/// names the line that does not.
pub fn read_tracking(path: &Path) -> Result<Vec<TrackRecord>, Error> {
    let (records, bad) = read_tracking_lines(path, None)?;
    match bad.into_iter().next() {
        None => Ok(records),
        Some((line, what)) => Err(Error::file(tracking_path(path), format!("line {line}: {what}"))),
    }
}

/// Reads `tracking.jsonl` (a path to the file or to its run directory) as a report on a model of
/// `n_layers` does: a damaged line (a write cut short by a full disk), or a record of another
/// depth, costs its record, and is returned beside the valid ones for a warning; a file with no
/// valid record is an error naming its first bad line.
pub fn read_tracking_skipping_damage(path: &Path, n_layers: usize) -> Result<(Vec<TrackRecord>, Vec<BadLine>), Error> {
    let (records, bad) = read_tracking_lines(path, Some(n_layers))?;
    match bad.first() {
        Some((line, what)) if records.is_empty() => {
            Err(Error::file(tracking_path(path), format!("line {line}: {what}")))
        }
        _ => Ok((records, bad)),
    }
}

/// `tracking.jsonl` itself, given the file or its run directory.
fn tracking_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(super::TRACKING)
    } else {
        path.to_path_buf()
    }
}

/// A line of `tracking.jsonl` that is not a record: its 1-based number and what is wrong.
pub type BadLine = (usize, String);

/// The valid records of `tracking.jsonl`, and the 1-based number and error of each bad line
/// (not JSON, not a record, or of another depth than `n_layers`, or when that is not known, the
/// first valid record's); an error only when the file cannot be read.
pub(crate) fn read_tracking_lines(
    path: &Path,
    n_layers: Option<usize>,
) -> Result<(Vec<TrackRecord>, Vec<BadLine>), Error> {
    let path = tracking_path(path);
    // Read as bytes: a corrupt line need not be UTF-8, and is then one bad line, not a bad file.
    let bytes = std::fs::read(&path).map_err(|e| Error::file(&path, format!("cannot read it: {e}")))?;
    let mut records: Vec<TrackRecord> = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate().filter(|(_, line)| !line.trim_ascii().is_empty()) {
        let parsed = serde_json::from_slice::<TrackRecord>(line)
            .map_err(|e| format!("not a tracking record: {e}"))
            .and_then(|record| {
                let expected = match n_layers {
                    Some(layers) => Some((layers, "the model has")),
                    None => records.first().map(|first| (first.grad_norm.len(), "the first record has")),
                };
                check_record(&record, expected).map(|()| record)
            });
        match parsed {
            Ok(record) => records.push(record),
            Err(what) => bad.push((i + 1, what)),
        }
    }
    Ok((records, bad))
}

/// An error unless `record` has `n_layers + 1` variances and `n_layers` of the rest, with the
/// `expected` number of layers where that is known (with whose number it is, for the error).
fn check_record(record: &TrackRecord, expected: Option<(usize, &str)>) -> Result<(), String> {
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
    if !record.max_abs_activation.is_empty() && record.max_abs_activation.len() != layers + 1 {
        return Err(format!(
            "expected n_layers + 1 largest activations, found {} for {layers} layers",
            record.max_abs_activation.len()
        ));
    }
    match expected {
        Some((expected, whose)) if expected != layers => Err(format!("{layers} layers where {whose} {expected}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_a_run_blowing_up_reads_back_with_nan_where_it_was_not_finite() {
        let dir = tempfile::tempdir().unwrap();
        let record = TrackRecord {
            step: 40,
            block_output_variance: vec![1.0, f64::INFINITY, f64::NAN],
            after_attention_variance: vec![2.0, f64::INFINITY],
            grad_norm: vec![f64::NEG_INFINITY, 3.0],
            max_abs_activation: vec![1.0, 2.0, f64::INFINITY],
        };
        let line = serde_json::to_string(&record).unwrap();
        assert!(line.contains("null"), "{line}");
        std::fs::write(dir.path().join(super::super::TRACKING), format!("{line}\n")).unwrap();
        let read = read_tracking(dir.path()).unwrap();
        let finite = |values: &[f64]| values.iter().map(|v| v.is_finite()).collect::<Vec<_>>();
        assert_eq!(finite(&read[0].block_output_variance), [true, false, false]);
        assert_eq!((read[0].block_output_variance[0], read[0].grad_norm[1]), (1.0, 3.0));
        assert_eq!(finite(&read[0].grad_norm), [false, true]);
        assert_eq!(finite(&read[0].max_abs_activation), [true, true, false]);
    }
}
