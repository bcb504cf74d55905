//! RMSNorm with the LNS factor as CubeCL kernels, forward and backward, for `x: [rows, d]`
//! (contiguous), `gamma: [d]`, statistics in f32 whatever the input's precision.
//!
//! Forward, one row per cube of [`row_block`] units (each strides over the row; the sum of squares is
//! reduced in shared memory):
//!   `r = 1 / sqrt(mean(x^2) + epsilon)`, `y = x r gamma scale`.
//! Of a residual sum (`x = base + branch`, the add of a Pre-LN block fused into the next norm), the
//! same pass adds and writes `x` too.
//! Backward, with `g = gamma scale`, in one pass over `x` and `dy`:
//!   `dx = r (dy g - x r^2 mean(dy g x)) + dres`, `dgamma = scale sum_rows(dy x r)`,
//! where `dres` is the gradient the residual sum got from its other use (the next residual add),
//! added in the same pass (or nothing).
//! A cube takes a block of rows, one after the other, the whole cube on each row; each unit owns
//! the columns `unit + k block` and keeps their `g`, the row's values and their running
//! `sum(dy x r)` in registers, and writes those sums as the block's partials, which
//! [`norm_weight_sums`] sums (WGSL has no float atomics).

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::norm_weight_sums::norm_weight_sums;
use super::reduce::cube_sum;
use super::rows::{partial_blocks, row_block, row_cubes, rows_and_width};

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_forward_kernel<F: Float, B: Float, G: Float, O: Float>(
    x: &Tensor<F>,
    branch: &Tensor<B>,
    gamma: &Tensor<G>,
    sum: &mut Tensor<F>,
    y: &mut Tensor<O>,
    inv_rms: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    inv_d: f32,
    epsilon: f32,
    scale: f32,
    #[comptime] block: usize,
    #[comptime] residual: bool,
    #[define(F, B, G, O)] _dtypes: [ElemType; 4],
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
        let mut value = x[start + i];
        if residual {
            // Added in the stream's type, as the separate add would; each unit reads back its own.
            value += F::cast_from(branch[start + i]);
            sum[start + i] = value;
        }
        let value = f32::cast_from(value);
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
        let mut value = x[start + j];
        if residual {
            value = sum[start + j];
        }
        y[start + j] = O::cast_from(f32::cast_from(value) * factor * f32::cast_from(gamma[j]));
        j += block;
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_backward_kernel<F: Float, G: Float, O: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<G>,
    inv_rms: &Tensor<f32>,
    grad: &Tensor<O>,
    grad_residual: &Tensor<F>,
    grad_x: &mut Tensor<F>,
    partials: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    inv_d: f32,
    scale: f32,
    rows_per_partial: u32,
    #[comptime] block: usize,
    #[comptime] per_unit: usize,
    #[comptime] adds_residual: bool,
    #[define(F, G, O)] _dtypes: [ElemType; 3],
) {
    let d = d as usize;
    let partial = CUBE_POS;
    let first = partial * rows_per_partial as usize;
    let end = usize::min(first + rows_per_partial as usize, rows as usize);
    // Unit `u` owns columns `u + k block`: their gamma, this row's values, and their share of dgamma.
    let mut g = Array::<f32>::new(per_unit);
    let mut xs = Array::<f32>::new(per_unit);
    let mut dys = Array::<f32>::new(per_unit);
    let mut dgamma = Array::<f32>::new(per_unit);
    #[unroll]
    for k in 0..per_unit {
        let j = UNIT_POS as usize + k * block;
        g[k] = 0.0;
        if j < d {
            g[k] = f32::cast_from(gamma[j]) * scale;
        }
        dgamma[k] = 0.0;
    }
    let mut row = first;
    while row < end {
        let start = row * d;
        let r = inv_rms[row];
        let mut dot = 0.0f32;
        #[unroll]
        for k in 0..per_unit {
            let j = UNIT_POS as usize + k * block;
            xs[k] = 0.0;
            dys[k] = 0.0;
            if j < d {
                xs[k] = f32::cast_from(x[start + j]);
                dys[k] = f32::cast_from(grad[start + j]);
            }
            dot += dys[k] * g[k] * xs[k];
            dgamma[k] += dys[k] * xs[k] * r;
        }
        let correction = r * r * cube_sum(dot, block) * inv_d;
        #[unroll]
        for k in 0..per_unit {
            let j = UNIT_POS as usize + k * block;
            if j < d {
                let mut dx = r * (dys[k] * g[k] - xs[k] * correction);
                if adds_residual {
                    dx += f32::cast_from(grad_residual[start + j]);
                }
                grad_x[start + j] = F::cast_from(dx);
            }
        }
        row += 1;
    }
    #[unroll]
    for k in 0..per_unit {
        let j = UNIT_POS as usize + k * block;
        if j < d {
            partials[partial * d + j] = dgamma[k];
        }
    }
}

