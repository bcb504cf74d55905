//! The language-modelling loss and its gradient in one parallel pass over the logits.

use rayon::prelude::*;

use super::exp::exp;
use super::lanes::{max, sum};

/// `logits: [tokens * vocab]`, `targets: [tokens]` -> `(mean of -log softmax(row)[target],
/// (softmax - onehot) / tokens)`. Each row's softmax is written straight into the gradient.
///
/// # Panics
///
/// If a target is not below `vocab`.
pub(super) fn cross_entropy(logits: &[f32], targets: &[usize], vocab: usize) -> (f32, Vec<f32>) {
    let tokens = targets.len() as f32;
    let mut grad = vec![0.0f32; logits.len()];
    let losses: Vec<f32> = grad
        .par_chunks_mut(vocab)
        .zip(logits.par_chunks(vocab))
        .zip(targets.par_iter())
        .with_min_len(4)
        .map(|((grad, logits), &target)| {
            assert!(target < vocab, "cross_entropy: target {target} is not below the vocabulary size {vocab}");
            let max = max(logits);
            grad.iter_mut().zip(logits).for_each(|(g, &l)| *g = exp(l - max));
            let total = sum(grad);
            let scale = 1.0 / (total * tokens);
            grad.iter_mut().for_each(|g| *g *= scale);
            grad[target] -= 1.0 / tokens;
            // -log softmax(row)[target] as log-sum-exp minus the target's logit: finite however
            // small the target's probability (where exp underflows).
            max + total.ln() - logits[target]
        })
        .collect();
    (sum(&losses) / tokens, grad)
}
