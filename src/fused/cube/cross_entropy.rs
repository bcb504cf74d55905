//! The cross-entropy of `logits: [tokens, vocab]` (contiguous) against `targets: [tokens]` and its
//! gradient as CubeCL kernels, in f32 whatever the logits' precision.
//!
//! Per row, one cube of [`row_block`] units, two passes over the row (the second from cache):
//!   `m, l` with `l = sum(exp(x - m))` and `m = max(x)` in one pass (online softmax: each unit
//!   keeps its own running maximum and rescales its sum when it moves; the cube then brings the
//!   units' sums to the row's maximum), then
//!   `loss = m + ln(l) - x[target]` (finite however small the target's probability),
//!   `grad = (exp(x - m) / l - onehot(target)) * grad_scale` in the logits' type, with
//!   `grad_scale = 1 / tokens` for the mean's gradient or 1 for the LM head's blocks.
//! Then one cube sums the rows' losses in a fixed order: `value = sum(loss) / tokens`.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::reduce::{cube_max, cube_sum};
use super::rows::{row_block, row_cubes, rows_and_width, BLOCK};

#[cube(launch)]
fn cross_entropy_rows_kernel<F: Float, I: Numeric>(
    logits: &Tensor<F>,
    targets: &Tensor<I>,
    grad: &mut Tensor<F>,
    losses: &mut Tensor<f32>,
    rows: u32,
    vocab: u32,
    grad_scale: f32,
    not_a_number: f32,
    #[comptime] block: usize,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let vocab = vocab as usize;
    let start = row * vocab;
    // Below any finite logit: a unit with no values keeps a sum of 0 under it.
    let mut max = f32::new(-3.0e38);
    let mut total = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < vocab {
        let x = f32::cast_from(logits[start + i]);
        if x > max {
            // Before its first value a unit's sum is 0, and stays so (no exp of the sentinel).
            total = select(total > 0.0f32, total * (max - x).exp(), 0.0f32);
            max = x;
        }
        total += (x - max).exp();
        i += block;
    }
    let row_max = cube_max(max, block);
    let row_total = cube_sum(select(total > 0.0f32, total * (max - row_max).exp(), 0.0f32), block);
    let target = usize::cast_from(targets[row]);
    if UNIT_POS == 0 {
        // Targets are not checked on the GPU (that would wait for it): one out of range gives a
        // NaN loss, which a run stops on, never another row's logit. (NaN comes in as an
        // argument: WGSL has no literal for it.)
        let mut loss = not_a_number;
        if target < vocab {
            loss = row_max + row_total.ln() - f32::cast_from(logits[start + target]);
        }
        losses[row] = loss;
    }
    let inv_total = 1.0f32 / row_total;
    let mut k = UNIT_POS as usize;
    while k < vocab {
        let mut p = (f32::cast_from(logits[start + k]) - row_max).exp() * inv_total;
        if k == target {
            p -= 1.0f32;
        }
        grad[start + k] = F::cast_from(p * grad_scale);
        k += block;
    }
}

#[cube(launch)]
fn cross_entropy_mean_kernel(
    values: &Tensor<f32>,
    mean: &mut Tensor<f32>,
    n: u32,
    inv_n: f32,
    #[comptime] block: usize,
) {
    let mut total = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < n as usize {
        total += values[i];
        i += block;
    }
    let sum = cube_sum(total, block);
    if UNIT_POS == 0 {
        mean[0] = sum * inv_n;
    }
}

/// `(value: [1] in f32, grad: logits' shape and dtype)`, the gradient the mean's (`per_token`) or
/// `softmax - onehot`; `vocab` must not be 0.
pub(super) fn cross_entropy(logits: CubeTensor, targets: CubeTensor, per_token: bool) -> [CubeTensor; 2] {
    let (logits, targets) = (into_contiguous(logits), into_contiguous(targets));
    let (rows, vocab) = rows_and_width(&logits);
    let (client, device, dtype) = (logits.client.clone(), logits.device.clone(), logits.dtype);
    let grad = empty_device_dtype(client.clone(), device.clone(), logits.shape(), dtype);
    let losses = empty_device_dtype(client.clone(), device.clone(), Shape::from([rows]), DType::F32);
    let value = empty_device_dtype(client.clone(), device, Shape::from([1]), DType::F32);
    let inv_tokens = 1.0 / rows as f32; // The mean over no rows is NaN, as Burn's.
    if rows > 0 {
        cross_entropy_rows_kernel::launch(
            &client,
            row_cubes(&logits, rows),
            CubeDim::new_1d(row_block(vocab) as u32),
            logits.clone().into_tensor_arg(),
            targets.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            losses.clone().into_tensor_arg(),
            rows as u32,
            vocab as u32,
            if per_token { inv_tokens } else { 1.0 },
            f32::NAN,
            row_block(vocab),
            [dtype_to_storage_type(dtype), dtype_to_storage_type(targets.dtype)],
        );
    }
    cross_entropy_mean_kernel::launch(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(BLOCK as u32),
        losses.into_tensor_arg(),
        value.clone().into_tensor_arg(),
        rows as u32,
        inv_tokens,
        BLOCK,
    );
    [value, grad]
}
