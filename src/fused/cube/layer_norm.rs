//! LayerNorm as CubeCL kernels, forward and backward, for `x: [rows, d]` (contiguous),
//! `gamma, beta: [d]`, statistics in f32 whatever the input's precision. (The LNS factor of a
//! LayerNorm scheme is folded into its weights, so the kernels have none.)
//!
//! Forward, one row per cube of [`row_block`] units, two passes over the row:
//!   `mean = mean(x)`, `r = 1 / sqrt(mean((x - mean)^2) + epsilon)`, `y = (x - mean) r gamma + beta`.
//! Backward, with `n = (x - mean) r` and `dn = dy gamma`:
//!   `dx = r (dn - mean(dn) - n mean(dn n))`: one row per cube;
//!   `dgamma = sum_rows(dy n)`, `dbeta = sum_rows(dy)`: per-block partial sums per column, summed
//!   by [`norm_weight_sums`] (WGSL has no float atomics).

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::norm_weight_sums::norm_weight_sums;
use super::reduce::cube_sum;
use super::rows::{partial_blocks, row_block, row_cubes, rows_and_width, BLOCK};

#[cube(launch)]
fn layer_norm_forward_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<G>,
    beta: &Tensor<G>,
    y: &mut Tensor<F>,
    mean: &mut Tensor<f32>,
    inv_std: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    inv_d: f32,
    epsilon: f32,
    #[comptime] block: usize,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let start = row * d;
    let mut total = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < d {
        total += f32::cast_from(x[start + i]);
        i += block;
    }
    let row_mean = cube_sum(total, block) * inv_d;
    let mut squares = 0.0f32;
    let mut j = UNIT_POS as usize;
    while j < d {
        let centred = f32::cast_from(x[start + j]) - row_mean;
        squares += centred * centred;
        j += block;
    }
    let r = (cube_sum(squares, block) * inv_d + epsilon).inverse_sqrt();
    if UNIT_POS == 0 {
        mean[row] = row_mean;
        inv_std[row] = r;
    }
    let mut c = UNIT_POS as usize;
    while c < d {
        let normalised = (f32::cast_from(x[start + c]) - row_mean) * r;
        y[start + c] = F::cast_from(normalised * f32::cast_from(gamma[c]) + f32::cast_from(beta[c]));
        c += block;
    }
}

#[cube(launch)]
fn layer_norm_grad_x_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<G>,
    mean: &Tensor<f32>,
    inv_std: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_x: &mut Tensor<F>,
    rows: u32,
    d: u32,
    inv_d: f32,
    #[comptime] block: usize,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let start = row * d;
    let row_mean = mean[row];
    let r = inv_std[row];
    let mut sum_dn = 0.0f32;
    let mut sum_dn_n = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < d {
        let dn = f32::cast_from(grad[start + i]) * f32::cast_from(gamma[i]);
        sum_dn += dn;
        sum_dn_n += dn * (f32::cast_from(x[start + i]) - row_mean) * r;
        i += block;
    }
    let mean_dn = cube_sum(sum_dn, block) * inv_d;
    let mean_dn_n = cube_sum(sum_dn_n, block) * inv_d;
    let mut j = UNIT_POS as usize;
    while j < d {
        let dn = f32::cast_from(grad[start + j]) * f32::cast_from(gamma[j]);
        let n = (f32::cast_from(x[start + j]) - row_mean) * r;
        grad_x[start + j] = F::cast_from(r * (dn - mean_dn - n * mean_dn_n));
        j += block;
    }
}

#[cube(launch)]
fn layer_norm_grad_weights_partials_kernel<F: Float>(
    x: &Tensor<F>,
    mean: &Tensor<f32>,
    inv_std: &Tensor<f32>,
    grad: &Tensor<F>,
    gamma_partials: &mut Tensor<f32>,
    beta_partials: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    rows_per_partial: u32,
    #[define(F)] _dtype: ElemType,
) {
    let d = d as usize;
    let column = ABSOLUTE_POS_X as usize;
    if column >= d {
        terminate!();
    }
    let partial = CUBE_POS_Y as usize;
    let first = partial * rows_per_partial as usize;
    let mut end = first + rows_per_partial as usize;
    if end > rows as usize {
        end = rows as usize;
    }
    let mut sum_gamma = 0.0f32;
    let mut sum_beta = 0.0f32;
    let mut row = first;
    while row < end {
        let at = row * d + column;
        let dy = f32::cast_from(grad[at]);
        sum_gamma += dy * (f32::cast_from(x[at]) - mean[row]) * inv_std[row];
        sum_beta += dy;
        row += 1;
    }
    gamma_partials[partial * d + column] = sum_gamma;
    beta_partials[partial * d + column] = sum_beta;
}

