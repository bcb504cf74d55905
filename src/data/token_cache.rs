//! The on-disk token cache: a corpus is tokenised once, then memory-mapped, so corpora larger than
//! RAM train and later runs start at once.
//!
//! A cache is a folder with `tokens.bin` (u32 little-endian; every document is followed by the
//! end-of-text id), `offsets.bin` (u64 little-endian; `n_docs + 1` token offsets of the document
//! starts) and `meta.json`. It is built in a temporary folder and renamed into place, so an
//! interrupted build never leaves a cache that loads.
//!
//! Pre-tokenised corpora (nanoGPT's and llm.c's `.bin` files) need no cache: their files are
//! mapped as they are ([`TokenCache::from_token_files`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data::token_file::TokenFile;
use crate::data::{DataError, Tokenizer};

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
}

/// Writes documents into a cache being built.
pub struct CacheWriter {
    tokens: BufWriter<File>,
    offsets: Vec<u64>,
    eot: u32,
    max_token: u32,
}

impl CacheWriter {
    /// Appends one document's tokens and the end-of-text token.
    pub fn push(&mut self, tokens: &[u32]) -> Result<(), DataError> {
        let io = |e: std::io::Error| DataError::Cache(e.to_string());
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
    /// A hash of what the cache was built from, the tokenizer and the files' content, not where
    /// the files are: two runs trained on the same data have the same fingerprint.
    pub fn content_fingerprint(&self) -> String {
        super::key_fingerprint(&self.meta.key)
    }

    /// Opens the cache in `dir` if it was built for `key`; otherwise builds it with `fill`, which
    /// pushes every document into the writer.
    pub fn open_or_build(
        dir: &Path,
        key: &str,
        eot: u32,
        fill: impl FnOnce(&mut CacheWriter) -> Result<(), DataError>,
    ) -> Result<Self, DataError> {
        if let Ok(cache) = Self::open(dir) {
            if cache.meta.key == key && cache.meta.max_token.is_some() {
                return Ok(cache);
            }
        }
        let io = |e: std::io::Error| DataError::Cache(format!("{}: {e}", dir.display()));
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io)?;
        let tmp = parent.join(format!(
            ".{}.building{}",
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io)?;
        let result = (|| {
            let file = File::create(tmp.join("tokens.bin")).map_err(io)?;
            let mut writer = CacheWriter { tokens: BufWriter::new(file), offsets: vec![0], eot, max_token: eot };
            fill(&mut writer)?;
            let n_docs = writer.offsets.len() - 1;
            let n_tokens = *writer.offsets.last().unwrap_or(&0);
            if n_docs == 0 {
                return Err(DataError::Corpus("the corpus has no text (no non-empty document)".into()));
            }
            let file = writer.tokens.into_inner().map_err(|e| io(e.into_error()))?;
            file.sync_all().map_err(io)?;
            let offsets: Vec<u8> = writer.offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
            std::fs::write(tmp.join("offsets.bin"), offsets).map_err(io)?;
            let meta = CacheMeta { key: key.to_string(), n_docs, n_tokens, max_token: Some(writer.max_token) };
            let json = serde_json::to_string_pretty(&meta).map_err(|e| DataError::Cache(e.to_string()))?;
            std::fs::write(tmp.join("meta.json"), json).map_err(io)?;
            let _ = std::fs::remove_dir_all(dir);
            std::fs::rename(&tmp, dir).map_err(io)
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result?;
        Self::open(dir)
    }

    /// Opens a cache folder.
    pub fn open(dir: &Path) -> Result<Self, DataError> {
        let bad = |what: String| DataError::Cache(format!("{}: {what}", dir.display()));
        let meta: CacheMeta = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json")).map_err(|e| bad(format!("meta.json: {e}")))?,
        )
        .map_err(|e| bad(format!("meta.json: {e}")))?;
        let raw = std::fs::read(dir.join("offsets.bin")).map_err(|e| bad(format!("offsets.bin: {e}")))?;
        let offsets: Vec<u64> = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let tokens = TokenFile::open_cache(&dir.join("tokens.bin")).map_err(|e| bad(format!("tokens.bin: {e}")))?;
        if offsets.len() != meta.n_docs + 1
            || offsets.last() != Some(&meta.n_tokens)
            || tokens.n_tokens() != meta.n_tokens
        {
            return Err(bad("the cache is inconsistent; delete the folder to rebuild it".into()));
        }
        Ok(Self { files: vec![tokens], firsts: vec![0], offsets, meta, dir: dir.to_path_buf() })
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
                    return Err(DataError::Corpus(format!(
                        "{}: token {position} is id {id}, outside the tokenizer's vocabulary of {vocab_size} ids: \
                         the file was made with another tokenizer; give that tokenizer's tokenizer.json with \
                         --tokenizer (GPT-2's for nanoGPT's and llm.c's GPT-2 data)",
                        path.display()
                    )));
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
            return Err(DataError::Corpus("no token file given".into()));
        }
        let meta =
            CacheMeta { key: key.to_string(), n_docs: offsets.len() - 1, n_tokens: total, max_token: Some(max_token) };
        let dir = paths[0].parent().unwrap_or(Path::new(".")).to_path_buf();
        Ok(Self { files, firsts, offsets, meta, dir })
    }

    /// Refuses a corpus that holds a token id of `vocab_size` or more (say, T5's `<extra_id_0>`
    /// written out in the text, for a model of t5-base's 32,000 ids); `tokenizer` names the token.
    pub fn check_vocabulary(&self, tokenizer: &Tokenizer, vocab_size: usize) -> Result<(), DataError> {
        match self.meta.max_token.filter(|&id| id as usize >= vocab_size) {
            Some(id) => Err(DataError::Corpus(format!(
                "the corpus holds token id {id} ({}), outside the model's vocabulary of {vocab_size}: use a model \
                 config with vocab_size > {id}, or remove that text from the corpus",
                tokenizer.token_text(id).unwrap_or_else(|| "?".into())
            ))),
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

/// A stable 64-bit FNV-1a hash, for cache folder names.
pub fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3))
}
