//! Masked-token pseudo-perplexity (Salazar et al. 2020, "Masked Language Model Scoring"), the
//! performance measure of a masked LM, and its change when each encoder layer is removed (the
//! paper's equation 1, `dP(l) = P_pruned(l) - P_original`, for a Post-LN encoder).
//!
//! Each token of `[CLS] w_1 .. w_n [SEP]` but the two special ones is replaced by `[MASK]` in
//! turn and scored with every other token visible:
//! `PPPL = exp(-(1/N) sum_t log P(w_t | W without t))` over all `N` scored tokens.

use std::collections::BTreeMap;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use serde::Serialize;

use super::model::BertForMaskedLm;
use crate::hf::{HfError, ScoringProblem};

/// Tokens per forward pass: the masked copies of the sequences are batched up to this many.
const TOKENS_PER_PASS: usize = 4096;

/// The pseudo-perplexity of `sequences` under `model` with the layers `skip` (1-based) removed.
///
/// Each sequence is `[CLS] w_1 .. w_n [SEP]` (at least one token between), as the tokenizer's
/// post-processor adds them; its first and last tokens are never masked nor counted.
/// `mask_token` is the `[MASK]` id. The masked copies are scored in batches of up to
/// 4096 tokens, and the head is applied at the masked positions only.
///
/// # Errors
/// No sequences, a sequence of fewer than 3 tokens or longer than the model's positions, a token
/// id (or `mask_token`) outside the vocabulary, a layer the model does not have.
pub fn pseudo_perplexity(
    model: &BertForMaskedLm,
    sequences: &[Vec<u32>],
    mask_token: u32,
    skip: &[usize],
) -> Result<f64, HfError> {
    let (log_likelihood, tokens) = pseudo_log_likelihood(model, sequences, mask_token, skip)?;
    Ok((-log_likelihood / tokens as f64).exp())
}

/// `sum_t log P(w_t | W without t)` over the scored tokens of `sequences`, and their number
/// (the arguments and errors of [`pseudo_perplexity`]).
pub fn pseudo_log_likelihood(
    model: &BertForMaskedLm,
    sequences: &[Vec<u32>],
    mask_token: u32,
    skip: &[usize],
) -> Result<(f64, usize), HfError> {
    check_sequences(model, sequences, mask_token)?;
    model.check_layers(skip)?;
    let device = model.embeddings.word_embeddings.weight.device();
    // Copies of equal length go through the encoder together: one copy per scored position.
    let mut by_length: BTreeMap<usize, Vec<(&[u32], usize)>> = BTreeMap::new();
    for sequence in sequences {
        let copies = (1..sequence.len() - 1).map(|position| (sequence.as_slice(), position));
        by_length.entry(sequence.len()).or_default().extend(copies);
    }
    let (mut total, mut count) = (0.0, 0);
    for (length, copies) in by_length {
        for batch in copies.chunks((TOKENS_PER_PASS / length).max(1)) {
            let rows = batch.len();
            let mut ids = Vec::with_capacity(rows * length);
            for &(sequence, position) in batch {
                ids.extend(
                    sequence.iter().enumerate().map(|(i, &id)| if i == position { mask_token } else { id } as i64),
                );
            }
            let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows, length]), &device);
            let hidden = model.encode(tokens, skip)?; // [rows, length, hidden]
            let width = hidden.dims()[2];
            // Row r's state at its masked position: row r * length + position of the flattened states.
            let at_mask: Vec<i64> = batch.iter().enumerate().map(|(r, &(_, p))| (r * length + p) as i64).collect();
            let at_mask = Tensor::<1, Int>::from_data(TensorData::new(at_mask, [rows]), &device);
            let masked = hidden.reshape([rows * length, width]).select(0, at_mask); // [rows, hidden]
            let log_probs = log_softmax(model.masked_lm_logits(masked), 1); // [rows, vocab]
            let targets: Vec<i64> = batch.iter().map(|&(sequence, p)| sequence[p] as i64).collect();
            let targets = Tensor::<2, Int>::from_data(TensorData::new(targets, [rows, 1]), &device);
            total += log_probs.gather(1, targets).sum().into_scalar::<f64>(); // of [rows, 1]
            count += rows;
        }
    }
    Ok((total, count))
}

/// An error unless `sequences` can be scored by `model`.
fn check_sequences(model: &BertForMaskedLm, sequences: &[Vec<u32>], mask_token: u32) -> Result<(), HfError> {
    let vocab = model.vocab_size();
    let bad = |problem| Err(HfError::Scoring(problem));
    if sequences.is_empty() {
        return bad(ScoringProblem::NoSequences);
    }
    if mask_token as usize >= vocab {
        return bad(ScoringProblem::MaskOutsideVocabulary { mask: mask_token, vocab });
    }
    for (index, sequence) in sequences.iter().enumerate() {
        let tokens = sequence.len();
        if tokens < 3 {
            return bad(ScoringProblem::TooShort { index, tokens });
        }
        if tokens > model.max_positions() {
            return bad(ScoringProblem::TooLong { index, tokens, positions: model.max_positions() });
        }
        if let Some(&id) = sequence.iter().find(|&&id| id as usize >= vocab) {
            return bad(ScoringProblem::TokenOutsideVocabulary { index, id, vocab });
        }
    }
    Ok(())
}

/// Pseudo-perplexity of the full encoder and with each of some layers removed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerRemoval {
    /// Sequences scored.
    pub sequences: usize,
    /// Tokens scored (all but `[CLS]` and `[SEP]`).
    pub scored_tokens: usize,
    /// Pseudo-perplexity of the full model.
    pub pseudo_perplexity: f64,
    /// The layers removed one at a time (1-based).
    pub removed_layers: Vec<usize>,
    /// Pseudo-perplexity with each of `removed_layers` removed.
    pub pseudo_perplexity_without: Vec<f64>,
    /// `dP(l) = PPPL_pruned(l) - PPPL` for each of `removed_layers`.
    pub pseudo_perplexity_drop: Vec<f64>,
}

/// The pseudo-perplexity of `sequences` (as [`pseudo_perplexity`] takes them) with the full
/// model and with each of `layers` (1-based; empty: every layer) removed one at a time.
///
/// `progress` is called after each evaluation with `(done, total)`.
pub fn bert_layer_removal(
    model: &BertForMaskedLm,
    sequences: &[Vec<u32>],
    mask_token: u32,
    layers: &[usize],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LayerRemoval, HfError> {
    model.check_layers(layers)?;
    let layers: Vec<usize> = if layers.is_empty() { (1..=model.n_layers()).collect() } else { layers.to_vec() };
    let (log_likelihood, scored_tokens) = pseudo_log_likelihood(model, sequences, mask_token, &[])?;
    let full = (-log_likelihood / scored_tokens as f64).exp();
    progress(1, layers.len() + 1);
    let mut without = Vec::with_capacity(layers.len());
    for (done, &layer) in layers.iter().enumerate() {
        without.push(pseudo_perplexity(model, sequences, mask_token, &[layer])?);
        progress(done + 2, layers.len() + 1);
    }
    Ok(LayerRemoval {
        sequences: sequences.len(),
        scored_tokens,
        pseudo_perplexity: full,
        pseudo_perplexity_drop: without.iter().map(|p| p - full).collect(),
        pseudo_perplexity_without: without,
        removed_layers: layers,
    })
}
