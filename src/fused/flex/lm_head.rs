//! The LM head and the loss together, a block of rows at a time: the `[tokens, vocab]` logits
//! never exist whole, only one block of them, in one buffer that each block reuses.
//!
//! Per block of rows: `logits = hidden @ weight` (a gemm), the loss and `(softmax - onehot) /
//! tokens` in place ([`into_gradient`]), then the block's part of both gradients,
//! `grad_hidden = g @ weight^T` and `grad_weight += hidden^T @ g` (blocks added in order).

use super::cross_entropy::into_gradient;
use super::gemm::{matmul_parallel, View};
use super::lanes::sum;

/// The sizes of one call: `hidden: [tokens, d_model]`, `weight: [d_model, vocab]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sizes {
    pub tokens: usize,
    pub d_model: usize,
    pub vocab: usize,
}

/// `hidden: [tokens, d_model]` (row-major), `weight: [d_model, vocab]` as a [`View`] (the tied
/// embedding is its transpose), `targets: [tokens]` -> `(loss, grad_hidden: [tokens, d_model],
/// grad_weight: [d_model, vocab])`, over blocks of `block_rows` rows.
///
/// # Panics
///
/// If a target is not below `vocab`.
pub(super) fn lm_head_cross_entropy(
    sizes: Sizes,
    hidden: &[f32],
    weight: View,
    targets: &[usize],
    block_rows: usize,
) -> (f32, Vec<f32>, Vec<f32>) {
    let Sizes { tokens, d_model: d, vocab } = sizes;
    let (w, w_rs, w_cs) = weight;
    let block_rows = block_rows.clamp(1, tokens.max(1));
    let mut logits = vec![0.0f32; block_rows * vocab];
    let mut grad_hidden = vec![0.0f32; tokens * d];
    let mut grad_weight = vec![0.0f32; d * vocab];
    let mut losses = Vec::with_capacity(tokens);
    for start in (0..tokens).step_by(block_rows) {
        let rows = block_rows.min(tokens - start);
        let h = &hidden[start * d..(start + rows) * d];
        let g = &mut logits[..rows * vocab];
        matmul_parallel((rows, vocab, d), g, vocab, false, (h, d, 1), weight);
        losses.extend(into_gradient(g, &targets[start..start + rows], vocab, tokens));
        let g = &logits[..rows * vocab];
        let grad_h = &mut grad_hidden[start * d..(start + rows) * d];
        matmul_parallel((rows, d, vocab), grad_h, d, false, (g, vocab, 1), (w, w_cs, w_rs));
        matmul_parallel((d, vocab, rows), &mut grad_weight, vocab, start > 0, (h, 1, d), (g, vocab, 1));
    }
    (sum(&losses) / tokens as f32, grad_hidden, grad_weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loss and both gradients by their definitions, in f64.
    fn by_definition(sizes: Sizes, hidden: &[f32], weight: &[f32], targets: &[usize]) -> (f64, Vec<f64>, Vec<f64>) {
        let Sizes { tokens, d_model: d, vocab } = sizes;
        let (mut loss, mut grad_h, mut grad_w) = (0.0, vec![0.0; tokens * d], vec![0.0; d * vocab]);
        for t in 0..tokens {
            let logits: Vec<f64> = (0..vocab)
                .map(|v| (0..d).map(|i| hidden[t * d + i] as f64 * weight[i * vocab + v] as f64).sum())
                .collect();
            let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            loss += (max + total.ln() - logits[targets[t]]) / tokens as f64;
            for v in 0..vocab {
                let g = ((logits[v] - max).exp() / total - if v == targets[t] { 1.0 } else { 0.0 }) / tokens as f64;
                for i in 0..d {
                    grad_h[t * d + i] += g * weight[i * vocab + v] as f64;
                    grad_w[i * vocab + v] += g * hidden[t * d + i] as f64;
                }
            }
        }
        (loss, grad_h, grad_w)
    }

    fn close(ours: &[f32], expected: &[f64]) {
        let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in ours.iter().zip(expected).enumerate() {
            assert!((a as f64 - b).abs() <= 1e-5 * scale, "value {i}: {a} vs {b}");
        }
    }

    #[test]
    fn every_block_size_gives_the_definition() {
        let sizes = Sizes { tokens: 13, d_model: 6, vocab: 11 };
        let value = |i: usize, salt: usize| (((i * 7919 + salt) % 101) as f32 / 50.0 - 1.0) * 1.5;
        let hidden: Vec<f32> = (0..13 * 6).map(|i| value(i, 3)).collect();
        let weight: Vec<f32> = (0..6 * 11).map(|i| value(i, 17)).collect();
        let targets: Vec<usize> = (0..13).map(|t| (t * 5 + 2) % 11).collect();
        let (loss, grad_h, grad_w) = by_definition(sizes, &hidden, &weight, &targets);
        for block in [1, 4, 13, 100] {
            let (ours, ours_h, ours_w) = lm_head_cross_entropy(sizes, &hidden, (&weight, 11, 1), &targets, block);
            assert!((ours as f64 - loss).abs() < 1e-5 * loss, "block {block}: loss {ours} vs {loss}");
            close(&ours_h, &grad_h);
            close(&ours_w, &grad_w);
        }
        // The weight given as the transpose of a [vocab, d_model] matrix (a tied embedding).
        let embedding: Vec<f32> = (0..11 * 6).map(|i| weight[(i % 6) * 11 + i / 6]).collect();
        let (_, ours_h, ours_w) = lm_head_cross_entropy(sizes, &hidden, (&embedding, 1, 6), &targets, 4);
        close(&ours_h, &grad_h);
        close(&ours_w, &grad_w);
    }
}
