//! What a run directory shows about a model of it that cannot be loaded: what to do about its
//! missing final model, the checkpoints it offers, and what a folder without `model.json` is.

use std::path::{Path, PathBuf};

use super::checkpoint_files::{checkpoint_steps, epoch_named_files};
use super::{CHECKPOINTS, MODEL_INFO, TRAIN_CONFIG};
use crate::load_problem::{CheckpointList, FinishAdvice, FoundInstead};

/// What to do about the run in `dir`, which has checkpoints or not and no (sound) final model, by
/// what it shows: its lock held, a non-finite loss or gradient norm in its log (resuming with the
/// same settings would diverge again), its last step logged, or none of these.
pub(crate) fn finish_advice(dir: &Path, has_checkpoints: bool) -> FinishAdvice {
    if let Some(pid) = super::training_in(dir) {
        return FinishAdvice::StillRunning { pid };
    }
    let rows = super::read_metrics(dir).unwrap_or_default();
    let diverged = rows.iter().find(|row| {
        let watched = ["Loss", "Gradient norm"].contains(&row.metric.as_str());
        row.split == "train" && row.is_batch_value() && watched && !row.value.is_finite()
    });
    if let Some(row) = diverged {
        let (metric, value) = (row.metric.to_lowercase(), row.value.to_string());
        if row.step == 1 {
            return FinishAdvice::DivergedAtFirstStep { metric, value };
        }
        let run = dir.to_path_buf();
        return FinishAdvice::Diverged { metric, value, step: row.step, run, has_checkpoints };
    }
    let steps = std::fs::read_to_string(dir.join(TRAIN_CONFIG))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|config| config["steps"].as_u64());
    let last = rows.iter().filter(|row| row.is_train_loss()).map(|row| row.step as u64).max();
    if let (Some(steps), Some(last)) = (steps, last) {
        if last >= steps && checkpoint_steps(&dir.join(CHECKPOINTS)).is_empty() {
            return FinishAdvice::NothingCanFinish { run: dir.to_path_buf() };
        }
    }
    FinishAdvice::Resume { run: dir.to_path_buf() }
}

/// The checkpoints a run offers to load: those at `steps` (each with its model file and
/// checksum), else the files named by epoch in its checkpoint folder `checkpoints`.
pub(crate) fn checkpoint_list(checkpoints: &Path, steps: &[usize]) -> CheckpointList {
    if !steps.is_empty() {
        return CheckpointList::Steps(steps.to_vec());
    }
    match epoch_named_files(checkpoints).into_iter().next() {
        Some(first) => CheckpointList::EpochNamed { first },
        None => CheckpointList::Empty,
    }
}

/// What `dir`, given as a run but without `model.json`, is instead.
pub(crate) fn found_instead(dir: &Path) -> FoundInstead {
    let dir_buf = dir.to_path_buf();
    if !dir.is_dir() {
        FoundInstead::NotAFolder { dir: dir_buf }
    } else if let Some(run) = first_run_inside(dir) {
        FoundInstead::HoldsRuns { dir: dir_buf, run }
    } else {
        FoundInstead::Other { dir: dir_buf }
    }
}

/// The first run (a folder with `model.json`) inside `dir`, one or two levels down, by name: a
/// folder of runs, or of groups of runs (a sweep's `<scheme>/seed-<n>`).
fn first_run_inside(dir: &Path) -> Option<PathBuf> {
    let folders = |dir: &Path| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        found.sort();
        found
    };
    let is_run = |p: &Path| p.join(MODEL_INFO).is_file();
    let inside = folders(dir);
    inside.iter().find(|p| is_run(p)).cloned().or_else(|| inside.iter().flat_map(|p| folders(p)).find(|p| is_run(p)))
}
