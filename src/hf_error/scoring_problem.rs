//! Why a masked LM cannot score the sequences it is given.

/// Why sequences cannot be scored by a masked LM ([`HfError::Scoring`](super::HfError::Scoring)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc or message says what its fields are
pub enum ScoringProblem {
    /// An empty list of sequences.
    #[error("no sequences to score")]
    NoSequences,
    /// A `[MASK]` id the model's vocabulary does not hold.
    #[error("the [MASK] id {mask} is outside the model's vocabulary of {vocab}")]
    MaskOutsideVocabulary { mask: u32, vocab: usize },
    /// Sequence `index` has fewer than its two special tokens and one to score.
    #[error("sequence {index} has {tokens} tokens; each needs [CLS], at least one token and [SEP]")]
    TooShort { index: usize, tokens: usize },
    /// Sequence `index` is longer than the model's positions.
    #[error("sequence {index} has {tokens} tokens, more than the {positions} positions of the model (max_position_embeddings)")]
    TooLong { index: usize, tokens: usize, positions: usize },
    /// Sequence `index` holds a token id the vocabulary does not.
    #[error("sequence {index} holds token id {id}, outside the model's vocabulary of {vocab}")]
    TokenOutsideVocabulary { index: usize, id: u32, vocab: usize },
}
