//! A run directory on disk, the one owner of its format: the names of its files, the model it
//! holds ([`RunModelInfo`], [`save_run_model`], [`load_run_model`]), its checkpoints, the records
//! of its metrics ([`MetricRow`], [`read_metrics`], [`write_metrics_csv`]) and tracking
//! ([`TrackRecord`]) and the logs they are appended to (`RecordLog`); and
//! loading a model from a directory of either kind, a run or Hugging Face's ([`load_model_dir`]).
//!
//! | entry | what |
//! |---|---|
//! | `train.json` | every setting of the training, resolved ([`TRAIN_CONFIG`]) |
//! | `model.json` | the model's config, tokenizer and data ([`MODEL_INFO`], a [`RunModelInfo`]) |
//! | `model.bpk`, `model.bpk.sum` | the final model and its checksum ([`MODEL`]) |
//! | `checkpoint/` | `model-step-N.bpk`, `optim-step-N.bpk`, `scheduler-step-N.bpk` at step `N` ([`CHECKPOINTS`]) |
//! | `metrics.jsonl`, `metrics.csv` | the metrics of every logged step and validation ([`METRICS`]) |
//! | `metrics.jsonl.damaged` | `metrics.jsonl` as it was before each resume that dropped a damaged part, oldest first ([`METRICS_DAMAGED`]) |
//! | `tracking.jsonl` | the layer-wise variance and gradient norms over training ([`TRACKING`]) |
//! | `tensorboard/` | TensorBoard event files of the metrics and tracking above ([`TENSORBOARD`]) |
//! | `analysis/` | the analyze example's report on the run's model ([`ANALYSIS`], marked by [`REPORT`]) |
//! | `.lock` | held by the training that uses the directory ([`LOCK_FILE`]) |
//! | `.previous-run/` | the run an `--overwrite` replaces, until the new one has a checkpoint ([`PREVIOUS_RUN`]) |
//!
//! Whether a directory holds a run, and whether it is finished or being replaced, is asked of
//! [`RunState`] and its functions; the lock is taken here for whoever writes the run (the
//! training, the `tensorboard` example); and the directory's life under a training (`--overwrite`,
//! the checks under its lock) is `RunDir`'s (with the `train` feature), which knows no training.

mod checkpoint_files;
#[cfg(any(feature = "train", feature = "cli"))]
mod epoch_steps;
mod identity;
mod load_diagnosis;
#[cfg(feature = "tensorboard")]
mod lock;
mod metrics_file;
mod model_dir;
mod model_info;
mod own_files;
#[cfg(feature = "train")]
mod record_log;
#[cfg(feature = "train")]
mod run_dir;
mod run_model;
mod state;
mod tracking_file;

pub use crate::load_problem::{
    CheckpointList, FinishAdvice, FoundInstead, LoadProblem, ModelDirProblem, TokenizerChoice,
};
pub use crate::run_dir_error::{ResumeAdvice, RunDirError, SettingChange};
pub use checkpoint_files::{checkpoint_file, checkpoint_status, checkpoint_steps, epoch_named_files, CHECKPOINT_KINDS};
pub use identity::RunIdentity;
#[cfg(feature = "tensorboard")]
pub(crate) use lock::{lock_run_dir, LockRefused};
#[cfg(feature = "tensorboard")]
pub(crate) use metrics_file::parse_metric_lines;
pub use metrics_file::{first_non_finite_loss, read_metrics, write_metrics_csv, MetricRow};
#[cfg(feature = "data")]
pub use model_dir::check_tokenizer_identity;
pub use model_dir::{
    is_hf_dir, load_model_dir, read_model_dir_config, require_hf_dir, resolve_dir, tokenizer_spec, LoadedModel,
};
pub use model_info::RunModelInfo;
pub use own_files::{foreign_files_in_run_folders, is_own_event_file};
#[cfg(feature = "train")]
pub(crate) use record_log::{keep_damaged_metrics, RecordLog};
#[cfg(feature = "train")]
pub(crate) use run_dir::take_lock;
#[cfg(feature = "train")]
#[cfg_attr(docsrs, doc(cfg(feature = "train")))]
pub use run_dir::{ReplacedRun, RunDir, SettingsCheck};
pub use run_model::{load_run_model, record_start, save_run_model};
pub use state::{
    has_settings, holds_a_run, is_finished, is_replacing, run_of_config_file, training_in, RunProgress, RunState,
};
#[cfg(feature = "tensorboard")]
pub(crate) use tracking_file::read_tracking_lines;
pub use tracking_file::{read_tracking, read_tracking_skipping_damage, BadLine, TrackRecord};
// Epochs are burn-train's validation intervals: only its adapter (and the deprecated `--epoch`)
// speaks of them.
pub(crate) use checkpoint_files::is_checkpoint_file_name;
#[cfg(feature = "cli")]
pub(crate) use epoch_steps::step_of_options;
#[cfg(feature = "train")]
pub(crate) use epoch_steps::EpochSteps;
#[cfg(feature = "train")]
pub(crate) use model_info::{model_info_edited, read_model_info, ModelInfoError};
#[cfg(feature = "train")]
pub(crate) use run_model::missing_final_model;

