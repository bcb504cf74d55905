//! Why the local Hugging Face cache holds no snapshot of a model.

use std::path::PathBuf;

/// Why the local Hugging Face cache holds no snapshot of a model
/// ([`HfError::NotInCache`](super::HfError::NotInCache)).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc or message says what its fields are
pub enum CacheMiss {
    /// There is no cache to look in.
    #[error("no HF_HUB_CACHE, HF_HOME or home folder to find it in")]
    NoCache,
    /// The cache's path is not a folder.
    #[error("the cache {} is not a folder", .cache.display())]
    CacheNotAFolder { cache: PathBuf },
    /// The model's folder (`models--org--name`) is not in the cache.
    #[error("{} does not exist", .folder.display())]
    NoModelFolder { folder: PathBuf },
    /// A `refs/` file holding something other than a commit hash (its first 80 characters).
    #[error("{} holds `{holds}`, which is not a commit hash (40 hex digits)", .ref_file.display())]
    RefNotACommit { ref_file: PathBuf, holds: String },
    /// The revision names neither a ref file nor a snapshot.
    #[error("{} holds no {} and no snapshot of that commit", .folder.display(), .ref_file.display())]
    NoRef { folder: PathBuf, ref_file: PathBuf },
    /// The ref's commit has a snapshot without `config.json`.
    #[error("{} names commit `{commit}`, whose snapshot {} holds no config.json", .ref_file.display(), .snapshot.display())]
    EmptySnapshot { ref_file: PathBuf, commit: String, snapshot: PathBuf },
}
