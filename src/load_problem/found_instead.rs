//! What a directory without a run's `model.json` is, for an error: not a folder, a folder of
//! runs, or something else.

use std::path::PathBuf;

/// What a directory given as a run, but without `model.json`, is instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundInstead {
    /// No folder at all.
    NotAFolder {
        /// The path given.
        dir: PathBuf,
    },
    /// A folder of runs (a sweep's `<scheme>/seed-<n>`, or runs side by side): `run` is the first.
    HoldsRuns {
        /// The folder given.
        dir: PathBuf,
        /// The first run inside it, by name.
        run: PathBuf,
    },
    /// A folder of something else.
    Other {
        /// The folder given.
        dir: PathBuf,
    },
}

impl std::fmt::Display for FoundInstead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAFolder { dir } => write!(f, "{} is not a folder", dir.display()),
            Self::HoldsRuns { dir, run } => {
                write!(f, "{} holds runs: give one of them, e.g. {}", dir.display(), run.display())
            }
            Self::Other { dir } => write!(f, "is {} a run directory of the train example?", dir.display()),
        }
    }
}
