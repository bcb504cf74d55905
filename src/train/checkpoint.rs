//! Checkpoints: burn-train's [`FileCheckpointer`] (burn-pack writes each record through a scratch
//! file, synced and renamed into place), with a checksum beside each file; and deleting the ones
//! a run no longer keeps, only once a newer one is complete on disk (a save that fails, on a full
//! disk say, never costs the checkpoint before it). Which checkpoints on disk are complete is
//! [`crate::run::checkpoint_status`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError, FileCheckpointer};

use super::events::Events;
use crate::io::{sum_path, verify_sum};
use crate::run::{checkpoint_file, checkpoint_steps, EpochSteps, CHECKPOINT_KINDS};

/// Saves the record of each epoch, named by the step it ends at, as
/// `<dir>/<name>-step-<step>.bpk` with burn-train's [`FileCheckpointer`], then its checksum as
/// `<name>-step-<step>.bpk.sum`: a checkpoint cut short by a crash, or damaged later, is told from a
/// complete one ([`crate::io::verify_sum`]).
pub(crate) struct SummedCheckpointer {
    inner: FileCheckpointer,
    dir: PathBuf,
    name: String,
    steps: EpochSteps,
}

impl SummedCheckpointer {
    /// Checkpoints named `name` in `dir` (created if missing), by the steps of `steps`.
    pub fn new(dir: impl AsRef<Path>, name: &str, steps: EpochSteps) -> Self {
        let dir = dir.as_ref().to_path_buf();
        Self { inner: FileCheckpointer::new(&dir, &format!("{name}-step")), dir, name: name.to_string(), steps }
    }
}

impl<R: Checkpoint> Checkpointer<R> for SummedCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        let step = self.steps.step(epoch);
        crate::io::fail_point(format_args!("save:{}-{step}", self.name)).map_err(CheckpointerError::IOError)?;
        self.inner.save(step, record)?;
        crate::io::write_sum(&checkpoint_file(&self.dir, &self.name, step)).map_err(CheckpointerError::IOError)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        delete_checkpoint_file(&self.dir, &self.name, self.steps.step(epoch)).map_err(CheckpointerError::IOError)
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        self.inner.restore(self.steps.step(epoch))
    }
}

/// Removes `<dir>/<kind>-step-<step>.bpk`, its checksum first: a file without one is never taken for
/// a complete checkpoint.
fn delete_checkpoint_file(dir: &Path, kind: &str, step: usize) -> std::io::Result<()> {
    let path = checkpoint_file(dir, kind, step);
    for file in [sum_path(&path), path] {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Whether every file of the checkpoint of `step` in `dir` matches its `.sum`.
fn is_complete(dir: &Path, step: usize) -> bool {
    CHECKPOINT_KINDS.iter().all(|kind| verify_sum(&checkpoint_file(dir, kind, step)).is_ok())
}

/// The steps to delete: those on disk that are not wanted and are older than the newest
/// complete checkpoint. Nothing is deleted while the newest checkpoint is still being written (or
/// failed to be): until then the older ones are all the run has.
pub fn steps_to_delete(on_disk: &[usize], newest_complete: Option<usize>, wanted: &[usize]) -> Vec<usize> {
    let Some(newest_complete) = newest_complete else {
        return Vec::new();
    };
    on_disk.iter().copied().filter(|e| *e < newest_complete && !wanted.contains(e)).collect()
}

/// The checkpoints a run wants to keep, shared between the checkpointing strategy (which decides
/// them as the run goes) and the run (which prunes once more when the last save is done).
#[derive(Clone, Debug)]
pub struct CheckpointKeeper {
    dir: PathBuf,
    wanted: Arc<Mutex<Vec<usize>>>,
    /// The steps found complete so far (each checkpoint is read for its checksum once).
    complete: Arc<Mutex<Vec<usize>>>,
    /// Where a deletion that fails is reported.
    events: Events,
}

impl CheckpointKeeper {
    /// Keeps the checkpoints in the checkpoint directory `dir`; `wanted` are the steps kept so
    /// far. A deletion that fails is a warning sent to `events`.
    pub fn new(dir: &Path, wanted: Vec<usize>, events: Events) -> Self {
        Self { dir: dir.to_path_buf(), wanted: Arc::new(Mutex::new(wanted)), complete: Arc::default(), events }
    }

    /// Sets the steps the run keeps.
    pub fn want(&self, steps: Vec<usize>) {
        *self.wanted.lock().unwrap_or_else(|e| e.into_inner()) = steps;
    }

    /// Deletes the checkpoints on disk that are not wanted, once a newer one is complete on disk
    /// ([`steps_to_delete`]); a deletion that fails is reported and the rest go on.
    pub fn prune(&self) {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let on_disk = checkpoint_steps(&self.dir);
        if on_disk.iter().all(|e| wanted.contains(e)) {
            return;
        }
        let newest_complete = on_disk.iter().rev().copied().find(|&step| self.is_complete(step));
        for step in steps_to_delete(&on_disk, newest_complete, &wanted) {
            for kind in CHECKPOINT_KINDS {
                if let Err(e) = delete_checkpoint_file(&self.dir, kind, step) {
                    self.events.warn(format!("cannot delete the {kind} checkpoint of step {step}: {e}"));
                }
            }
        }
    }

    fn is_complete(&self, step: usize) -> bool {
        let mut complete = self.complete.lock().unwrap_or_else(|e| e.into_inner());
        if complete.contains(&step) {
            return true;
        }
        let verified = is_complete(&self.dir, step);
        if verified {
            complete.push(step);
        }
        verified
    }
}

#[cfg(test)]
mod tests {
    use super::steps_to_delete;

    #[test]
    fn an_old_checkpoint_goes_only_once_a_newer_one_is_complete() {
        // Keeping one: checkpoint 2 is being written (or its save failed), so 1 stays.
        assert_eq!(steps_to_delete(&[1, 2], Some(1), &[2]), Vec::<usize>::new());
        // Once 2 is complete, 1 goes.
        assert_eq!(steps_to_delete(&[1, 2], Some(2), &[2]), vec![1]);
        // The best (1) is kept however old; older ones that are not wanted go, broken or not.
        assert_eq!(steps_to_delete(&[1, 2, 3, 4], Some(4), &[1, 4]), vec![2, 3]);
        // Nothing complete: nothing deleted.
        assert_eq!(steps_to_delete(&[1, 2], None, &[]), Vec::<usize>::new());
        // The newest complete checkpoint, and a newer one being written, are never deleted.
        assert_eq!(steps_to_delete(&[3, 5], Some(3), &[]), Vec::<usize>::new());
    }
}