/// `(y: x's shape and dtype, inverse RMS: [..., 1] in f32)`.
pub(super) fn forward(x: CubeTensor, gamma: CubeTensor, epsilon: f64, scale: f64) -> [CubeTensor; 2] {
    let dtype = x.dtype;
    let [_, y, inv_rms] = launch_forward(x, None, gamma, epsilon, scale, dtype);
    [y, inv_rms]
}

/// Of the residual sum `base + branch` (one shape; the branch cast to the base's type as it is
/// read): `(sum in base's dtype, y in out_dtype, inverse RMS)`, one launch.
pub(super) fn residual_forward(
    base: CubeTensor,
    branch: CubeTensor,
    gamma: CubeTensor,
    epsilon: f64,
    scale: f64,
    out_dtype: DType,
) -> [CubeTensor; 3] {
    launch_forward(base, Some(branch), gamma, epsilon, scale, out_dtype)
}

/// The forward of `x`, or of `x + branch`: `(sum, y, inverse RMS)`; without a branch the sum is
/// `x` itself, not written.
fn launch_forward(
    x: CubeTensor,
    branch: Option<CubeTensor>,
    gamma: CubeTensor,
    epsilon: f64,
    scale: f64,
    out_dtype: DType,
) -> [CubeTensor; 3] {
    let (x, gamma) = (into_contiguous(x), into_contiguous(gamma));
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
    let y = empty_device_dtype(client.clone(), device.clone(), shape.clone(), out_dtype);
    let inv_rms = empty_device_dtype(client.clone(), device.clone(), super::row_stats_shape(&shape), DType::F32);
    let residual = branch.is_some();
    // Without a branch the kernel reads `x` in its place and writes no sum: a one-value stand-in.
    let (branch, sum) = match branch {
        Some(branch) => (into_contiguous(branch), empty_device_dtype(client.clone(), device, shape, dtype)),
        None => (x.clone(), empty_device_dtype(client.clone(), device, [1].into(), dtype)),
    };
    let sum_out = if residual { sum.clone() } else { x.clone() };
    let branch_dtype = branch.dtype;
    if rows == 0 || d == 0 {
        return [sum_out, y, inv_rms];
    }
    rms_norm_forward_kernel::launch(
        &client,
        row_cubes(&x, rows),
        CubeDim::new_1d(row_block(d) as u32),
        x.clone().into_tensor_arg(),
        branch.into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        sum.into_tensor_arg(),
        y.clone().into_tensor_arg(),
        inv_rms.clone().into_tensor_arg(),
        rows as u32,
        d as u32,
        1.0 / d as f32,
        epsilon as f32,
        scale as f32,
        row_block(d),
        residual,
        [dtype, branch_dtype, gamma.dtype, out_dtype].map(dtype_to_storage_type),
    );
    [sum_out, y, inv_rms]
}

/// `(grad x: x's shape and dtype, grad gamma: [d] in gamma's dtype)`: two launches, the
/// one-pass kernel and [`norm_weight_sums`]. `grad` (y's gradient) may be of another float type
/// than x (a norm whose output is in the half type); `grad_residual` (x's shape and dtype), where
/// given, is added to grad x in the same pass.
pub(super) fn backward(
    x: CubeTensor,
    gamma: CubeTensor,
    inv_rms: CubeTensor,
    grad: CubeTensor,
    grad_residual: Option<CubeTensor>,
    scale: f64,
) -> [CubeTensor; 2] {
    let (x, gamma, inv_rms, grad) =
        (into_contiguous(x), into_contiguous(gamma), into_contiguous(inv_rms), into_contiguous(grad));
    let (adds_residual, grad_dtype) = (grad_residual.is_some(), grad.dtype);
    // Without it the kernel reads `x` in its place and adds nothing.
    let grad_residual = grad_residual.map_or_else(|| x.clone(), into_contiguous);
    let shape = x.shape();
    let (rows, d) = rows_and_width(&x);
    let (client, device, dtype, gamma_dtype) = (x.client.clone(), x.device.clone(), x.dtype, gamma.dtype);
    let grad_x = empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let (partials_count, rows_per_partial) = partial_blocks(rows);
    let partials = empty_device_dtype(client.clone(), device, Shape::from([partials_count, d]), DType::F32);
    if d > 0 {
        // Without rows each cube writes zero partials: the gradient of gamma is zero.
        let block = row_block(d);
        rms_norm_backward_kernel::launch(
            &client,
            CubeCount::Static(partials_count as u32, 1, 1),
            CubeDim::new_1d(block as u32),
            x.into_tensor_arg(),
            gamma.clone().into_tensor_arg(),
            inv_rms.into_tensor_arg(),
            grad.into_tensor_arg(),
            grad_residual.into_tensor_arg(),
            grad_x.clone().into_tensor_arg(),
            partials.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            1.0 / d as f32,
            scale as f32,
            rows_per_partial as u32,
            block,
            d.div_ceil(block),
            adds_residual,
            [dtype, gamma_dtype, grad_dtype].map(dtype_to_storage_type),
        );
    }
    [grad_x, norm_weight_sums(partials, scale, gamma.shape(), gamma_dtype)]
}
