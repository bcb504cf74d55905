//! The run directory's lock (`.lock`): an advisory lock that the process writing the run (a
//! training, or the `tensorboard` example rewriting its event files) holds alone, with its PID
//! inside. Readers probe it with a shared lock for a moment ([`training_in`]).

use std::fs::File;
use std::io::{Seek, Write};
use std::path::Path;

use super::{training_in, LOCK_FILE};

/// Why the lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockRefused {
    /// A training (or another writer) holds it: its PID, `unknown` where it wrote none.
    Held(String),
    /// Readers (analyze, generate) hold it, longer than the tries wait.
    Readers,
    /// The lock file could not be made, locked or written: what failed.
    Failed(String),
}

/// Takes the advisory lock of the directory `dir` (its `.lock`, created if missing) and writes
/// this process's PID into it; the lock is held while the file returned is open.
pub(crate) fn lock_run_dir(dir: &Path) -> Result<File, LockRefused> {
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LockRefused::Failed(format!("cannot create its lock file: {e}")))?;
    // A reader's probe ([`training_in`]) holds a shared lock for a moment: a lock still held
    // after 200 ms of tries is a writer's, or a reader's that is told apart below.
    let mut taken = file.try_lock();
    for _ in 0..20 {
        if !matches!(taken, Err(std::fs::TryLockError::WouldBlock)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        taken = file.try_lock();
    }
    if let Err(e) = taken {
        return Err(match e {
            // The same probe readers use: a writer holds the lock alone, so where none is
            // found, readers hold it.
            std::fs::TryLockError::WouldBlock => training_in(dir).map_or(LockRefused::Readers, LockRefused::Held),
            std::fs::TryLockError::Error(e) => LockRefused::Failed(format!("cannot lock it: {e}")),
        });
    }
    let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(|e| LockRefused::Failed(format!("cannot write its lock file: {e}")))?;
    Ok(file)
}
