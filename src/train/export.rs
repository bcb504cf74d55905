//! Turns burn-train's per-epoch metric logs into `metrics.csv` and `metrics.jsonl` in the run directory.

use std::path::Path;

/// One logged value.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricRow {
    /// `train` or `valid`.
    pub split: String,
    /// The epoch (validation interval), from 1.
    pub epoch: usize,
    /// The batch within the epoch, from 1.
    pub batch: usize,
    /// The metric's name.
    pub metric: String,
    /// Its value.
    pub value: f64,
}

/// Reads `<dir>/{train,valid}/epoch-N/<Metric>.log` (lines `value,count`; the epoch's final
/// line `value,final` and lines of count 0 are skipped).
pub fn read_metric_logs(dir: &Path) -> Vec<MetricRow> {
    let mut rows = Vec::new();
    for split in ["train", "valid"] {
        let Ok(epochs) = std::fs::read_dir(dir.join(split)) else { continue };
        for epoch_dir in epochs.flatten() {
            let name = epoch_dir.file_name().to_string_lossy().into_owned();
            let Some(epoch) = name.strip_prefix("epoch-").and_then(|n| n.parse::<usize>().ok()) else { continue };
            let Ok(files) = std::fs::read_dir(epoch_dir.path()) else { continue };
            for file in files.flatten() {
                let path = file.path();
                if path.extension().is_none_or(|ext| ext != "log") {
                    continue;
                }
                let metric = path.file_stem().unwrap_or_default().to_string_lossy().replace('_', " ");
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let values = text.lines().filter(|line| !line.ends_with(",final"));
                for (index, line) in values.enumerate() {
                    // A count of 0 reports nothing (e.g. the gradient norm of a micro-batch that
                    // is not the last of its optimiser step).
                    let Some((value, count)) = line.split_once(',') else { continue };
                    if let (Ok(value), false) = (value.parse::<f64>(), count == "0") {
                        rows.push(MetricRow {
                            split: split.into(),
                            epoch,
                            batch: index + 1,
                            metric: metric.clone(),
                            value,
                        });
                    }
                }
            }
        }
    }
    rows.sort_by(|a, b| (&a.split, a.epoch, &a.metric, a.batch).cmp(&(&b.split, b.epoch, &b.metric, b.batch)));
    rows
}

/// Writes `metrics.csv` and `metrics.jsonl` (atomically) from the logs in `dir`; returns the rows.
pub fn export_metrics(dir: &Path) -> std::io::Result<Vec<MetricRow>> {
    let rows = read_metric_logs(dir);
    let mut csv = String::from("split,epoch,batch,metric,value\n");
    let mut jsonl = String::new();
    for row in &rows {
        csv.push_str(&format!("{},{},{},{},{}\n", row.split, row.epoch, row.batch, row.metric, row.value));
        let json = serde_json::json!({"split": row.split, "epoch": row.epoch, "batch": row.batch, "metric": row.metric, "value": row.value});
        jsonl.push_str(&format!("{json}\n"));
    }
    crate::io::write_atomically(&dir.join("metrics.csv"), csv.as_bytes())?;
    crate::io::write_atomically(&dir.join("metrics.jsonl"), jsonl.as_bytes())?;
    Ok(rows)
}
