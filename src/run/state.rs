//! What a run directory holds: new, started, finished, or being replaced ([`RunState`]). The
//! start and resume rules, sweeps and `--overwrite` ask these questions here. Each is also
//! answered alone, for callers that need no more: whether a run is finished reads its final
//! model whole (for its checksum), the others only look for files. Checks that need more than
//! the answer (which of a run's files are missing or damaged, what else a folder holds) read the
//! files themselves (`RunDir`, the loaders in `run_model.rs`).

use std::path::{Path, PathBuf};

use super::{CHECKPOINTS, LOCK_FILE, MODEL, MODEL_INFO, PREVIOUS_RUN, TRAIN_CONFIG};

/// How far the run in a directory got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunProgress {
    /// No run: none of its settings, final model or checkpoints (the directory may not exist).
    New,
    /// Started, not finished: its settings, checkpoints, or a final model that does not verify
    /// against its checksum (cut short, or edited).
    Started,
    /// Finished: its final model verifies against its checksum.
    Finished,
}

/// What a run directory holds, read from disk at one moment (a training that holds the
/// directory's lock may change it after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunState {
    /// How far the run in the directory got.
    pub progress: RunProgress,
    /// Whether the run's settings (`train.json`) are there: what a resume reads.
    pub has_settings: bool,
    /// Whether an `--overwrite` is replacing another run here, or was killed doing so: the run it
    /// replaces is in `.previous-run/`. The new run in the directory has its own progress.
    pub replacing: bool,
}

impl RunState {
    /// Reads what `dir` holds (the final model whole, for its checksum, when there is one).
    pub fn of(dir: &Path) -> RunState {
        let progress = if is_finished(dir) {
            RunProgress::Finished
        } else if holds_a_run(dir) {
            RunProgress::Started
        } else {
            RunProgress::New
        };
        RunState { progress, has_settings: has_settings(dir), replacing: is_replacing(dir) }
    }

    /// Whether the run's final model verifies.
    pub fn is_finished(&self) -> bool {
        self.progress == RunProgress::Finished
    }
}

/// Whether `dir` holds a run (its settings, its final model or its checkpoints), whole or in part,
/// without reading any of it.
pub fn holds_a_run(dir: &Path) -> bool {
    [TRAIN_CONFIG, MODEL, CHECKPOINTS].iter().any(|name| dir.join(name).exists())
}

/// The run directory whose settings file `path` is (`RUN/train.json`, with the run's
/// `model.json`, final model or checkpoints beside it), or `None` for any other file (a copy of a
/// run's `train.json` elsewhere, with its checksum or not, is a config file like any other). A run's
/// `train.json` records `out` relative to where the run started: resuming from it elsewhere goes
/// by this instead, so that a damaged run is named as such rather than another run resumed.
///
/// Unlike [`holds_a_run`], `train.json` itself is no evidence here (it is the file asked about),
/// and `model.json`, a run's first write, is: a start killed before its first checkpoint is a run.
pub fn run_of_config_file(path: &Path) -> Option<PathBuf> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let is_run_file = path.file_name().is_some_and(|name| name == TRAIN_CONFIG)
        && [MODEL_INFO, MODEL, CHECKPOINTS].iter().any(|name| dir.join(name).exists());
    is_run_file.then(|| dir.to_path_buf())
}

/// The PID of the training that holds the lock of the run in `dir` now (`unknown` when it wrote
/// none), or `None` when no training holds it. Only looks: it neither takes the lock (a shared
/// probe, which only a training's exclusive lock blocks) nor makes the file.
pub fn training_in(dir: &Path) -> Option<String> {
    let file = std::fs::File::open(dir.join(LOCK_FILE)).ok()?;
    match file.try_lock_shared() {
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap_or_default();
            Some(if pid.trim().is_empty() { "unknown".into() } else { pid.trim().to_string() })
        }
        _ => None,
    }
}

