//! The run directory's life, the store's verbs: which directories may hold a run, one training at
//! a time (an advisory lock), the clean-up after a crash, the checkpoints that are complete, and
//! replacing a finished run without losing it when the new one fails. It knows no training: the
//! one question only the training can answer (is a `train.json` that no run signed a run's
//! settings?) is passed in as a [`SettingsCheck`], and what became of a replaced run is answered as
//! a [`ReplacedRun`].

use std::fs::File;
use std::path::{Path, PathBuf};

use super::own_files::is_temporary_name;
use super::{
    checkpoint_status, has_settings, is_finished, is_replacing, LockRefused, CHECKPOINTS, DISCARDED_RUN, LOCK_FILE,
    MODEL, MODEL_INFO, PREVIOUS_RUN, RUN_ENTRIES, TRAIN_CONFIG,
};
use crate::error::Error;
use crate::io::{crash_point, write_atomically};
use crate::run_dir_error::RunDirError;

/// Tells a run's own settings from a user's file by the same name, for a `train.json` that no
/// checksum says a run wrote (a start killed between the two writes): `Err` says why it is not a
/// run's. Pass `TrainConfig::check_run_settings`: a check that accepts any file would let a
/// user's `train.json` pass for a run's, which `--overwrite` then sets aside and deletes.
pub type SettingsCheck = fn(&Path) -> Result<(), String>;

/// What became of the run an `--overwrite` replaced, once the new run ends
/// ([`RunDir::end_replacement`]).
#[derive(Debug)]
pub enum ReplacedRun {
    /// The new run stopped after a checkpoint but before its end: the old run waits in
    /// `.previous-run/` until the new one finishes.
    Waiting,
    /// The new run has no checkpoint: the old run is put back.
    Restored,
    /// Discarding or putting back the old run failed: it is still in `.previous-run/`.
    StillAside(RunDirError),
}

/// Written into `.previous-run/` once every entry of the replaced run is in it: from then on every
/// run entry in the directory is the new run's. Without it the set-aside was cut short and is undone.
const SET_ASIDE_DONE: &str = ".set-aside-done";

/// A run directory held by this process for the life of a training.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    /// Holds the advisory lock until dropped.
    _lock: File,
    /// Whether opening it restored a run that an interrupted `--overwrite` was replacing.
    restored: bool,
}

impl RunDir {
    /// Opens `path` for a training: creates it when missing and takes its lock. Refused: a path
    /// that is not a directory, a directory holding anything besides a run of this crate (it
    /// must be empty or hold `train.json`, a run's by its checksum or by `settings`), and a
    /// directory another training holds. Then it clears what a crash left: temporary files, and a
    /// replacement that never got its first checkpoint (the replaced run is put back).
    pub fn open(path: &Path, settings: SettingsCheck) -> Result<Self, Error> {
        let error = |error: RunDirError| Error::run_dir(path, error);
        // Checked again though `train` checked before preparing: the directory may have changed
        // since, and only the lock taken below keeps it from changing after.
        Self::check(path, settings)?;
        std::fs::create_dir_all(path).map_err(|e| error(RunDirError::io("create it", e)))?;
        let lock = take_lock(path).map_err(error)?;
        let mut dir = Self { path: path.to_path_buf(), _lock: lock, restored: false };
        dir.remove_temporary_files();
        dir.restored =
            dir.settle_replacement(false, "restore the run an interrupted --overwrite replaced").map_err(error)?;
        Ok(dir)
    }

