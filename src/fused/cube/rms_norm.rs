//! RMSNorm with the LNS factor as CubeCL kernels, forward and backward, for `x: [rows, d]`
//! (contiguous), `gamma: [d]`, statistics in f32 whatever the input's precision.
//!
//! Forward, one row per cube of [`row_block`] units (each strides over the row; the sum of squares is
//! reduced in shared memory):
//!   `r = 1 / sqrt(mean(x^2) + epsilon)`, `y = x r gamma scale`.
//! Backward, with `g = gamma scale`:
//!   `dx = r (dy g - x r^2 mean(dy g x))`: one row per cube, as the forward;
//!   `dgamma = scale sum_rows(dy x r)`: one unit per column and block of rows writes a partial
//!   sum, and [`norm_weight_sums`] sums the partials (WGSL has no float atomics).

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
fn rms_norm_forward_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<G>,
    y: &mut Tensor<F>,
    inv_rms: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    inv_d: f32,
    epsilon: f32,
    scale: f32,
    #[comptime] block: usize,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let start = row * d;
    let mut squares = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < d {
        let value = f32::cast_from(x[start + i]);
        squares += value * value;
        i += block;
    }
    let r = (cube_sum(squares, block) * inv_d + epsilon).inverse_sqrt();
    if UNIT_POS == 0 {
        inv_rms[row] = r;
    }
    let factor = r * scale;
    let mut j = UNIT_POS as usize;
    while j < d {
        y[start + j] = F::cast_from(f32::cast_from(x[start + j]) * factor * f32::cast_from(gamma[j]));
        j += block;
    }
}

#[cube(launch)]
fn rms_norm_grad_x_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<G>,
    inv_rms: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_x: &mut Tensor<F>,
    rows: u32,
    d: u32,
    inv_d: f32,
    scale: f32,
    #[comptime] block: usize,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let start = row * d;
    let mut dot = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < d {
        let g = f32::cast_from(gamma[i]) * scale;
        dot += f32::cast_from(grad[start + i]) * g * f32::cast_from(x[start + i]);
        i += block;
    }
    let r = inv_rms[row];
    let correction = r * r * cube_sum(dot, block) * inv_d;
    let mut j = UNIT_POS as usize;
    while j < d {
        let g = f32::cast_from(gamma[j]) * scale;
        let value = f32::cast_from(grad[start + j]) * g - f32::cast_from(x[start + j]) * correction;
        grad_x[start + j] = F::cast_from(r * value);
        j += block;
    }
}

#[cube(launch)]
fn rms_norm_grad_gamma_partials_kernel<F: Float>(
    x: &Tensor<F>,
    inv_rms: &Tensor<f32>,
    grad: &Tensor<F>,
    partials: &mut Tensor<f32>,
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
    let mut sum = 0.0f32;
    let mut row = first;
    while row < end {
        let at = row * d + column;
        sum += f32::cast_from(grad[at]) * f32::cast_from(x[at]) * inv_rms[row];
        row += 1;
    }
    partials[partial * d + column] = sum;
}

/// `(y: x's shape and dtype, inverse RMS: [..., 1] in f32)`.
pub(super) fn forward(x: CubeTensor, gamma: CubeTensor, epsilon: f64, scale: f64) -> [CubeTensor; 2] {
    let (x, gamma) = (into_contiguous(x), into_contiguous(gamma));
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
    let y = empty_device_dtype(client.clone(), device.clone(), shape.clone(), dtype);
    let inv_rms = empty_device_dtype(client.clone(), device, super::row_stats_shape(&shape), DType::F32);
    if rows == 0 || d == 0 {
        return [y, inv_rms];
    }
    rms_norm_forward_kernel::launch(
        &client,
        row_cubes(&x, rows),
        CubeDim::new_1d(row_block(d) as u32),
        x.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        y.clone().into_tensor_arg(),
        inv_rms.clone().into_tensor_arg(),
        rows as u32,
        d as u32,
        1.0 / d as f32,
        epsilon as f32,
        scale as f32,
        row_block(d),
        [dtype_to_storage_type(dtype), dtype_to_storage_type(gamma.dtype)],
    );
    [y, inv_rms]
}

/// `(grad x: x's shape and dtype, grad gamma: [d] in gamma's dtype)`.
pub(super) fn backward(
    x: CubeTensor,
    gamma: CubeTensor,
    inv_rms: CubeTensor,
    grad: CubeTensor,
    scale: f64,
) -> [CubeTensor; 2] {
    let (x, gamma, inv_rms, grad) =
        (into_contiguous(x), into_contiguous(gamma), into_contiguous(inv_rms), into_contiguous(grad));
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype, gamma_dtype) = (x.client.clone(), x.device.clone(), x.dtype, gamma.dtype);
    let grad_x = empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let (partials_count, rows_per_partial) = partial_blocks(rows);
    let partials = empty_device_dtype(client.clone(), device, Shape::from([partials_count, d]), DType::F32);
    if d == 0 {
        return [grad_x, norm_weight_sums(partials, scale, gamma.shape(), gamma_dtype)];
    }
    if rows > 0 {
        rms_norm_grad_x_kernel::launch(
            &client,
            row_cubes(&x, rows),
            CubeDim::new_1d(row_block(d) as u32),
            x.clone().into_tensor_arg(),
            gamma.clone().into_tensor_arg(),
            inv_rms.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_x.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            1.0 / d as f32,
            scale as f32,
            row_block(d),
            [dtype_to_storage_type(dtype), dtype_to_storage_type(gamma_dtype)],
        );
    }
    // Without rows every partial stays 0: the gradient of gamma is zero.
    rms_norm_grad_gamma_partials_kernel::launch(
        &client,
        CubeCount::Static(d.div_ceil(BLOCK) as u32, partials_count as u32, 1),
        CubeDim::new_1d(BLOCK as u32),
        x.into_tensor_arg(),
        inv_rms.into_tensor_arg(),
        grad.into_tensor_arg(),
        partials.clone().into_tensor_arg(),
        rows as u32,
        d as u32,
        rows_per_partial as u32,
        dtype_to_storage_type(dtype),
    );
    [grad_x, norm_weight_sums(partials, scale, gamma.shape(), gamma_dtype)]
}
