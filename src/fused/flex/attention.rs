//! Causal attention, flash style, on f32 tensors in the projections' layout
//! (`q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`).
//!
//! The forward runs one task per (sequence, query head), over blocks of [`BLOCK`] query rows: the
//! scores of a block against the keys it may see, its softmax, the block's output. Only the
//! output and each row's log-sum-exp are kept. The backward runs one task per (sequence, key/value
//! head), over the query heads of its group and their blocks, recomputing each block's
//! probabilities from the log-sum-exp; a task sums its key and value gradients in a fixed order.
//! The block products are gemm calls on strided views: no input is copied or transposed. The
//! tasks run as code compiled for AVX2 where the CPU has it (the softmax loops in eight lanes).

use rayon::prelude::*;

use super::exp::exp;
use super::gemm::matmul;
use super::lanes::{dot, max, sum};
use super::simd::wide;

/// Query rows per block: a block's scores take `BLOCK x seq` values.
const BLOCK: usize = 64;

/// The sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl Shape {
    /// From the shapes of `q: [b, s, h, hd]` and `k: [b, s, kv, hd]`.
    pub fn of(q: &burn::backend::Shape, k: &burn::backend::Shape) -> Self {
        Shape { batch: q[0], seq: q[1], heads: q[2], kv_heads: k[2], head_dim: q[3] }
    }
}

/// What the forward kept, all in the layouts above; `lse: [b, h, s]`.
pub(super) struct Saved<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub output: &'a [f32],
    pub lse: &'a [f32],
}

/// `-> (output: [b, s, h, hd], lse: [b, h, s])`.
pub(super) fn forward(shape: &Shape, q: &[f32], k: &[f32], v: &[f32], scale: f32) -> (Vec<f32>, Vec<f32>) {
    let Shape { batch, seq, heads, kv_heads, head_dim: d } = *shape;
    let (q_rs, kv_rs) = (heads * d, kv_heads * d);
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..batch * heads)
        .into_par_iter()
        .map(|task| {
            let (b, h) = (task / heads, task % heads);
            let kv = h / (heads / kv_heads);
            let q = &q[(b * seq * heads + h) * d..];
            let (k, v) = (&k[(b * seq * kv_heads + kv) * d..], &v[(b * seq * kv_heads + kv) * d..]);
            let mut output = vec![0.0f32; seq * d];
            let mut lse = vec![0.0f32; seq];
            let mut scores = vec![0.0f32; BLOCK.min(seq) * seq];
            for start in (0..seq).step_by(BLOCK) {
                let (rows, keys) = ((seq - start).min(BLOCK), (start + BLOCK).min(seq));
                let scores = &mut scores[..rows * keys];
                matmul((rows, keys, d), scores, keys, false, (&q[start * q_rs..], q_rs, 1), (k, 1, kv_rs), scale);
                wide(
                    #[inline(always)]
                    || softmax(scores, keys, start, &mut lse[start..start + rows]),
                );
                matmul((rows, d, keys), &mut output[start * d..], d, false, (scores, keys, 1), (v, kv_rs, 1), 1.0);
            }
            (output, lse)
        })
        .collect();
    let mut output = vec![0.0f32; batch * seq * heads * d];
    let mut lse = Vec::with_capacity(batch * heads * seq);
    for (task, (head_output, head_lse)) in per_head.into_iter().enumerate() {
        let (b, h) = (task / heads, task % heads);
        for (i, row) in head_output.chunks(d).enumerate() {
            let at = ((b * seq + i) * heads + h) * d;
            output[at..at + d].copy_from_slice(row);
        }
        lse.extend_from_slice(&head_lse);
    }
    (output, lse)
}

