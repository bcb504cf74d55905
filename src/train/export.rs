//! `metrics.csv`: the per-batch values of `metrics.jsonl`, as a table for spreadsheets.

use std::path::Path;

use crate::run::MetricRow;

/// Writes `<dir>/metrics.csv` (atomically) from `rows`: one line per batch value (the epochs'
/// final values and the batches that report nothing are left out).
pub fn write_metrics_csv(dir: &Path, rows: &[MetricRow]) -> std::io::Result<()> {
    let mut csv = String::from("split,epoch,batch,step,metric,value\n");
    for row in rows.iter().filter(|row| row.is_batch_value()) {
        csv.push_str(&format!("{},{},{},{},{},{}\n", row.split, row.epoch, row.batch, row.step, row.metric, row.value));
    }
    crate::io::write_atomically(&dir.join(crate::run::METRICS_CSV), csv.as_bytes())
}
