//! The on-disk token cache: a corpus is tokenised once, then memory-mapped, so corpora larger than
//! RAM train and later runs start at once.
//!
//! A cache is a folder with `tokens.bin` (u32 little-endian; every document is followed by the
//! end-of-text id), `offsets.bin` (u64 little-endian; `n_docs + 1` token offsets of the document
//! starts) and `meta.json`, each with a checksum (`<file>.sum`: CRC-32 and length) checked when
//! the cache is opened. It is built in a temporary folder and renamed into place, so an
//! interrupted build never leaves a cache that loads; a cache damaged since is rebuilt.
//!
//! Pre-tokenised corpora (nanoGPT's and llm.c's `.bin` files) need no cache: their files are
//! mapped as they are ([`TokenCache::from_token_files`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data::token_file::TokenFile;
use crate::data::{CacheProblem, CorpusProblem, DataError, Tokenizer, WholeCorpusProblem};

/// What a cache holds and what it was built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheMeta {
    /// Identifies the sources and the tokenizer; a different key means a different cache.
    pub key: String,
    /// Number of documents.
    pub n_docs: usize,
    /// Number of tokens, end-of-text tokens included.
    pub n_tokens: u64,
    /// The largest token id in the corpus (checked against the model's vocabulary; absent from
    /// caches written before it was recorded, which are rebuilt).
    #[serde(default)]
    pub max_token: Option<u32>,
}

/// A memory-mapped, tokenised corpus: one token stream over one or more files.
#[derive(Debug)]
pub struct TokenCache {
    files: Vec<TokenFile>,
    /// The stream position of each file's first token.
    firsts: Vec<u64>,
    offsets: Vec<u64>,
    meta: CacheMeta,
    dir: PathBuf,
    /// What the caller should be told: files skipped, a damaged cache rebuilt.
    warnings: Vec<String>,
}

/// Writes documents into a cache being built.
pub struct CacheWriter {
    /// The cache's folder, for errors.
    dir: PathBuf,
    tokens: BufWriter<File>,
    offsets: Vec<u64>,
    eot: u32,
    max_token: u32,
}

impl CacheWriter {
    /// Appends one document's tokens and the end-of-text token.
    pub fn push(&mut self, tokens: &[u32]) -> Result<(), DataError> {
        let io = |e: std::io::Error| cache_io(&self.dir, &e);
        for &token in tokens.iter().chain(std::iter::once(&self.eot)) {
            self.tokens.write_all(&token.to_le_bytes()).map_err(io)?;
            self.max_token = self.max_token.max(token);
        }
        let last = *self.offsets.last().unwrap_or(&0);
        self.offsets.push(last + tokens.len() as u64 + 1);
        Ok(())
    }
}

impl TokenCache {
    /// What the caller should be told of how the cache was made (files skipped, a damaged cache
    /// rebuilt), one warning per line: the library prints nothing.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Adds warnings about how the cache was made.
    pub(crate) fn warn(&mut self, warnings: impl IntoIterator<Item = String>) {
        self.warnings.extend(warnings);
    }

    /// A hash of what the cache was built from, the tokenizer and the files' content, not where
    /// the files are: two runs trained on the same data have the same fingerprint.
    pub fn content_fingerprint(&self) -> String {
        super::key_fingerprint(&self.meta.key)
    }

