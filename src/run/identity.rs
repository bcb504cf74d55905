//! What identifies the run in a directory, to tell whether a training replaced it meanwhile.

use std::path::Path;

use super::{MODEL, TRAIN_CONFIG};

/// The checksums of a run's settings and of its final model (`None` where absent, as in a Hugging
/// Face directory, which no training rewrites). A training that replaces or rewrites the run
/// changes it: compare it before and after long work on the run (an analysis, say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunIdentity([Option<String>; 2]);

impl RunIdentity {
    /// The identity of the run in `dir` now.
    pub fn of(dir: &Path) -> Self {
        let read = |name: &str| std::fs::read_to_string(crate::io::sum_path(&dir.join(name))).ok();
        Self([read(TRAIN_CONFIG), read(MODEL)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewritten_run_has_another_identity() {
        let dir = tempfile::tempdir().unwrap();
        let empty = RunIdentity::of(dir.path());
        assert_eq!(empty, RunIdentity::of(dir.path()));
        let model = dir.path().join(MODEL);
        std::fs::write(&model, b"weights").unwrap();
        crate::io::write_sum(&model).unwrap();
        let written = RunIdentity::of(dir.path());
        assert_ne!(written, empty);
        std::fs::write(&model, b"other weights").unwrap();
        crate::io::write_sum(&model).unwrap();
        assert_ne!(RunIdentity::of(dir.path()), written);
    }
}
