//! Packing documents into fixed-length training sequences, with a validation split by document.

use std::sync::Arc;

use burn::data::dataset::{Dataset, DatasetError};

use super::token_cache::TokenCache;
use super::DataError;
use crate::seed::splitmix64;

/// One training sequence: `seq_len + 1` tokens (inputs are the first `seq_len`, targets the last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenWindow {
    /// The tokens.
    pub tokens: Vec<u32>,
}

/// Splits documents `0..n_docs` into train and validation sets: each document goes to validation
/// with probability `valid_fraction`, decided by a hash of `(seed, document)`, so the split is
/// stable and independent of the documents' order. Both sets are non-empty.
pub fn split_documents(n_docs: usize, valid_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>), DataError> {
    if !(valid_fraction > 0.0 && valid_fraction < 1.0) {
        return Err(DataError::Split(format!("the validation fraction must be in (0, 1), got {valid_fraction}")));
    }
    if n_docs < 2 {
        return Err(DataError::Split(format!(
            "the corpus has {n_docs} document(s); a train/validation split needs at least 2 \
             (text files are split into documents at blank lines, token files after each end-of-text token)"
        )));
    }
    let unit = |doc: usize| (splitmix64(seed ^ splitmix64(doc as u64)) >> 11) as f64 / (1u64 << 53) as f64;
    let (mut valid, mut train): (Vec<usize>, Vec<usize>) = (0..n_docs).partition(|&doc| unit(doc) < valid_fraction);
    if valid.is_empty() {
        let doc = (0..n_docs).min_by(|&a, &b| unit(a).total_cmp(&unit(b))).unwrap_or(0);
        train.retain(|&d| d != doc);
        valid.push(doc);
    } else if train.is_empty() {
        train.push(valid.pop().unwrap_or(0));
    }
    Ok((train, valid))
}

/// The documents of a split, concatenated (each ends with its end-of-text token) and cut into
/// consecutive windows of `seq_len + 1` tokens that overlap by one, so every token is a target once.
#[derive(Debug)]
pub struct PackedDataset {
    cache: Arc<TokenCache>,
    /// Token spans `[start, end)` in the cache, adjacent documents merged.
    spans: Vec<(u64, u64)>,
    /// Position of each span's first token in the concatenated stream.
    starts: Vec<u64>,
    total: u64,
    seq_len: usize,
}

impl PackedDataset {
    /// Packs the given documents of `cache` into windows of `seq_len + 1` tokens.
    pub fn new(cache: Arc<TokenCache>, docs: &[usize], seq_len: usize) -> Self {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for &doc in docs {
            let (start, end) = cache.doc_span(doc);
            match spans.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => spans.push((start, end)),
            }
        }
        let mut starts = Vec::with_capacity(spans.len());
        let mut total = 0;
        for &(start, end) in &spans {
            starts.push(total);
            total += end - start;
        }
        Self { cache, spans, starts, total, seq_len }
    }

    /// Tokens in the concatenated stream.
    pub fn n_tokens(&self) -> u64 {
        self.total
    }

    /// The sequence length (each window has one more token).
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Window `index`: stream tokens `[index * seq_len, index * seq_len + seq_len + 1)`.
    pub fn window(&self, index: usize) -> TokenWindow {
        let mut tokens = vec![0u32; self.seq_len + 1];
        let mut position = index as u64 * self.seq_len as u64;
        let mut span = self.starts.partition_point(|&start| start <= position) - 1;
        let mut filled = 0;
        while filled < tokens.len() {
            let (start, end) = self.spans[span];
            let offset = position - self.starts[span];
            let take = ((end - start - offset) as usize).min(tokens.len() - filled);
            self.cache.read(start + offset, &mut tokens[filled..filled + take]);
            filled += take;
            position += take as u64;
            span += 1;
        }
        TokenWindow { tokens }
    }
}

impl Dataset<TokenWindow> for PackedDataset {
    fn get(&self, index: usize) -> Result<TokenWindow, DatasetError> {
        assert!(index < self.len(), "window {index} out of range: the dataset has {}", self.len());
        Ok(self.window(index))
    }

    fn len(&self) -> usize {
        if self.total > self.seq_len as u64 {
            ((self.total - 1) / self.seq_len as u64) as usize
        } else {
            0
        }
    }
}