    /// Opens the cache in `dir` if it was built for `key`; otherwise builds it with `fill`, which
    /// pushes every document into the writer.
    ///
    /// A cache that fails [`open`](Self::open)'s checks (a file overwritten, cut short or missing,
    /// offsets out of order, a cache of an earlier version without checksums) is never used: one
    /// warning ([`warnings`](Self::warnings)) names it and the problem, and it is replaced by a new build.
    ///
    /// Several processes may share a cache folder. A build holds a lock (`.<name>.lock` beside
    /// `dir`), so a second process that wants the same cache waits and then opens the first one's
    /// instead of tokenising the corpus again (where the lock file cannot be made, as in a
    /// read-only folder, there is no waiting). Each builds in a folder of its own, opens its build
    /// there (the tokens are mapped, so they stay readable whatever becomes of the folder), then
    /// swaps it in for `dir`; a process that finds another's build already in place keeps its own
    /// mapping (the same key gives the same tokens).
    pub fn open_or_build(
        dir: &Path,
        key: &str,
        eot: u32,
        fill: impl FnOnce(&mut CacheWriter) -> Result<(), DataError>,
    ) -> Result<Self, DataError> {
        let _lock = build_lock(dir);
        let mut warnings = Vec::new();
        if dir.exists() {
            match Self::open(dir) {
                Ok(cache) if cache.meta.key == key => return Ok(cache),
                // Another key under the same folder name (a hash collision): rebuilt for this one.
                Ok(_) => {}
                Err(e) => warnings.push(format!("{e}; rebuilding the cache (tokenising the data again)")),
            }
        }
        let io = |e: std::io::Error| cache_io(dir, &e);
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io)?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        remove_stale_builds(parent, &name);
        let tmp = parent.join(format!(".{name}.building{}", std::process::id()));
        let old = parent.join(format!(".{name}.old{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io)?;
        let result = (|| {
            let file = File::create(tmp.join("tokens.bin")).map_err(io)?;
            let tokens = BufWriter::new(file);
            let mut writer = CacheWriter { dir: dir.to_path_buf(), tokens, offsets: vec![0], eot, max_token: eot };
            fill(&mut writer)?;
            let n_docs = writer.offsets.len() - 1;
            let n_tokens = *writer.offsets.last().unwrap_or(&0);
            if n_docs == 0 {
                return Err(DataError::Whole(WholeCorpusProblem::NoText));
            }
            let file = writer.tokens.into_inner().map_err(|e| io(e.into_error()))?;
            file.sync_all().map_err(io)?;
            let offsets: Vec<u8> = writer.offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
            crate::io::write_atomically(&tmp.join("offsets.bin"), &offsets).map_err(io)?;
            let meta = CacheMeta { key: key.to_string(), n_docs, n_tokens, max_token: Some(writer.max_token) };
            let json = serde_json::to_string_pretty(&meta).map_err(|e| io(e.into()))?;
            crate::io::write_atomically(&tmp.join("meta.json"), json.as_bytes()).map_err(io)?;
            // The checksums, once every file is complete: `open` checks the files against them.
            for file in CACHE_FILES {
                crate::io::write_sum(&tmp.join(file)).map_err(io)?;
            }
            // Opened (mapped) before the swap, so that no other process's swap can take it away.
            let mut cache = Self::open(&tmp)?;
            cache.dir = dir.to_path_buf();
            cache.warnings = warnings;
            if std::fs::rename(dir, &old).is_ok() {
                let _ = std::fs::remove_dir_all(&old);
            }
            if let Err(e) = std::fs::rename(&tmp, dir) {
                // Another process swapped its build in first: the same key, the same tokens.
                if !dir.is_dir() {
                    return Err(io(e));
                }
                let _ = std::fs::remove_dir_all(&tmp);
            }
            Ok(cache)
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    /// Whether `dir` is a cache folder this crate wrote (its three files and their checksums are
    /// there): a corpus walk skips it.
    pub fn is_cache_folder(dir: &Path) -> bool {
        CACHE_FILES.iter().all(|file| dir.join(file).is_file() && crate::io::sum_path(&dir.join(file)).is_file())
    }

    /// Opens a cache folder, checking it first: each file against the checksum written when it
    /// was built (`<file>.sum`, [`crate::io::verify_sum`]), the offsets in order from 0 to the
    /// token count, every token id at most the recorded largest. A cache that fails is an error
    /// naming the folder and the problem (a cache of an earlier version, without checksums, too).
    pub fn open(dir: &Path) -> Result<Self, DataError> {
        let bad = |problem| DataError::Cache { dir: dir.to_path_buf(), problem };
        let damaged =
            |file, error: &dyn std::fmt::Display| bad(CacheProblem::Damaged { file, error: error.to_string() });
        for file in CACHE_FILES {
            match crate::io::verify_sum(&dir.join(file)) {
                Ok(()) => {}
                Err(crate::io::SumError::NoSum) if !dir.join("meta.json.sum").exists() => {
                    return Err(bad(CacheProblem::NoChecksums))
                }
                Err(error) => return Err(bad(CacheProblem::Checksum { file, error })),
            }
        }
        let meta: CacheMeta = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json")).map_err(|e| damaged("meta.json", &e))?,
        )
        .map_err(|e| damaged("meta.json", &e))?;
        let Some(max_token) = meta.max_token else {
            return Err(bad(CacheProblem::NoMaxToken));
        };
        let raw = std::fs::read(dir.join("offsets.bin")).map_err(|e| damaged("offsets.bin", &e))?;
        if !raw.len().is_multiple_of(8) {
            let error = format!("{} bytes, not a whole number of 8-byte offsets", raw.len());
            return Err(damaged("offsets.bin", &error));
        }
        let offsets: Vec<u64> = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let tokens = TokenFile::open_cache(&dir.join("tokens.bin")).map_err(|e| damaged("tokens.bin", &e))?;
        if offsets.len() != meta.n_docs + 1 || tokens.n_tokens() != meta.n_tokens {
            return Err(bad(CacheProblem::CountsDisagree {
                docs: meta.n_docs,
                tokens: meta.n_tokens,
                offsets: offsets.len(),
                file_tokens: tokens.n_tokens(),
            }));
        }
        // Every document holds at least its end-of-text token.
        if offsets.first() != Some(&0)
            || offsets.last() != Some(&meta.n_tokens)
            || offsets.windows(2).any(|pair| pair[0] >= pair[1])
        {
            return Err(bad(CacheProblem::OffsetsNotRising { tokens: meta.n_tokens }));
        }
        if let Some((position, id)) = tokens.tokens().enumerate().find(|&(_, id)| id > max_token) {
            return Err(bad(CacheProblem::TokenAboveMax { position: position as u64, id, max_token }));
        }
        Ok(Self { files: vec![tokens], firsts: vec![0], offsets, meta, dir: dir.to_path_buf(), warnings: Vec::new() })
    }

    /// Maps pre-tokenised files ([`TokenFile::open`]: nanoGPT's or llm.c's `.bin`) as one corpus,
    /// keyed `key`. A document ends after each end-of-text token `eot`, and at the end of each
    /// file. A token id of `vocab_size` or more is an error naming the file: the file was made
    /// with another tokenizer. The folder ([`dir`](Self::dir)) is the first file's.
    pub fn from_token_files(paths: &[PathBuf], key: &str, eot: u32, vocab_size: usize) -> Result<Self, DataError> {
        let (mut files, mut firsts, mut offsets) = (Vec::new(), Vec::new(), vec![0u64]);
        let (mut total, mut max_token) = (0u64, 0u32);
        for path in paths {
            let file = TokenFile::open(path)?;
            let first = total;
            for (position, id) in file.tokens().enumerate() {
                if id as usize >= vocab_size {
                    let problem = CorpusProblem::TokenOutsideTokenizer { position: position as u64, id, vocab_size };
                    return Err(DataError::corpus(path, problem));
                }
                if id == eot {
                    offsets.push(first + position as u64 + 1);
                }
                max_token = max_token.max(id);
            }
            total += file.n_tokens();
            if offsets.last() != Some(&total) {
                offsets.push(total);
            }
            firsts.push(first);
            files.push(file);
        }
        if files.is_empty() {
            return Err(DataError::Whole(WholeCorpusProblem::NoTokenFiles));
        }
        let meta =
            CacheMeta { key: key.to_string(), n_docs: offsets.len() - 1, n_tokens: total, max_token: Some(max_token) };
        let dir = paths[0].parent().unwrap_or(Path::new(".")).to_path_buf();
        Ok(Self { files, firsts, offsets, meta, dir, warnings: Vec::new() })
    }

    /// Refuses a corpus that holds a token id of `vocab_size` or more (say, T5's `<extra_id_0>`
    /// written out in the text, for a model of t5-base's 32,000 ids); `tokenizer` names the token.
    pub fn check_vocabulary(&self, tokenizer: &Tokenizer, vocab_size: usize) -> Result<(), DataError> {
        match self.meta.max_token.filter(|&id| id as usize >= vocab_size) {
            Some(id) => Err(DataError::Whole(WholeCorpusProblem::OutsideModelVocabulary {
                id,
                text: tokenizer.token_text(id).unwrap_or_else(|| "?".into()),
                vocab_size,
            })),
            None => Ok(()),
        }
    }

    /// What the cache holds.
    pub fn meta(&self) -> &CacheMeta {
        &self.meta
    }

    /// Its folder (for pre-tokenised files, the first file's).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of documents.
    pub fn n_docs(&self) -> usize {
        self.meta.n_docs
    }

    /// Number of tokens, end-of-text tokens included.
    pub fn n_tokens(&self) -> u64 {
        self.meta.n_tokens
    }

    /// The token span `[start, end)` of document `doc`, its end-of-text token included.
    pub fn doc_span(&self, doc: usize) -> (u64, u64) {
        (self.offsets[doc], self.offsets[doc + 1])
    }

    /// Copies tokens `[start, start + out.len())` into `out`.
    pub fn read(&self, start: u64, out: &mut [u32]) {
        let (mut position, mut filled) = (start, 0);
        while filled < out.len() {
            let index = self.firsts.partition_point(|&first| first <= position) - 1;
            let file = &self.files[index];
            let offset = position - self.firsts[index];
            let take = (file.n_tokens().saturating_sub(offset) as usize).min(out.len() - filled);
            assert!(take > 0, "token {position} is beyond the corpus's {} tokens", self.meta.n_tokens);
            file.read(offset, &mut out[filled..filled + take]);
            filled += take;
            position += take as u64;
        }
    }
}

/// The lock of the cache folder `dir`'s builds, held until dropped; `None` when the lock file
/// cannot be made or locked (a read-only folder: the cache is then only read, or built unlocked).
fn build_lock(dir: &Path) -> Option<File> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let name = dir.file_name()?.to_string_lossy().into_owned();
    std::fs::create_dir_all(parent).ok()?;
    let file =
        File::options().create(true).truncate(false).write(true).open(parent.join(format!(".{name}.lock"))).ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Removes the half-built copies of cache `name` in `parent` (`.<name>.building<pid>`,
/// `.<name>.old<pid>`) that a process killed while building left behind: those of processes no
/// longer running (checked in `/proc`; where there is none, nothing is removed).
fn remove_stale_builds(parent: &Path, name: &str) {
    let proc = Path::new("/proc");
    let (Ok(entries), true) = (std::fs::read_dir(parent), proc.join("self").exists()) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let pid = [".building", ".old"]
            .iter()
            .find_map(|kind| file_name.strip_prefix(&format!(".{name}{kind}")))
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| pid != std::process::id() && !proc.join(pid.to_string()).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A cache's files, each with a `.sum` ([`crate::io::write_sum`]) beside it.
const CACHE_FILES: [&str; 3] = ["tokens.bin", "offsets.bin", "meta.json"];

/// A stable 64-bit FNV-1a hash, for cache folder names.
pub fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The disk refused a read or a write of the cache in `dir`.
fn cache_io(dir: &Path, error: &std::io::Error) -> DataError {
    DataError::Cache { dir: dir.to_path_buf(), problem: CacheProblem::Io(error.to_string()) }
}
