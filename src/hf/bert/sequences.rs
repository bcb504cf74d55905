//! The sequences an encoder is scored on: `[CLS] w_1 .. w_n [SEP]`, cut from a tokenised corpus.

use crate::data::{DataError, SplitProblem, TokenCache, Tokenizer, TokenizerProblem};

/// The special tokens of a BERT tokenizer that pseudo-perplexity needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertTokens {
    /// `[CLS]`, which opens every sequence.
    pub cls: u32,
    /// `[SEP]`, which closes every sequence (and separates documents in the token stream).
    pub sep: u32,
    /// `[MASK]`, which replaces each scored token in turn.
    pub mask: u32,
}

impl BertTokens {
    /// The ids of `[CLS]`, `[SEP]` and `[MASK]` in `tokenizer`; an error naming those it lacks.
    pub fn of(tokenizer: &Tokenizer) -> Result<Self, DataError> {
        let names = ["[CLS]", "[SEP]", "[MASK]"];
        let ids = names.map(|name| tokenizer.token_id(name));
        match ids {
            [Some(cls), Some(sep), Some(mask)] => Ok(Self { cls, sep, mask }),
            _ => {
                let missing: Vec<&str> =
                    names.iter().zip(ids).filter(|(_, id)| id.is_none()).map(|(n, _)| *n).collect();
                Err(DataError::Tokenizer(TokenizerProblem::NoBertTokens { missing: missing.join(", ") }))
            }
        }
    }
}

/// Up to `count` sequences of `seq_len` tokens (at least 3): `[CLS]`, then `seq_len - 2` tokens of
/// the corpus stream of `cache` (its documents one after another, each ended by `[SEP]`, as the
/// tokenizer marks them), then `[SEP]`. Consecutive sequences take consecutive, non-overlapping
/// stretches of the stream; fewer than `count` when the stream runs out.
///
/// # Errors
/// A `seq_len` below 3, or a stream shorter than one sequence.
pub fn encoder_sequences(
    cache: &TokenCache,
    tokens: BertTokens,
    seq_len: usize,
    count: usize,
) -> Result<Vec<Vec<u32>>, DataError> {
    if seq_len < 3 {
        return Err(DataError::Split(SplitProblem::EncoderSeqLen(seq_len)));
    }
    let body = (seq_len - 2) as u64;
    let available = (cache.n_tokens() / body) as usize;
    if available == 0 {
        return Err(DataError::Split(SplitProblem::EncoderTextTooShort { tokens: cache.n_tokens(), body, seq_len }));
    }
    let sequences = (0..count.min(available) as u64)
        .map(|index| {
            let mut sequence = vec![tokens.cls; seq_len];
            cache.read(index * body, &mut sequence[1..seq_len - 1]);
            sequence[seq_len - 1] = tokens.sep;
            sequence
        })
        .collect();
    Ok(sequences)
}
