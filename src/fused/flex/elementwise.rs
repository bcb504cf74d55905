//! SwiGLU and RoPE: one pass over their inputs, in parallel over fixed-size pieces.

use rayon::prelude::*;

use super::exp::sigmoid;
use super::simd::wide;

/// Elements handed to one task.
const ELEMENTS_PER_TASK: usize = 1 << 14;

/// `silu(gate) * up`, element by element.
pub(super) fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; gate.len()];
    out.par_chunks_mut(ELEMENTS_PER_TASK)
        .zip(gate.par_chunks(ELEMENTS_PER_TASK).zip(up.par_chunks(ELEMENTS_PER_TASK)))
        .for_each(|(out, (gate, up))| {
            wide(
                #[inline(always)]
                || {
                    for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                        *out = g * sigmoid(g) * u;
                    }
                },
            )
        });
    out
}

/// `(grad gate, grad up)` of [`swiglu`]: `d up = dy silu(g)`, `d gate = dy up s (1 + g (1 - s))`.
pub(super) fn swiglu_backward(gate: &[f32], up: &[f32], grad: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut grad_gate = vec![0.0f32; gate.len()];
    let mut grad_up = vec![0.0f32; gate.len()];
    grad_gate
        .par_chunks_mut(ELEMENTS_PER_TASK)
        .zip(grad_up.par_chunks_mut(ELEMENTS_PER_TASK))
        .zip(gate.par_chunks(ELEMENTS_PER_TASK).zip(up.par_chunks(ELEMENTS_PER_TASK)))
        .zip(grad.par_chunks(ELEMENTS_PER_TASK))
        .for_each(|(((grad_gate, grad_up), (gate, up)), grad)| {
            wide(
                #[inline(always)]
                || {
                    let pairs = grad_gate.iter_mut().zip(grad_up.iter_mut());
                    for ((((dg, du), &g), &u), &dy) in pairs.zip(gate).zip(up).zip(grad) {
                        let s = sigmoid(g);
                        let silu = g * s;
                        *du = dy * silu;
                        *dg = dy * u * (s + silu - silu * s);
                    }
                },
            )
        });
    (grad_gate, grad_up)
}

/// RoPE on `x: [rows(batch * seq), heads, head_dim]` with tables `[seq, head_dim]`:
/// `out[i] = x[i] cos[i] - x[i + h] sin[i]`, `out[i + h] = x[i + h] cos[i + h] + x[i] sin[i + h]`
/// for `i < h = head_dim / 2`.
pub(super) fn rope(x: &[f32], cos: &[f32], sin: &[f32], heads: usize, head_dim: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let row = heads * head_dim;
    let seq = cos.len() / head_dim;
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(row).zip(x.par_chunks(row)).enumerate().with_min_len(64).for_each(|(position, (out, x))| {
        let at = (position % seq) * head_dim;
        let (cos, sin) = (&cos[at..at + head_dim], &sin[at..at + head_dim]);
        wide(
            #[inline(always)]
            || {
                for (out, x) in out.chunks_mut(head_dim).zip(x.chunks(head_dim)) {
                    let (x1, x2) = x.split_at(half);
                    let (out1, out2) = out.split_at_mut(half);
                    for i in 0..half {
                        out1[i] = x1[i] * cos[i] - x2[i] * sin[i];
                        out2[i] = x2[i] * cos[half + i] + x1[i] * sin[half + i];
                    }
                }
            },
        )
    });
    out
}
