//! LayerNorm over rows of `d` values, forward and backward.

use rayon::prelude::*;

use super::lanes::sum_in_order;

/// Rows handed to one task.
const ROWS_PER_TASK: usize = 32;

/// `x: [rows * d]`, `gamma, beta: [d]` -> `(y: [rows * d], mean: [rows], inverse std: [rows])`.
pub(super) fn forward(x: &[f32], gamma: &[f32], beta: &[f32], epsilon: f64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let rows = x.len() / d;
    let mut y = vec![0.0f32; x.len()];
    let (mut mean, mut inv_std) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    y.par_chunks_mut(ROWS_PER_TASK * d)
        .zip(mean.par_chunks_mut(ROWS_PER_TASK).zip(inv_std.par_chunks_mut(ROWS_PER_TASK)))
        .zip(x.par_chunks(ROWS_PER_TASK * d))
        .for_each(|((y, (mean, inv_std)), x)| {
            for (((y, mean), inv), x) in y.chunks_mut(d).zip(mean.iter_mut()).zip(inv_std.iter_mut()).zip(x.chunks(d)) {
                *mean = x.iter().sum::<f32>() / d as f32;
                let variance = x.iter().map(|&v| (v - *mean) * (v - *mean)).sum::<f32>() / d as f32;
                *inv = 1.0 / (variance + epsilon as f32).sqrt();
                for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
                    *y = (x - *mean) * *inv * g + b;
                }
            }
        });
    (y, mean, inv_std)
}

/// `-> (grad x, grad gamma, grad beta)`: with `n = (x - mean) r` and `dn = dy gamma`,
/// `dx = r (dn - mean(dn) - n mean(dn n))`, `dgamma = sum over rows of dy n`, `dbeta` of `dy`.
pub(super) fn backward(
    x: &[f32],
    gamma: &[f32],
    mean: &[f32],
    inv_std: &[f32],
    grad: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let mut grad_x = vec![0.0f32; x.len()];
    // Per task, the partial sums of `dy n` and `dy`, added up in task order below.
    let partials: Vec<(Vec<f32>, Vec<f32>)> = grad_x
        .par_chunks_mut(ROWS_PER_TASK * d)
        .zip(x.par_chunks(ROWS_PER_TASK * d).zip(grad.par_chunks(ROWS_PER_TASK * d)))
        .zip(mean.par_chunks(ROWS_PER_TASK).zip(inv_std.par_chunks(ROWS_PER_TASK)))
        .map(|((grad_x, (x, grad)), (mean, inv_std))| {
            let (mut grad_gamma, mut grad_beta) = (vec![0.0f32; d], vec![0.0f32; d]);
            let mut normalised = vec![0.0f32; d];
            for ((((dx, x), dy), &mean), &r) in
                grad_x.chunks_mut(d).zip(x.chunks(d)).zip(grad.chunks(d)).zip(mean).zip(inv_std)
            {
                normalised.iter_mut().zip(x).for_each(|(n, &x)| *n = (x - mean) * r);
                let (mut sum_dn, mut sum_dn_n) = (0.0f32, 0.0f32);
                for ((&dy, &g), &n) in dy.iter().zip(gamma).zip(&normalised) {
                    sum_dn += dy * g;
                    sum_dn_n += dy * g * n;
                }
                let (mean_dn, mean_dn_n) = (sum_dn / d as f32, sum_dn_n / d as f32);
                for (i, dx) in dx.iter_mut().enumerate() {
                    let n = normalised[i];
                    *dx = r * (dy[i] * gamma[i] - mean_dn - n * mean_dn_n);
                    grad_gamma[i] += dy[i] * n;
                    grad_beta[i] += dy[i];
                }
            }
            (grad_gamma, grad_beta)
        })
        .collect();
    let grad_gamma = sum_in_order(partials.iter().map(|(gamma, _)| gamma.as_slice()), d);
    let grad_beta = sum_in_order(partials.iter().map(|(_, beta)| beta.as_slice()), d);
    (grad_x, grad_gamma, grad_beta)
}
