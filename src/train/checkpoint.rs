//! Checkpoints: burn-train's [`FileCheckpointer`] (burn-pack writes each record through a scratch
//! file, synced and renamed into place), with a checksum beside each file.

use std::path::{Path, PathBuf};

use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError, FileCheckpointer};

use crate::model::checkpoint_file;

/// Saves each epoch's record as `<dir>/<name>-<epoch>.bpk` with burn-train's
/// [`FileCheckpointer`], then its checksum as `<name>-<epoch>.bpk.sum`: a checkpoint cut short by
/// a crash, or damaged later, is told from a complete one ([`crate::io::verify_sum`]).
pub struct SummedCheckpointer {
    inner: FileCheckpointer,
    dir: PathBuf,
    name: String,
}

impl SummedCheckpointer {
    /// Checkpoints named `name` in `dir` (created if missing).
    pub fn new(dir: impl AsRef<Path>, name: &str) -> Self {
        let dir = dir.as_ref().to_path_buf();
        Self { inner: FileCheckpointer::new(&dir, name), dir, name: name.to_string() }
    }
}

impl<R: Checkpoint> Checkpointer<R> for SummedCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        self.inner.save(epoch, record)?;
        crate::io::write_sum(&checkpoint_file(&self.dir, &self.name, epoch)).map_err(CheckpointerError::IOError)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        // The checksum goes first: a file without one is never taken for a complete checkpoint.
        let sum = crate::io::sum_path(&checkpoint_file(&self.dir, &self.name, epoch));
        match std::fs::remove_file(sum) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(CheckpointerError::IOError(e)),
            _ => {}
        }
        <FileCheckpointer as Checkpointer<R>>::delete(&self.inner, epoch)
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        self.inner.restore(epoch)
    }
}