/// `-> (grad q: [b, s, h, hd], grad k, grad v: [b, s, kv, hd])` from the output's gradient `grad`.
pub(super) fn backward(shape: &Shape, saved: &Saved, grad: &[f32], scale: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let Shape { batch, seq, heads, kv_heads, head_dim: d } = *shape;
    let groups = heads / kv_heads;
    let (q_rs, kv_rs) = (heads * d, kv_heads * d);
    let per_kv_head: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..batch * kv_heads)
        .into_par_iter()
        .map(|task| {
            let (b, kv) = (task / kv_heads, task % kv_heads);
            let k = &saved.k[(b * seq * kv_heads + kv) * d..];
            let v = &saved.v[(b * seq * kv_heads + kv) * d..];
            let (mut grad_q, mut grad_k, mut grad_v) =
                (vec![0.0f32; groups * seq * d], vec![0.0f32; seq * d], vec![0.0f32; seq * d]);
            let mut probs = vec![0.0f32; BLOCK.min(seq) * seq];
            let mut grad_scores = vec![0.0f32; BLOCK.min(seq) * seq];
            for group in 0..groups {
                let h = kv * groups + group;
                let at = (b * seq * heads + h) * d;
                let (q, output, grad) = (&saved.q[at..], &saved.output[at..], &grad[at..]);
                let lse = &saved.lse[(b * heads + h) * seq..][..seq];
                let grad_q = &mut grad_q[group * seq * d..][..seq * d];
                for start in (0..seq).step_by(BLOCK) {
                    let (rows, keys) = ((seq - start).min(BLOCK), (start + BLOCK).min(seq));
                    let (probs, grad_scores) = (&mut probs[..rows * keys], &mut grad_scores[..rows * keys]);
                    let (q_block, grad_block) = ((&q[start * q_rs..], q_rs, 1), (&grad[start * q_rs..], q_rs, 1));
                    matmul((rows, keys, d), probs, keys, false, q_block, (k, 1, kv_rs), scale);
                    wide(
                        #[inline(always)]
                        || probabilities(probs, keys, start, &lse[start..start + rows]),
                    );
                    // dV += P^T dO
                    matmul((keys, d, rows), &mut grad_v, d, true, (probs, 1, keys), grad_block, 1.0);
                    // dP = dO V^T, then dS = scale * P (dP - rowsum(dO O))
                    matmul((rows, keys, d), grad_scores, keys, false, grad_block, (v, 1, kv_rs), 1.0);
                    let (grad_rows, output_rows) =
                        (grad[start * q_rs..].chunks(q_rs), output[start * q_rs..].chunks(q_rs));
                    let row_pairs = grad_rows.zip(output_rows).take(rows).map(|(g, o)| (&g[..d], &o[..d]));
                    wide(
                        #[inline(always)]
                        || score_gradients(grad_scores, probs, keys, row_pairs, scale),
                    );
                    // dQ = dS K, dK += dS^T Q
                    matmul(
                        (rows, d, keys),
                        &mut grad_q[start * d..],
                        d,
                        false,
                        (grad_scores, keys, 1),
                        (k, kv_rs, 1),
                        1.0,
                    );
                    matmul((keys, d, rows), &mut grad_k, d, true, (grad_scores, 1, keys), q_block, 1.0);
                }
            }
            (grad_q, grad_k, grad_v)
        })
        .collect();
    let mut grad_q = vec![0.0f32; batch * seq * heads * d];
    let mut grad_k = vec![0.0f32; batch * seq * kv_heads * d];
    let mut grad_v = vec![0.0f32; batch * seq * kv_heads * d];
    for (task, (task_q, task_k, task_v)) in per_kv_head.into_iter().enumerate() {
        let (b, kv) = (task / kv_heads, task % kv_heads);
        for i in 0..seq {
            let at = ((b * seq + i) * kv_heads + kv) * d;
            grad_k[at..at + d].copy_from_slice(&task_k[i * d..(i + 1) * d]);
            grad_v[at..at + d].copy_from_slice(&task_v[i * d..(i + 1) * d]);
            for group in 0..groups {
                let at = ((b * seq + i) * heads + kv * groups + group) * d;
                let from = (group * seq + i) * d;
                grad_q[at..at + d].copy_from_slice(&task_q[from..from + d]);
            }
        }
    }
    (grad_q, grad_k, grad_v)
}

/// Each row `r` of a block's scores (`[rows, keys]`, the block's first query at `start`) to its
/// probabilities over the keys it may see, zero beyond; `lse` gets each row's log-sum-exp.
#[inline(always)]
fn softmax(scores: &mut [f32], keys: usize, start: usize, lse: &mut [f32]) {
    for ((r, row), lse) in scores.chunks_mut(keys).enumerate().zip(lse) {
        let (seen, future) = row.split_at_mut(start + r + 1);
        let max = max(seen);
        seen.iter_mut().for_each(|s| *s = exp(*s - max));
        let total = sum(seen);
        let inverse = 1.0 / total;
        seen.iter_mut().for_each(|p| *p *= inverse);
        future.fill(0.0);
        *lse = max + total.ln();
    }
}

/// A block's probabilities from its scores (in place) and each row's log-sum-exp, as
/// [`softmax`] made them.
#[inline(always)]
fn probabilities(scores: &mut [f32], keys: usize, start: usize, lse: &[f32]) {
    for ((r, row), &lse) in scores.chunks_mut(keys).enumerate().zip(lse) {
        let (seen, future) = row.split_at_mut(start + r + 1);
        seen.iter_mut().for_each(|s| *s = exp(*s - lse));
        future.fill(0.0);
    }
}

/// `dS = scale * P (dP - rowsum(dO O))` in place of `dP` (`grad_scores`), from the block's
/// probabilities and each row's `(dO, O)`.
#[inline(always)]
fn score_gradients<'a>(
    grad_scores: &mut [f32],
    probs: &[f32],
    keys: usize,
    rows: impl Iterator<Item = (&'a [f32], &'a [f32])>,
    scale: f32,
) {
    for ((ds, p), (grad, output)) in grad_scores.chunks_mut(keys).zip(probs.chunks(keys)).zip(rows) {
        let delta = dot(grad, output);
        ds.iter_mut().zip(p).for_each(|(ds, &p)| *ds = scale * p * (*ds - delta));
    }
}
