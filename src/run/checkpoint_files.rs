//! The names of a run's checkpoint files: `checkpoint/<kind>-step-<step>.bpk`.

use std::path::{Path, PathBuf};

/// The checkpoint kinds burn-train saves at each checkpoint.
pub const CHECKPOINT_KINDS: [&str; 3] = ["model", "optim", "scheduler"];

/// The optimiser steps that have a checkpoint file of any kind in the checkpoint directory
/// `dir` (`<kind>-step-<step>.bpk`), oldest first.
pub fn checkpoint_steps(dir: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().filter_map(|e| checkpoint_step(&e.file_name().to_string_lossy())).collect())
        .unwrap_or_default();
    steps.sort_unstable();
    steps.dedup();
    steps
}

/// `<dir>/<kind>-step-<step>.bpk`.
pub fn checkpoint_file(dir: &Path, kind: &str, step: usize) -> PathBuf {
    dir.join(format!("{kind}-step-{step}.bpk"))
}

/// The step in a checkpoint file's name `<kind>-step-<step>.bpk`, if it is one.
fn checkpoint_step(name: &str) -> Option<usize> {
    let stem = name.strip_suffix(".bpk")?;
    CHECKPOINT_KINDS.iter().find_map(|kind| stem.strip_prefix(&format!("{kind}-step-"))?.parse().ok())
}

/// Whether `name` is a checkpoint file's or its checksum's (`model-step-5.bpk`, with or without
/// `.sum`).
#[cfg(feature = "train")]
pub(crate) fn is_checkpoint_file_name(name: &str) -> bool {
    checkpoint_step(name.strip_suffix(".sum").unwrap_or(name)).is_some()
}