/// Every setting of the training, resolved: `train.json`.
pub const TRAIN_CONFIG: &str = crate::io::RUN_SETTINGS_FILE;
/// The model's description ([`RunModelInfo`]): `model.json`.
pub const MODEL_INFO: &str = "model.json";
/// The final model (with its checksum beside it): `model.bpk`.
pub const MODEL: &str = "model.bpk";
/// The checkpoint folder: `checkpoint`.
pub const CHECKPOINTS: &str = "checkpoint";
/// The metrics of every logged step and validation: `metrics.jsonl`.
pub const METRICS: &str = "metrics.jsonl";
/// The metrics as a table: `metrics.csv`.
pub const METRICS_CSV: &str = "metrics.csv";
/// The layer-wise variance and gradient norms over training: `tracking.jsonl`.
pub const TRACKING: &str = "tracking.jsonl";
/// TensorBoard's event files of the run's metrics and tracking: `tensorboard/`.
pub const TENSORBOARD: &str = "tensorboard";
/// `metrics.jsonl` as it was before each resume that dropped its history from a damaged line on,
/// the copies one after another, oldest first.
pub const METRICS_DAMAGED: &str = "metrics.jsonl.damaged";
/// The analyze example's report on the run's model.
pub const ANALYSIS: &str = "analysis";
/// The file that marks a report on one model (in a run's `analysis/`, or a folder of its own):
/// `report.json`. A folder holding it may be replaced by a new report.
pub const REPORT: &str = "report.json";
/// The file that marks a comparison of several models' reports: `comparison.json`.
pub const COMPARISON: &str = "comparison.json";

/// What a run writes into its directory, and nothing else: `(name, is a directory)`.
/// `train/` and `valid/` hold burn-train's metric logs in runs of versions before `metrics.jsonl`;
/// `analysis/` is the analyze example's report on the run's model (it goes with the model).
pub const RUN_ENTRIES: [(&str, bool); 18] = [
    (CHECKPOINTS, true),
    ("train", true),
    ("valid", true),
    (TRAIN_CONFIG, false),
    ("train.json.sum", false),
    (MODEL_INFO, false),
    ("model.json.sum", false),
    (MODEL, false),
    ("model.bpk.sum", false),
    (METRICS_CSV, false),
    (METRICS, false),
    (METRICS_DAMAGED, false),
    (TRACKING, false),
    (TENSORBOARD, true),
    (ANALYSIS, true),
    (LOCK_FILE, false),
    (PREVIOUS_RUN, true),
    (DISCARDED_RUN, true),
];

/// The lock file: held (advisory lock) by the training that uses the directory, with its PID inside.
pub const LOCK_FILE: &str = ".lock";

/// Where `--overwrite` keeps the run it replaces until the new one has a checkpoint.
pub const PREVIOUS_RUN: &str = ".previous-run";

/// `.previous-run/` renamed on its way out: a crash while deleting it never leaves part of the
/// replaced run where it could be taken for the whole.
pub(crate) const DISCARDED_RUN: &str = ".previous-run.discarded";

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` varied floats: random bit patterns (finite), f32 values widened to f64 (as the losses
    /// are), losses in `[0, 12)` and learning-rate-like powers of ten. Without serde_json's
    /// `float_roundtrip` about one in ten of them reads back one ulp off.
    pub(crate) fn random_floats(n: usize) -> Vec<f64> {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            // SplitMix64.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let unit = |bits: u64| (bits >> 11) as f64 / (1u64 << 53) as f64;
        (0..n)
            .map(|i| {
                let bits = next();
                let value = match i % 4 {
                    0 => f64::from_bits(bits),
                    1 => f32::from_bits(bits as u32) as f64,
                    2 => unit(bits) * 12.0,
                    _ => 10f64.powf(-8.0 * unit(bits)),
                };
                if value.is_finite() {
                    value
                } else {
                    unit(bits)
                }
            })
            .collect()
    }

    fn bits(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn metric_and_tracking_records_read_back_bit_identical() {
        let values = random_floats(4000);
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<MetricRow> = values
            .iter()
            .enumerate()
            .map(|(i, &value)| MetricRow {
                split: "train".into(),
                epoch: 1,
                batch: i + 1,
                step: i + 1,
                metric: "Loss".into(),
                value,
                count: Some(64),
                is_final: false,
            })
            .collect();
        let text: String = rows.iter().map(|row| serde_json::to_string(row).unwrap() + "\n").collect();
        std::fs::write(dir.path().join(METRICS), text).unwrap();
        let read: Vec<f64> = read_metrics(dir.path()).unwrap().iter().map(|row| row.value).collect();
        assert_eq!(bits(&read), bits(&values));

        let records: Vec<TrackRecord> = values
            .chunks(8)
            .enumerate()
            .map(|(step, v)| TrackRecord {
                step,
                block_output_variance: v[..3].to_vec(),
                after_attention_variance: v[3..5].to_vec(),
                grad_norm: v[5..7].to_vec(),
                max_abs_activation: v[4..7].to_vec(),
            })
            .collect();
        let text: String = records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
        std::fs::write(dir.path().join(TRACKING), text).unwrap();
        let read = read_tracking(dir.path()).unwrap();
        let flat = |records: &[TrackRecord]| -> Vec<u64> {
            records
                .iter()
                .flat_map(|r| {
                    [&r.block_output_variance, &r.after_attention_variance, &r.grad_norm, &r.max_abs_activation]
                })
                .flat_map(|v| bits(v))
                .collect()
        };
        assert_eq!(flat(&read), flat(&records));
    }
}
