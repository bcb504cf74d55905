//! What a run directory holds: new, started, finished, or being replaced ([`RunState`]). The
//! start and resume rules, sweeps and `--overwrite` ask these questions here. Each is also
//! answered alone, for callers that need no more: whether a run is finished reads its final
//! model whole (for its checksum), the others only look for files. Checks that need more than
//! the answer (which of a run's files are missing or damaged, what else a folder holds) read the
//! files themselves (`train::RunDir`, the loaders in `run_model.rs`).

use std::path::Path;

use super::{CHECKPOINTS, MODEL, PREVIOUS_RUN, TRAIN_CONFIG};

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
}
