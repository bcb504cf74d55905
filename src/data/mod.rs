//! Data: tokenizers, corpora (text, JSON lines and JSON, gzip-compressed or not, Parquet with the
//! `parquet` feature, nanoGPT's and llm.c's pre-tokenised `.bin` files, the built-in generated
//! corpus), an on-disk memory-mapped token cache, and packing into fixed-length sequences for
//! Burn's `DataLoader`.

mod batch;
mod byte_readers;
mod cache_problem;
mod corpus;
mod data_error;
mod json_lines;
#[cfg(feature = "parquet")]
mod parquet;
mod sequences;
mod synthetic;
mod token_cache;
mod token_file;
mod tokenizer;
mod tokenizing;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use batch::{LmBatch, LmBatcher};
pub use cache_problem::CacheProblem;
pub use corpus::{corpus_files, file_format, read_documents, read_documents_counting, CorpusFiles, FileFormat};
pub use data_error::{
    CorpusProblem, DataError, JsonHint, NotParquet, Place, SplitProblem, Spot, TokenLayoutProblem, TokenizerProblem,
    WholeCorpusProblem,
};
pub use json_lines::DEFAULT_TEXT_FIELD;
pub use sequences::{split_documents, SequenceDataset, SequenceMode, TokenWindow};
pub use synthetic::builtin_documents;
pub use token_cache::{stable_hash, CacheMeta, CacheWriter, TokenCache};
pub use token_file::{is_token_file, TokenFile, TokenLayout, LLMC_MAGIC};
pub use tokenizer::Tokenizer;
pub use tokenizing::TokenizeProgress;

/// Where the training text comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum CorpusSource {
    /// The built-in generated corpus ([`builtin_documents`]).
    Builtin {
        /// Number of documents.
        n_docs: usize,
        /// Generator seed.
        seed: u64,
    },
    /// Corpus files and folders ([`corpus_files`]): text, JSON lines or JSON (gzip-compressed or
    /// not), Parquet, or pre-tokenised `.bin` files (never mixed with the others).
    Files {
        /// The files and folders.
        paths: Vec<PathBuf>,
        /// The JSON field or Parquet column that holds each document's text ([`DEFAULT_TEXT_FIELD`]
        /// unless set).
        text_field: String,
    },
}

impl CorpusSource {
    /// Corpus files and folders whose JSON and Parquet documents keep their text in `text`.
    pub fn files(paths: Vec<PathBuf>) -> Self {
        CorpusSource::Files { paths, text_field: DEFAULT_TEXT_FIELD.to_string() }
    }
}

/// Where a token cache's key turns from the content (tokenizer, sizes and checksums) to the files' paths.
pub(crate) const PATHS_SEPARATOR: &str = "\npaths: ";

/// The token cache's key of `source` and `tokenizer`, and the corpus files. The key holds first what
/// decides the tokens, by content: the tokenizer ([`Tokenizer::identity`]: a `tokenizer.json` by its
/// size and CRC-32), the built-in corpus's parameters, each file's size and CRC-32 (every file is
/// read whole), the text field; then ([`PATHS_SEPARATOR`]) the files' canonical paths.
fn corpus_key(source: &CorpusSource, tokenizer: &Tokenizer) -> Result<(String, CorpusFiles), DataError> {
    let mut key = format!("tokenizer={}", tokenizer.identity());
    let listing = match source {
        CorpusSource::Builtin { n_docs, seed } => {
            key.push_str(&format!(";builtin={n_docs}:{seed}"));
            CorpusFiles::default()
        }
        CorpusSource::Files { paths, text_field } => {
            let listing = corpus_files(paths)?;
            refuse_mixed(&listing.files)?;
            let mut places = String::new();
            for file in &listing.files {
                let (checksum, len) = crate::io::file_crc32(file).map_err(|e| DataError::unreadable(file, &e))?;
                let absolute = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
                key.push_str(&format!(";{len}:crc32={checksum:08x}"));
                places.push_str(&format!(";{}", absolute.display()));
            }
            if text_field != DEFAULT_TEXT_FIELD {
                key.push_str(&format!(";text_field={text_field}"));
            }
            key.push_str(&format!("{PATHS_SEPARATOR}{places}"));
            listing
        }
    };
    Ok((key, listing))
}

/// The fingerprint of a cache key's content part (not where the files are).
pub(crate) fn key_fingerprint(key: &str) -> String {
    let content = key.split(PATHS_SEPARATOR).next().unwrap_or_default();
    format!("{:016x}", stable_hash(content))
}