/// Whether the run's settings (`train.json`) are in `dir`: what a resume reads.
pub fn has_settings(dir: &Path) -> bool {
    dir.join(TRAIN_CONFIG).is_file()
}

/// Whether the run in `dir` is finished: its final model verifies against its checksum (read
/// whole).
pub fn is_finished(dir: &Path) -> bool {
    crate::io::verify_sum(&dir.join(MODEL)).is_ok()
}

/// Whether an `--overwrite` is replacing the run in `dir`, or was killed doing so: something is
/// in `.previous-run` (a folder of the replaced run, or a user's entry by that name, which the
/// replacement refuses to touch).
pub fn is_replacing(dir: &Path) -> bool {
    dir.join(PREVIOUS_RUN).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_new_started_finished_or_replacing() {
        let dir = tempfile::tempdir().unwrap();
        let state = || RunState::of(dir.path());
        assert_eq!(state(), RunState { progress: RunProgress::New, has_settings: false, replacing: false });
        assert_eq!(RunState::of(&dir.path().join("missing")).progress, RunProgress::New);

        std::fs::write(dir.path().join(TRAIN_CONFIG), "{}").unwrap();
        assert_eq!(state(), RunState { progress: RunProgress::Started, has_settings: true, replacing: false });

        // A final model without its checksum, or with a wrong one, is no finished run.
        let model = dir.path().join(MODEL);
        std::fs::write(&model, b"weights").unwrap();
        assert_eq!(state().progress, RunProgress::Started);
        crate::io::write_sum(&model).unwrap();
        assert!(state().is_finished());
        std::fs::write(&model, b"weights, edited").unwrap();
        assert_eq!(state().progress, RunProgress::Started);
        crate::io::write_sum(&model).unwrap();
        assert!(state().is_finished());

        // Finished and replacing at once: killed after the new run's end, before the old was deleted.
        std::fs::create_dir(dir.path().join(PREVIOUS_RUN)).unwrap();
        assert_eq!(state(), RunState { progress: RunProgress::Finished, has_settings: true, replacing: true });
    }

    #[test]
    fn a_settings_file_is_a_runs_only_beside_what_a_run_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let settings = dir.path().join(TRAIN_CONFIG);
        std::fs::write(&settings, "{}").unwrap();
        // A copy of a run's settings, or a config file of that name, is no run.
        assert_eq!(run_of_config_file(&settings), None);
        std::fs::write(dir.path().join(MODEL_INFO), "{}").unwrap();
        assert_eq!(run_of_config_file(&settings), Some(dir.path().to_path_buf()));
        // Another name beside a run's files is a config file like any other.
        assert_eq!(run_of_config_file(&dir.path().join("config.json")), None);
        std::fs::remove_file(dir.path().join(MODEL_INFO)).unwrap();
        std::fs::create_dir(dir.path().join(CHECKPOINTS)).unwrap();
        assert_eq!(run_of_config_file(&settings), Some(dir.path().to_path_buf()));
    }

    #[test]
    fn a_training_in_a_directory_is_seen_by_its_lock_without_taking_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(training_in(dir.path()), None, "no lock file");
        let lock = dir.path().join(LOCK_FILE);
        std::fs::write(&lock, "4242\n").unwrap();
        assert_eq!(training_in(dir.path()), None, "a lock file no one holds");
        // Another looker's probe (a shared lock) is no training.
        let looker = std::fs::File::open(&lock).unwrap();
        looker.lock_shared().unwrap();
        assert_eq!(training_in(dir.path()), None);
        looker.unlock().unwrap();
        let held = std::fs::OpenOptions::new().read(true).write(true).open(&lock).unwrap();
        held.lock().unwrap();
        assert_eq!(training_in(dir.path()).as_deref(), Some("4242"));
        std::fs::write(&lock, "").unwrap();
        assert_eq!(training_in(dir.path()).as_deref(), Some("unknown"));
        held.unlock().unwrap();
        assert_eq!(training_in(dir.path()), None);
    }
}