    /// Whether [`open`](Self::open) may use `path`, checked without writing anything: a new
    /// directory under existing folders, an empty one, or a run of this crate.
    pub fn check(path: &Path, settings: SettingsCheck) -> Result<(), Error> {
        if path.is_dir() {
            return check_run_dir(path, settings).map_err(|error| Error::run_dir(path, error));
        }
        match crate::io::folder_path_problem(path) {
            Some(problem) => Err(Error::run_dir(path, RunDirError::NoFolder { problem })),
            None => Ok(()),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `checkpoint/` directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.path.join(CHECKPOINTS)
    }

    /// Whether the directory holds (part of) a run.
    pub fn holds_run(&self) -> bool {
        super::holds_a_run(&self.path)
    }

    /// Moves the run in the directory into `.previous-run/`, to be discarded by
    /// [`finish_replacement`](Self::finish_replacement) once the new run has a checkpoint. When a
    /// move fails, the run is put back as it was and the error returned.
    pub fn set_aside(&self) -> std::io::Result<()> {
        let aside = self.path.join(PREVIOUS_RUN);
        let moved = std::fs::create_dir_all(&aside).and_then(|()| {
            for (name, _) in run_entries() {
                let from = self.path.join(name);
                if from.symlink_metadata().is_ok() {
                    std::fs::rename(&from, aside.join(name))?;
                    crash_point(format_args!("set-aside:{name}"));
                }
            }
            write_atomically(&aside.join(SET_ASIDE_DONE), b"")
        });
        match moved {
            Ok(()) => Ok(()),
            Err(e) => match self.put_back() {
                Ok(()) => Err(e),
                Err(undo) => Err(std::io::Error::other(format!(
                    "{e}; putting the run back failed too ({undo}): it is split between {} and {}",
                    self.path.display(),
                    aside.display()
                ))),
            },
        }
    }

    /// After a run that replaced another: discards the replaced run when the new one has a
    /// complete checkpoint or final model, else removes the new run's files and puts the old back;
    /// a set-aside that was cut short is undone. Returns whether the old run was put back.
    pub fn finish_replacement(&self) -> Result<bool, RunDirError> {
        self.settle_replacement(true, "discard or put back the replaced run")
    }

    /// Settles what an `--overwrite` left (see [`finish_replacement`](Self::finish_replacement)).
    /// With `discard` false, a replaced run whose replacement has a checkpoint but no final model is
    /// left in `.previous-run/`: only a training that goes on with the new run (or replaces it)
    /// discards it, never one that is refused. A file operation that fails is said as `doing`.
    fn settle_replacement(&self, discard: bool, doing: &str) -> Result<bool, RunDirError> {
        let io = |e| RunDirError::io(doing, e);
        let discarded = self.path.join(DISCARDED_RUN);
        if discarded.exists() {
            std::fs::remove_dir_all(&discarded).map_err(io)?;
        }
        if !is_replacing(&self.path) {
            return Ok(false);
        }
        self.check_set_aside_is_ours(io)?;
        if self.set_aside_done() {
            let finished = is_finished(&self.path);
            if finished || !self.checkpoints().0.is_empty() {
                if finished || discard {
                    self.discard_set_aside().map_err(io)?;
                }
                return Ok(false);
            }
            self.remove_run_entries().map_err(io)?;
        }
        self.put_back().map_err(io)?;
        Ok(true)
    }

    /// An error unless `.previous-run` is a folder of a run's entries (and the set-aside's
    /// marker): a folder or file of the user's by that name is neither restored nor deleted.
    fn check_set_aside_is_ours(&self, io: impl Fn(std::io::Error) -> RunDirError) -> Result<(), RunDirError> {
        let aside = self.path.join(PREVIOUS_RUN);
        if !aside.is_dir() {
            return Err(RunDirError::ForeignSetAside { path: aside, entries: None });
        }
        let ours = |name: &str| name == SET_ASIDE_DONE || run_entries().any(|(entry, _)| entry == name);
        let mut foreign: Vec<String> = std::fs::read_dir(&aside)
            .map_err(io)?
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !ours(name) && !is_temporary_name(name))
            .collect();
        foreign.sort();
        if foreign.is_empty() {
            return Ok(());
        }
        Err(RunDirError::ForeignSetAside { path: aside, entries: Some(foreign) })
    }

