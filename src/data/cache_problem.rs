//! Why the token cache (`--cache-dir`, or `.token-cache` beside a run) cannot be used: the
//! problem of a [`DataError::Cache`](super::DataError::Cache).

use std::path::PathBuf;

/// Why the token cache cannot be written or read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum CacheProblem {
    /// The disk refused a read or a write: `0` says why.
    #[error("{0}")]
    Io(String),
    /// A cache from a version of this crate that wrote no checksums.
    #[error("written by an earlier version, without checksums")]
    NoChecksums,
    /// A cache from a version of this crate that recorded no largest token.
    #[error("written by an earlier version (meta.json has no max_token)")]
    NoMaxToken,
    /// One of its files, `file`, fails its checksum.
    #[error("{file}: {error}")]
    Checksum { file: &'static str, error: crate::io::SumError },
    /// One of its files, `file`, is damaged or unreadable: `error` says how.
    #[error("{file}: {error}")]
    Damaged { file: &'static str, error: String },
    /// `meta.json` and the files disagree on the counts.
    #[error(
        "meta.json says {docs} documents and {tokens} tokens, but offsets.bin has {offsets} offsets and tokens.bin \
         {file_tokens} tokens"
    )]
    CountsDisagree { docs: usize, tokens: u64, offsets: usize, file_tokens: u64 },
    /// The document offsets do not rise from 0 to `tokens`.
    #[error("offsets.bin: the document offsets do not rise from 0 to the {tokens} tokens")]
    OffsetsNotRising { tokens: u64 },
    /// Token `position` is `id`, above the largest that `meta.json` records.
    #[error("tokens.bin: token {position} is id {id}, above the largest recorded in meta.json ({max_token})")]
    TokenAboveMax { position: u64, id: u32, max_token: u32 },
    /// No folder can be at `--cache-dir`.
    #[error("{0}; give --cache-dir a folder for the token cache")]
    NoFolder(crate::io::FolderProblem),
    /// `--cache-dir` is the run directory `run`, or inside it.
    #[error(
        "it is the run directory {} or inside it, which holds the run alone; give another --cache-dir, or leave \
         --cache-dir unset (the cache then goes beside the run, in .token-cache)",
        .run.display()
    )]
    InRunDirectory { run: PathBuf },
}
