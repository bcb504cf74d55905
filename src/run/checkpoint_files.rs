//! The names of a run's checkpoint files: `checkpoint/<kind>-step-<step>.bpk`; and those of the
//! checkpoints versions before 0.1.0 named by epoch (`<kind>-<epoch>.bpk`), which are no longer
//! read, only recognised; and which checkpoints on disk are complete.

use std::path::{Path, PathBuf};

use crate::io::verify_sum;

/// The checkpoint kinds burn-train saves at each checkpoint.
pub const CHECKPOINT_KINDS: [&str; 3] = ["model", "optim", "scheduler"];

/// The optimiser steps that have a checkpoint file of any kind in the checkpoint directory
/// `dir` (`<kind>-step-<step>.bpk`), oldest first.
pub fn checkpoint_steps(dir: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = file_names(dir).iter().filter_map(|name| checkpoint_step(name)).collect();
    steps.sort_unstable();
    steps.dedup();
    steps
}

/// The checkpointed steps in the checkpoint directory `dir` whose files are all complete
/// (checked against their `.sum`), oldest first, and the steps that have files but are not,
/// with the reason.
pub fn checkpoint_status(dir: &Path) -> (Vec<usize>, Vec<(usize, String)>) {
    let (mut complete, mut broken) = (Vec::new(), Vec::new());
    for step in checkpoint_steps(dir) {
        let problem = CHECKPOINT_KINDS.iter().find_map(|kind| {
            let path = checkpoint_file(dir, kind, step);
            verify_sum(&path).err().map(|e| format!("{}: {e}", path.display()))
        });
        match problem {
            None => complete.push(step),
            Some(problem) => broken.push((step, problem)),
        }
    }
    (complete, broken)
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
/// `.sum`), or one of a checkpoint named by epoch (`model-3.bpk`: the run's own, which an
/// `--overwrite` replaces with it).
pub(crate) fn is_checkpoint_file_name(name: &str) -> bool {
    let name = name.strip_suffix(".sum").unwrap_or(name);
    checkpoint_step(name).is_some() || is_epoch_named(name)
}

/// The files of the checkpoint directory `dir` named by epoch (`model-3.bpk`, with or without
/// `.sum`), as versions before 0.1.0 named checkpoints, sorted. This version does not read them: a
/// run that has them is told so (how to rename them), never taken for a run without checkpoints.
pub fn epoch_named_files(dir: &Path) -> Vec<String> {
    let mut names = file_names(dir);
    names.retain(|name| is_epoch_named(name.strip_suffix(".sum").unwrap_or(name)));
    names.sort();
    names
}

/// Whether `name` is `<kind>-<epoch>.bpk`.
fn is_epoch_named(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".bpk") else { return false };
    CHECKPOINT_KINDS.iter().any(|kind| {
        stem.strip_prefix(&format!("{kind}-")).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The names of the entries of `dir` (none where it cannot be read).
fn file_names(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries.map(|entry| entry.file_name().to_string_lossy().into_owned()).collect()
}
