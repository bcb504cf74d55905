//! RMSNorm with a constant factor over rows of `d` values, forward and backward; the rows'
//! sums in eight lanes, in code compiled for AVX2 where the CPU has it.

use rayon::prelude::*;

use super::lanes::{dot, dot3, sum_in_order};
use super::simd::wide;

/// Rows handed to one task.
const ROWS_PER_TASK: usize = 32;

/// `x: [rows * d]`, `gamma: [d]` -> `(y: [rows * d], inverse RMS: [rows])`.
pub(super) fn forward(x: &[f32], gamma: &[f32], epsilon: f64, scale: f64) -> (Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let rows = x.len() / d;
    let g: Vec<f32> = gamma.iter().map(|&gamma| gamma * scale as f32).collect();
    let mut y = vec![0.0f32; x.len()];
    let mut inv_rms = vec![0.0f32; rows];
    y.par_chunks_mut(ROWS_PER_TASK * d)
        .zip(inv_rms.par_chunks_mut(ROWS_PER_TASK))
        .zip(x.par_chunks(ROWS_PER_TASK * d))
        .for_each(|((y, inv_rms), x)| {
            wide(
                #[inline(always)]
                || {
                    for ((y, inv), x) in y.chunks_mut(d).zip(inv_rms.iter_mut()).zip(x.chunks(d)) {
                        let mean_square = dot(x, x) / d as f32;
                        *inv = 1.0 / (mean_square + epsilon as f32).sqrt();
                        for ((y, &x), &g) in y.iter_mut().zip(x).zip(&g) {
                            *y = x * *inv * g;
                        }
                    }
                },
            )
        });
    (y, inv_rms)
}

/// `-> (grad x: [rows * d], grad gamma: [d])`: with `g = gamma * scale` and `r` a row's inverse
/// RMS, `dx = r (dy g - x r^2 mean(dy g x))` and `dgamma = scale * sum over rows of dy x r`.
pub(super) fn backward(x: &[f32], gamma: &[f32], inv_rms: &[f32], grad: &[f32], scale: f64) -> (Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let g: Vec<f32> = gamma.iter().map(|&gamma| gamma * scale as f32).collect();
    let mut grad_x = vec![0.0f32; x.len()];
    // One partial sum of `dy x r` per task, added up in task order below.
    let partials: Vec<Vec<f32>> = grad_x
        .par_chunks_mut(ROWS_PER_TASK * d)
        .zip(x.par_chunks(ROWS_PER_TASK * d))
        .zip(grad.par_chunks(ROWS_PER_TASK * d))
        .zip(inv_rms.par_chunks(ROWS_PER_TASK))
        .map(|(((grad_x, x), grad), inv_rms)| {
            let mut partial = vec![0.0f32; d];
            let rows = grad_x.chunks_mut(d).zip(x.chunks(d)).zip(grad.chunks(d)).zip(inv_rms);
            wide(
                #[inline(always)]
                || {
                    for (((grad_x, x), dy), &r) in rows {
                        let correction = r * r * (dot3(dy, &g, x) / d as f32);
                        let terms = grad_x.iter_mut().zip(x).zip(dy).zip(&g).zip(partial.iter_mut());
                        for ((((dx, &x), &dy), &g), p) in terms {
                            *dx = r * (dy * g - x * correction);
                            *p += dy * x * r;
                        }
                    }
                },
            );
            partial
        })
        .collect();
    let mut grad_gamma = sum_in_order(partials.iter().map(Vec::as_slice), d);
    for total in &mut grad_gamma {
        *total *= scale as f32;
    }
    (grad_x, grad_gamma)
}