/// `(y: x's shape and dtype, mean, inverse standard deviation: [..., 1] in f32)`.
pub(super) fn forward(x: CubeTensor, gamma: CubeTensor, beta: CubeTensor, epsilon: f64) -> [CubeTensor; 3] {
    let (x, gamma, beta) = (into_contiguous(x), into_contiguous(gamma), into_contiguous(beta));
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
    let stats = super::row_stats_shape(&shape);
    let y = empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let mean = empty_device_dtype(client.clone(), device.clone(), stats.clone(), DType::F32);
    let inv_std = empty_device_dtype(client.clone(), device, stats, DType::F32);
    if rows == 0 || d == 0 {
        return [y, mean, inv_std];
    }
    layer_norm_forward_kernel::launch(
        &client,
        row_cubes(&x, rows),
        CubeDim::new_1d(row_block(d) as u32),
        x.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        beta.into_tensor_arg(),
        y.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        inv_std.clone().into_tensor_arg(),
        rows as u32,
        d as u32,
        1.0 / d as f32,
        epsilon as f32,
        row_block(d),
        [dtype_to_storage_type(dtype), dtype_to_storage_type(gamma.dtype)],
    );
    [y, mean, inv_std]
}

/// `(grad x: x's shape and dtype, grad gamma, grad beta: [d] in gamma's dtype)`.
pub(super) fn backward(
    x: CubeTensor,
    gamma: CubeTensor,
    mean: CubeTensor,
    inv_std: CubeTensor,
    grad: CubeTensor,
) -> [CubeTensor; 3] {
    let (x, gamma, grad) = (into_contiguous(x), into_contiguous(gamma), into_contiguous(grad));
    let (mean, inv_std) = (into_contiguous(mean), into_contiguous(inv_std));
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype, gamma_dtype) = (x.client.clone(), x.device.clone(), x.dtype, gamma.dtype);
    let grad_x = empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let (partials, rows_per_partial) = partial_blocks(rows);
    let gamma_partials = empty_device_dtype(client.clone(), device.clone(), Shape::from([partials, d]), DType::F32);
    let beta_partials = empty_device_dtype(client.clone(), device, Shape::from([partials, d]), DType::F32);
    let gamma_shape = gamma.shape();
    let summed = |partials: CubeTensor| norm_weight_sums(partials, 1.0, gamma_shape.clone(), gamma_dtype);
    if d == 0 {
        return [grad_x, summed(gamma_partials), summed(beta_partials)];
    }
    if rows > 0 {
        layer_norm_grad_x_kernel::launch(
            &client,
            row_cubes(&x, rows),
            CubeDim::new_1d(row_block(d) as u32),
            x.clone().into_tensor_arg(),
            gamma.into_tensor_arg(),
            mean.clone().into_tensor_arg(),
            inv_std.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_x.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            1.0 / d as f32,
            row_block(d),
            [dtype_to_storage_type(dtype), dtype_to_storage_type(gamma_dtype)],
        );
    }
    // Without rows every partial stays 0: the gradients of gamma and beta are zero.
    layer_norm_grad_weights_partials_kernel::launch(
        &client,
        CubeCount::Static(d.div_ceil(BLOCK) as u32, partials as u32, 1),
        CubeDim::new_1d(BLOCK as u32),
        x.into_tensor_arg(),
        mean.into_tensor_arg(),
        inv_std.into_tensor_arg(),
        grad.into_tensor_arg(),
        gamma_partials.clone().into_tensor_arg(),
        beta_partials.clone().into_tensor_arg(),
        rows as u32,
        d as u32,
        rows_per_partial as u32,
        dtype_to_storage_type(dtype),
    );
    [grad_x, summed(gamma_partials), summed(beta_partials)]
}