    /// Whether the set-aside finished: its marker, or (a set-aside of an earlier version, which
    /// wrote none) an entry both in the directory and in `.previous-run/`, which only a new run
    /// started after a finished set-aside can make.
    fn set_aside_done(&self) -> bool {
        let aside = self.path.join(PREVIOUS_RUN);
        aside.join(SET_ASIDE_DONE).exists()
            || run_entries().any(|(name, _)| {
                aside.join(name).symlink_metadata().is_ok() && self.path.join(name).symlink_metadata().is_ok()
            })
    }

    /// Moves what is in `.previous-run/` back into the directory (whose own run entries must be
    /// gone) and removes it. The marker goes first: a crash half-way is then a set-aside cut
    /// short, which the next start finishes putting back.
    fn put_back(&self) -> std::io::Result<()> {
        let aside = self.path.join(PREVIOUS_RUN);
        match std::fs::remove_file(aside.join(SET_ASIDE_DONE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for (name, _) in run_entries() {
            let (from, to) = (aside.join(name), self.path.join(name));
            if from.symlink_metadata().is_ok() && to.symlink_metadata().is_err() {
                std::fs::rename(&from, &to)?;
                crash_point(format_args!("put-back:{name}"));
            }
        }
        self.discard_set_aside()
    }

    /// Deletes `.previous-run/`, renamed out of the way first.
    fn discard_set_aside(&self) -> std::io::Result<()> {
        let discarded = self.path.join(DISCARDED_RUN);
        std::fs::rename(self.path.join(PREVIOUS_RUN), &discarded)?;
        crash_point("discard");
        std::fs::remove_dir_all(&discarded)
    }

    /// Whether [`open`](Self::open) restored a run that an earlier `--overwrite`, stopped before its
    /// first checkpoint, was replacing.
    pub fn restored(&self) -> bool {
        self.restored
    }

    fn remove_run_entries(&self) -> std::io::Result<()> {
        for (name, is_dir) in run_entries() {
            let path = self.path.join(name);
            let removed = if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            match removed {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Removes the temporary files of writes a crash interrupted (`.<name>.tmp<pid>`): under the
    /// lock no other process is writing here.
    fn remove_temporary_files(&self) {
        for dir in [self.path.clone(), self.checkpoint_dir()] {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_temporary_name(&name) && entry.path().is_file() {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// The steps of the checkpoints whose files are all complete (checked against their `.sum`),
    /// oldest first, and the steps that have files but are not, with the reason.
    pub fn checkpoints(&self) -> (Vec<usize>, Vec<(usize, String)>) {
        checkpoint_status(&self.checkpoint_dir())
    }
}

/// The entries a run owns, less the lock and the set-aside run.
fn run_entries() -> impl Iterator<Item = (&'static str, bool)> {
    RUN_ENTRIES.into_iter().filter(|(name, _)| ![LOCK_FILE, PREVIOUS_RUN, DISCARDED_RUN].contains(name))
}

/// An error unless the directory `path` is empty or holds a run of this crate, whose
/// entries of a run's names have the right kind (a plain file named `train` is not a log folder).
fn check_run_dir(path: &Path, settings: SettingsCheck) -> Result<(), RunDirError> {
    let entries: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| RunDirError::io("read it", e))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // The lock, and a starting run's first writes (so a second run gets the lock's message).
        .filter(|name| name != LOCK_FILE && !is_temporary_name(name))
        .collect();
    // A run's first file is `model.json`: a start killed before `train.json` leaves it alone. A
    // replacement under way, or killed, is sorted out under the lock ([`RunDir::open`]).
    let first_write_only = entries.iter().all(|name| name == MODEL_INFO || name == "model.json.sum");
    if entries.is_empty() || first_write_only || entries.iter().any(|name| name == PREVIOUS_RUN) {
        return Ok(());
    }
    let mut run_files: Vec<&str> =
        entries.iter().map(String::as_str).filter(|name| [CHECKPOINTS, MODEL, super::METRICS].contains(name)).collect();
    run_files.sort_unstable();
    if !has_settings(path) && !run_files.is_empty() {
        return Err(RunDirError::SettingsMissing { run_files: run_files.into_iter().map(String::from).collect() });
    }
    if !has_settings(path) {
        let mut shown: Vec<String> = entries.iter().take(3).cloned().collect();
        shown.sort_unstable();
        return Err(RunDirError::NotARun { shown, more: entries.len() > 3 });
    }
    let written_by_a_run = crate::io::sum_path(&path.join(TRAIN_CONFIG)).is_file();
    match settings(&path.join(TRAIN_CONFIG)) {
        // A run's own train.json, damaged since (its .sum says a run wrote it): the run is ours.
        Err(_) if written_by_a_run => {}
        Err(reason) => return Err(RunDirError::ForeignSettings { reason }),
        Ok(()) => {}
    }
    for (name, is_dir) in RUN_ENTRIES {
        let entry = path.join(name);
        if entry.exists() && entry.is_dir() != is_dir {
            return Err(RunDirError::WrongKind { name: name.to_string(), should_be_dir: is_dir });
        }
    }
    Ok(())
}

/// Takes the advisory lock of the directory `dir` (its `.lock`, created if missing) and writes
/// this process's PID into it; an error saying who holds it.
pub(crate) fn take_lock(dir: &Path) -> Result<File, RunDirError> {
    super::lock_run_dir(dir).map_err(|refused| match refused {
        LockRefused::Held(holder) => RunDirError::locked(holder),
        LockRefused::Readers => RunDirError::ReadersHoldLock,
        LockRefused::Failed(message) => RunDirError::LockFailed(message),
    })
}

impl RunDir {
    /// For `--overwrite`: an earlier replacement of this run, killed after its first checkpoint,
    /// is replaced in turn, and the run in the directory is set aside (in `.previous-run/`) until
    /// the new one has a checkpoint.
    pub fn replace_run(&self) -> Result<(), Error> {
        self.finish_replacement().map_err(|e| Error::run_dir(&self.path, e))?;
        if self.holds_run() {
            let set_aside = |e| Error::run_dir(&self.path, RunDirError::io("set the old run aside", e));
            self.set_aside().map_err(set_aside)?;
        }
        Ok(())
    }

    /// After a training that replaced a run (or resumed such a replacement): the old run is
    /// deleted once the new one is finished, kept while the new one has checkpoints but no end,
    /// and put back when it has none. What became of it, where the user should know.
    pub fn end_replacement(&self) -> Option<ReplacedRun> {
        if !is_replacing(&self.path) {
            return None;
        }
        // A new run that stopped after a checkpoint but before its end (a full disk, an error)
        // may never finish: the run it replaces waits until it does.
        let finished = is_finished(&self.path);
        if !finished && self.set_aside_done() && !self.checkpoints().0.is_empty() {
            return Some(ReplacedRun::Waiting);
        }
        match self.finish_replacement() {
            Ok(true) => Some(ReplacedRun::Restored),
            Ok(false) => None,
            Err(e) => Some(ReplacedRun::StillAside(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readers_moment_on_the_lock_does_not_turn_a_training_away_but_a_training_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, "4242\n").unwrap();
        // A reader's probe (a shared lock) held for 10 ms.
        let probe = File::open(&path).unwrap();
        probe.lock_shared().unwrap();
        let released = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            probe.unlock().unwrap();
        });
        let lock = take_lock(dir.path()).unwrap();
        released.join().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), std::process::id().to_string());
        // A training's lock is still held after the tries: the second is turned away, naming it.
        let second = take_lock(dir.path()).unwrap_err();
        let ours = std::process::id().to_string();
        assert!(matches!(&second, RunDirError::Locked { pid: Some(pid) } if *pid == ours), "{second:?}");
        drop(lock);
        // A reader holding on for longer is named as such, not as the last training.
        let reader = File::open(&path).unwrap();
        reader.lock_shared().unwrap();
        let refused = take_lock(dir.path()).unwrap_err();
        assert!(matches!(refused, RunDirError::ReadersHoldLock), "{refused:?}");
    }
}
