//! Training sequences from a split's documents: packed into fixed-length windows, or one per
//! document, truncated and padded (the paper authors' mode); and the validation split by document.

use std::sync::Arc;

use burn::data::dataset::{Dataset, DatasetError};
use serde::{Deserialize, Serialize};

use super::token_cache::TokenCache;
use super::{DataError, SplitProblem};
use crate::seed::splitmix64;

/// One training sequence: `seq_len + 1` tokens (inputs are the first `seq_len`, targets the last),
/// of which the first `real` are the data's and the rest padding, never predicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenWindow {
    /// The tokens.
    pub tokens: Vec<u32>,
    /// How many leading tokens are real (the rest pad the window): `real - 1` targets count.
    pub real: usize,
}

impl TokenWindow {
    /// A window whose every token is real (packed sequences).
    pub fn full(tokens: Vec<u32>) -> Self {
        let real = tokens.len();
        Self { tokens, real }
    }

    /// The targets that count: the real tokens after the first.
    pub fn targets(&self) -> usize {
        self.real.saturating_sub(1)
    }
}

/// How a split's documents become sequences of `seq_len + 1` tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SequenceMode {
    /// Documents are concatenated (each ends with its end-of-text token) and cut into consecutive
    /// windows that overlap by one token: every position is a target once, none is padding.
    #[default]
    Pack,
    /// Each document is its own sequence: cut after `seq_len + 1` tokens (the rest of a longer
    /// document is never read), padded to the length when shorter; the padding is masked from the
    /// loss and from the token counts (the training script of the paper's authors).
    Truncate,
}

impl SequenceMode {
    /// The mode's name as the command line and config files write it.
    pub fn name(self) -> &'static str {
        match self {
            SequenceMode::Pack => "pack",
            SequenceMode::Truncate => "truncate",
        }
    }
}

