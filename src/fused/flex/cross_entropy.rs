//! The language-modelling loss and its gradient in one parallel pass over the logits.

use rayon::prelude::*;

use super::exp::exp;
use super::lanes::{max, sum};

/// `logits: [tokens * vocab]`, `targets: [tokens]` -> `(mean of -log softmax(row)[target],
/// (softmax - onehot) / tokens)`.
///
/// # Panics
///
/// If a target is not below `vocab`.
pub(super) fn cross_entropy(logits: &[f32], targets: &[usize], vocab: usize) -> (f32, Vec<f32>) {
    let mut grad = logits.to_vec();
    let losses = into_gradient(&mut grad, targets, vocab, targets.len());
    (sum(&losses) / targets.len() as f32, grad)
}

/// Turns `rows: [targets.len() * vocab]` of logits into `(softmax - onehot) / tokens` in place,
/// one row per task, and returns each row's `-log softmax(row)[target]`.
///
/// `tokens` is the number of rows the loss averages over (this call may hold a part of them).
///
/// # Panics
///
/// If a target is not below `vocab`.
pub(super) fn into_gradient(rows: &mut [f32], targets: &[usize], vocab: usize, tokens: usize) -> Vec<f32> {
    let tokens = tokens as f32;
    rows.par_chunks_mut(vocab)
        .zip(targets.par_iter())
        .with_min_len(4)
        .map(|(row, &target)| {
            assert!(target < vocab, "cross_entropy: target {target} is not below the vocabulary size {vocab}");
            let max = max(row);
            // -log softmax(row)[target] as log-sum-exp minus the target's logit: finite however
            // small the target's probability (where exp underflows).
            let target_logit = row[target];
            row.iter_mut().for_each(|g| *g = exp(*g - max));
            let total = sum(row);
            let scale = 1.0 / (total * tokens);
            row.iter_mut().for_each(|g| *g *= scale);
            row[target] -= 1.0 / tokens;
            max + total.ln() - target_logit
        })
        .collect()
}