/// The content fingerprint that [`tokenize_corpus`] would give `source`'s cache
/// ([`TokenCache::content_fingerprint`]), without tokenising: every file is read (checksummed).
/// Equal fingerprints mean the same tokens; a file changed in place (even to the same size) changes it.
pub fn corpus_fingerprint(source: &CorpusSource, tokenizer: &Tokenizer) -> Result<String, DataError> {
    Ok(key_fingerprint(&corpus_key(source, tokenizer)?.0))
}

/// Tokenises `source` into a cache under `cache_root`, reused when the content (its key: the
/// files' sizes and checksums, every file read once per call) and the tokenizer are unchanged.
/// Pre-tokenised `.bin` files are mapped as they are ([`TokenCache::from_token_files`]). Files and
/// folders reached twice are read once, each skipped one named in the cache's
/// [`warnings`](TokenCache::warnings).
pub fn tokenize_corpus(
    source: &CorpusSource,
    tokenizer: &Tokenizer,
    cache_root: &Path,
) -> Result<TokenCache, DataError> {
    tokenize_corpus_with_progress(source, tokenizer, cache_root, &mut |_| {})
}

/// [`tokenize_corpus`], telling `progress` how far a build has come every few seconds (and at the
/// end of a build that took that long). The documents are read on a thread of their own while
/// the calling thread encodes on every core of its rayon pool: the cache is the same byte for
/// byte on any number of threads.
pub fn tokenize_corpus_with_progress(
    source: &CorpusSource,
    tokenizer: &Tokenizer,
    cache_root: &Path,
    progress: &mut dyn FnMut(TokenizeProgress),
) -> Result<TokenCache, DataError> {
    let (key, CorpusFiles { files, skipped }) = corpus_key(source, tokenizer)?;
    let mut cache = if files.first().is_some_and(|file| is_token_file(file)) {
        TokenCache::from_token_files(&files, &key, tokenizer.eot(), tokenizer.vocab_size())?
    } else {
        build_cache(&files, &key, source, tokenizer, cache_root, progress)?
    };
    cache.warn(skipped);
    Ok(cache)
}

/// Tokenises the text `files` of `source` (keyed `key`) into a cache under `cache_root`, or opens
/// the one already built for them.
fn build_cache(
    files: &[PathBuf],
    key: &str,
    source: &CorpusSource,
    tokenizer: &Tokenizer,
    cache_root: &Path,
    progress: &mut dyn FnMut(TokenizeProgress),
) -> Result<TokenCache, DataError> {
    let dir = cache_root.join(format!("{:016x}", stable_hash(key)));
    let mut read_warnings = Vec::new();
    let mut cache = TokenCache::open_or_build(&dir, key, tokenizer.eot(), |writer| {
        read_warnings = tokenizing::write_tokens(writer, files, source, tokenizer, progress)?;
        // A file rewritten while it was read would leave tokens under the old content's key.
        if corpus_key(source, tokenizer)?.0 != *key {
            return Err(DataError::Whole(WholeCorpusProblem::ChangedWhileRead));
        }
        Ok(())
    })?;
    cache.warn(read_warnings);
    Ok(cache)
}

/// Refuses token files (`.bin`) beside text or JSON: a corpus is tokenised here or was tokenised before.
fn refuse_mixed(files: &[PathBuf]) -> Result<(), DataError> {
    let tokens = files.iter().find(|file| is_token_file(file));
    match (tokens, files.iter().find(|file| !is_token_file(file))) {
        (Some(tokens), Some(text)) => {
            Err(DataError::Whole(WholeCorpusProblem::MixedTokensAndText { tokens: tokens.clone(), text: text.clone() }))
        }
        _ => Ok(()),
    }
}

/// Train and validation sequences of `seq_len + 1` tokens from a tokenised corpus, split by
/// document ([`split_documents`]) and made as `mode` says.
pub fn train_valid_datasets(
    cache: Arc<TokenCache>,
    seq_len: usize,
    valid_fraction: f64,
    seed: u64,
    mode: SequenceMode,
) -> Result<(SequenceDataset, SequenceDataset), DataError> {
    use burn::data::dataset::Dataset;
    let (train_docs, valid_docs) = split_documents(cache.n_docs(), valid_fraction, seed)?;
    let train = SequenceDataset::with_mode(cache.clone(), &train_docs, seq_len, mode);
    let valid = SequenceDataset::with_mode(cache, &valid_docs, seq_len, mode);
    // The fraction moves documents between the splits: the advice fits the split that is short.
    for (split, set) in [("training", &train), ("validation", &valid)] {
        if set.is_empty() {
            return Err(DataError::Split(SplitProblem::SplitTooShort {
                split,
                tokens: set.n_tokens(),
                seq_len,
                valid_fraction,
            }));
        }
    }
    Ok((train, valid))
}