/// Splits documents `0..n_docs` into train and validation sets: each document goes to validation
/// with probability `valid_fraction`, decided by a hash of `(seed, document)`, so the split is
/// stable and independent of the documents' order. Both sets are non-empty.
pub fn split_documents(n_docs: usize, valid_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>), DataError> {
    if !(valid_fraction > 0.0 && valid_fraction < 1.0) {
        return Err(DataError::Split(SplitProblem::BadFraction(valid_fraction)));
    }
    if n_docs < 2 {
        return Err(DataError::Split(SplitProblem::TooFewDocuments(n_docs)));
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

/// The sequences of a split's documents ([`SequenceMode`]): windows of `seq_len + 1` tokens read
/// from the memory-mapped cache on demand.
#[derive(Debug)]
pub struct SequenceDataset {
    cache: Arc<TokenCache>,
    /// Token spans `[start, end)` in the cache: packed, adjacent documents merged; truncated, one
    /// per document that has a target (at least two tokens).
    spans: Vec<(u64, u64)>,
    /// Packed: the position of each span's first token in the concatenated stream.
    starts: Vec<u64>,
    /// Tokens in the sequences: packed, the whole stream; truncated, the real tokens read.
    total: u64,
    seq_len: usize,
    mode: SequenceMode,
    /// Sequences kept (the first ones; [`holding_targets`](Self::holding_targets)), `None`: all.
    limit: Option<usize>,
}

impl SequenceDataset {
    /// Packs the given documents of `cache` into windows of `seq_len + 1` tokens.
    pub fn new(cache: Arc<TokenCache>, docs: &[usize], seq_len: usize) -> Self {
        Self::with_mode(cache, docs, seq_len, SequenceMode::Pack)
    }

    /// The given documents of `cache` as sequences of `seq_len + 1` tokens, made as `mode` says.
    pub fn with_mode(cache: Arc<TokenCache>, docs: &[usize], seq_len: usize, mode: SequenceMode) -> Self {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for &doc in docs {
            let (start, end) = cache.doc_span(doc);
            match (mode, spans.last_mut()) {
                (SequenceMode::Pack, Some(last)) if last.1 == start => last.1 = end,
                // A document of its end-of-text token alone has nothing to predict.
                (SequenceMode::Truncate, _) if end - start < 2 => {}
                _ => spans.push((start, end)),
            }
        }
        let mut starts = Vec::with_capacity(spans.len());
        let mut total = 0;
        for &(start, end) in &spans {
            starts.push(total);
            total += match mode {
                SequenceMode::Pack => end - start,
                SequenceMode::Truncate => (end - start).min(seq_len as u64 + 1),
            };
        }
        Self { cache, spans, starts, total, seq_len, mode, limit: None }
    }

    /// Tokens of the documents' sequences, a limit aside: packed, the concatenated stream;
    /// truncated, their real tokens (what truncation drops and the padding not counted).
    pub fn n_tokens(&self) -> u64 {
        self.total
    }

    /// Targets (predicted tokens) in the sequences: packed, `len() * seq_len`; truncated, each
    /// sequence's real tokens but its first.
    pub fn n_targets(&self) -> u64 {
        match self.mode {
            SequenceMode::Pack => self.len() as u64 * self.seq_len as u64,
            SequenceMode::Truncate => self.spans[..self.len()].iter().map(|&span| self.span_targets(span)).sum(),
        }
    }

    /// The targets of a document's truncated sequence.
    fn span_targets(&self, (start, end): (u64, u64)) -> u64 {
        (end - start).min(self.seq_len as u64 + 1) - 1
    }

    /// Tokens of the documents that truncation leaves unread (0 when packed).
    pub fn truncated_tokens(&self) -> u64 {
        match self.mode {
            SequenceMode::Pack => 0,
            SequenceMode::Truncate => self.spans.iter().map(|(start, end)| end - start).sum::<u64>() - self.total,
        }
    }

    /// The first sequences that hold at least `targets` targets (a fixed validation subset,
    /// whatever the batch size); an error when all of them hold fewer.
    pub fn holding_targets(mut self, targets: u64) -> Result<Self, DataError> {
        let available = self.n_targets();
        if targets > available {
            return Err(DataError::Split(SplitProblem::TooFewValidTokens {
                asked: targets,
                available,
                sequences: self.len(),
                seq_len: self.seq_len,
            }));
        }
        let keep = match self.mode {
            SequenceMode::Pack => targets.div_ceil(self.seq_len as u64) as usize,
            SequenceMode::Truncate => {
                let mut sum = 0;
                1 + self
                    .spans
                    .iter()
                    .position(|&span| {
                        sum += self.span_targets(span);
                        sum >= targets
                    })
                    .unwrap_or(0)
            }
        };
        self.limit = Some(keep);
        Ok(self)
    }

    /// The sequence length (each window has one more token).
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// How the documents became sequences.
    pub fn mode(&self) -> SequenceMode {
        self.mode
    }

    /// Window `index`: packed, stream tokens `[index * seq_len, index * seq_len + seq_len + 1)`;
    /// truncated, the first `seq_len + 1` tokens of the `index`-th document, padded with token 0
    /// (never a target and, coming after every real token, never attended to by one).
    pub fn window(&self, index: usize) -> TokenWindow {
        match self.mode {
            SequenceMode::Pack => self.packed_window(index),
            SequenceMode::Truncate => {
                let (start, end) = self.spans[index];
                let real = ((end - start) as usize).min(self.seq_len + 1);
                let mut tokens = vec![0u32; self.seq_len + 1];
                self.cache.read(start, &mut tokens[..real]);
                TokenWindow { tokens, real }
            }
        }
    }

    fn packed_window(&self, index: usize) -> TokenWindow {
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
        TokenWindow::full(tokens)
    }
}

impl Dataset<TokenWindow> for SequenceDataset {
    fn get(&self, index: usize) -> Result<TokenWindow, DatasetError> {
        assert!(index < self.len(), "window {index} out of range: the dataset has {}", self.len());
        Ok(self.window(index))
    }

    fn len(&self) -> usize {
        let all = match self.mode {
            SequenceMode::Pack if self.total > self.seq_len as u64 => ((self.total - 1) / self.seq_len as u64) as usize,
            SequenceMode::Pack => 0,
            SequenceMode::Truncate => self.spans.len(),
        };
        self.limit.map_or(all, |limit| limit.min(all))
    }
}
