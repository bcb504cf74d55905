//! Causal attention as CubeCL kernels, flash style: the forward keeps only the output and each
//! row's log-sum-exp; the backward recomputes the probabilities from them. Memory stays linear
//! in the sequence length. `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]` (contiguous), query head
//! `n` reading key/value head `n / (h / kv)`.
//!
//! One unit per query row (forward, `dQ`) or key row (`dK`, `dV`) of one head, the row's
//! `hd` values in registers, sums in f32:
//!
//! - forward, over keys `j <= i` with a running maximum `m` and sum `l` (online softmax):
//!   `s_ij = scale q_i . k_j`, `O_i = sum_j exp(s_ij - m) v_j / l`, `lse_i = m + ln(l)`;
//! - backward, with `P_ij = exp(s_ij - lse_i)`, `D_i = dO_i . O_i` (given) and
//!   `dS_ij = P_ij (dO_i . v_j - D_i)`:
//!   `dQ_i = scale sum_{j <= i} dS_ij k_j` per query row;
//!   `dV_j = sum_{i >= j} P_ij dO_i`, `dK_j = scale sum_{i >= j} dS_ij q_i` per key row and
//!   query head, summed over a group's query heads afterwards.
//!
//! These are the portable first kernels: no shared-memory tiles and no tensor cores yet.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::{cast, into_contiguous};
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::prelude::*;

/// Rows (units) per cube.
const ROWS_PER_CUBE: usize = 64;

/// Where row `row` of head `head` of sequence `batch` starts in a `[b, s, heads, hd]` tensor.
#[cube]
fn row_start(batch: usize, row: usize, head: usize, seq: usize, heads: usize, #[comptime] hd: usize) -> usize {
    ((batch * seq + row) * heads + head) * hd
}

#[cube(launch)]
fn attention_forward_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[define(F)] _dtype: ElemType,
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    if i >= seq {
        terminate!();
    }
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let q_start = row_start(batch, i, head, seq, heads, hd);
    let mut query = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    for c in 0..hd {
        query[c] = f32::cast_from(q[q_start + c]) * scale;
        acc[c] = 0.0;
    }
    let mut row_max = f32::new(-1.0e30);
    let mut sum = f32::new(0.0);
    for j in 0..i + 1 {
        let kv_start = row_start(batch, j, kv_head, seq, kv_heads, hd);
        let mut score = 0.0f32;
        for c in 0..hd {
            score += query[c] * f32::cast_from(k[kv_start + c]);
        }
        let new_max = max(row_max, score);
        let correction = (row_max - new_max).exp();
        let p = (score - new_max).exp();
        sum = sum * correction + p;
        for c in 0..hd {
            acc[c] = acc[c] * correction + p * f32::cast_from(v[kv_start + c]);
        }
        row_max = new_max;
    }
    let inv_sum = 1.0f32 / sum;
    for c in 0..hd {
        output[q_start + c] = F::cast_from(acc[c] * inv_sum);
    }
    lse[(batch * heads + head) * seq + i] = row_max + sum.ln();
}

#[cube(launch)]
fn attention_grad_q_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_q: &mut Tensor<F>,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[define(F)] _dtype: ElemType,
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    if i >= seq {
        terminate!();
    }
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let q_start = row_start(batch, i, head, seq, heads, hd);
    let row_lse = lse[(batch * heads + head) * seq + i];
    let row_delta = delta[(batch * seq + i) * heads + head];
    let mut query = Array::<f32>::new(hd);
    let mut grad_out = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    for c in 0..hd {
        query[c] = f32::cast_from(q[q_start + c]) * scale;
        grad_out[c] = f32::cast_from(grad[q_start + c]);
        acc[c] = 0.0;
    }
    for j in 0..i + 1 {
        let kv_start = row_start(batch, j, kv_head, seq, kv_heads, hd);
        let mut score = 0.0f32;
        let mut grad_p = 0.0f32;
        for c in 0..hd {
            score += query[c] * f32::cast_from(k[kv_start + c]);
            grad_p += grad_out[c] * f32::cast_from(v[kv_start + c]);
        }
        let grad_score = (score - row_lse).exp() * (grad_p - row_delta);
        for c in 0..hd {
            acc[c] += grad_score * f32::cast_from(k[kv_start + c]);
        }
    }
    for c in 0..hd {
        grad_q[q_start + c] = F::cast_from(acc[c] * scale);
    }
}

/// `grad_k` and `grad_v` are per query head, `[b, s, h, hd]` in f32.
#[cube(launch)]
fn attention_grad_kv_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_k: &mut Tensor<f32>,
    grad_v: &mut Tensor<f32>,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[define(F)] _dtype: ElemType,
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let j = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    if j >= seq {
        terminate!();
    }
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let kv_start = row_start(batch, j, kv_head, seq, kv_heads, hd);
    let mut key = Array::<f32>::new(hd);
    let mut value = Array::<f32>::new(hd);
    let mut acc_k = Array::<f32>::new(hd);
    let mut acc_v = Array::<f32>::new(hd);
    for c in 0..hd {
        key[c] = f32::cast_from(k[kv_start + c]) * scale;
        value[c] = f32::cast_from(v[kv_start + c]);
        acc_k[c] = 0.0;
        acc_v[c] = 0.0;
    }
    for i in j..seq {
        let q_start = row_start(batch, i, head, seq, heads, hd);
        let mut score = 0.0f32;
        let mut grad_p = 0.0f32;
        for c in 0..hd {
            score += key[c] * f32::cast_from(q[q_start + c]);
            grad_p += value[c] * f32::cast_from(grad[q_start + c]);
        }
        let p = (score - lse[(batch * heads + head) * seq + i]).exp();
        let grad_score = p * (grad_p - delta[(batch * seq + i) * heads + head]);
        for c in 0..hd {
            acc_v[c] += p * f32::cast_from(grad[q_start + c]);
            acc_k[c] += grad_score * f32::cast_from(q[q_start + c]);
        }
    }
    let out_start = row_start(batch, j, head, seq, heads, hd);
    for c in 0..hd {
        grad_k[out_start + c] = acc_k[c] * scale;
        grad_v[out_start + c] = acc_v[c];
    }
}

/// The launch grid: a cube per block of rows, per head, per sequence.
fn grid(batch: usize, seq: usize, heads: usize) -> CubeCount {
    CubeCount::Static(seq.div_ceil(ROWS_PER_CUBE) as u32, heads as u32, batch as u32)
}

/// `(output: [b, s, h, hd] in q's dtype, log-sum-exp: [b, h, s, 1] in f32)`.
pub(super) fn forward(q: CubeTensor, k: CubeTensor, v: CubeTensor, scale: f64) -> [CubeTensor; 2] {
    let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
    let [batch, seq, heads, hd] = q.shape().dims::<4>();
    let kv_heads = k.shape()[2];
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let output = empty_device_dtype(client.clone(), device.clone(), q.shape(), dtype);
    let lse = empty_device_dtype(client.clone(), device, Shape::from([batch, heads, seq, 1]), DType::F32);
    if batch * seq * heads * hd == 0 {
        return [output, lse];
    }
    attention_forward_kernel::launch(
        &client,
        grid(batch, seq, heads),
        CubeDim::new_1d(ROWS_PER_CUBE as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        output.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        seq as u32,
        heads as u32,
        kv_heads as u32,
        scale as f32,
        hd,
        dtype_to_storage_type(dtype),
    );
    [output, lse]
}

/// `[b, s, h, hd] -> [b, s, kv, hd]` in `dtype`: the gradients of a group's query heads summed.
fn sum_groups(grad: CubeTensor, kv_heads: usize, dtype: DType) -> CubeTensor {
    let [batch, seq, heads, hd] = grad.shape().dims::<4>();
    let summed = if heads == kv_heads {
        grad
    } else {
        let grouped = CubeBackend::float_reshape(grad, Shape::from([batch, seq, kv_heads, heads / kv_heads, hd]));
        CubeBackend::float_reshape(CubeBackend::float_sum_dim(grouped, 3), Shape::from([batch, seq, kv_heads, hd]))
    };
    cast(summed, dtype)
}

/// `(grad q, grad k, grad v)`, shaped and typed as `q`, `k` and `v`.
pub(super) fn backward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    output: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    scale: f64,
) -> [CubeTensor; 3] {
    let (q, k, v, lse, grad) =
        (into_contiguous(q), into_contiguous(k), into_contiguous(v), into_contiguous(lse), into_contiguous(grad));
    let [batch, seq, heads, hd] = q.shape().dims::<4>();
    let kv_heads = k.shape()[2];
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    // D_i = dO_i . O_i, [b, s, h, 1] in f32.
    let f32_of = |t: CubeTensor| cast(t, DType::F32);
    let delta =
        into_contiguous(CubeBackend::float_sum_dim(CubeBackend::float_mul(f32_of(grad.clone()), f32_of(output)), 3));
    let grad_q = empty_device_dtype(client.clone(), device.clone(), q.shape(), dtype);
    let per_head = Shape::from([batch, seq, heads, hd]);
    let grad_k = empty_device_dtype(client.clone(), device.clone(), per_head.clone(), DType::F32);
    let grad_v = empty_device_dtype(client.clone(), device, per_head, DType::F32);
    if batch * seq * heads * hd > 0 {
        attention_grad_q_kernel::launch(
            &client,
            grid(batch, seq, heads),
            CubeDim::new_1d(ROWS_PER_CUBE as u32),
            q.clone().into_tensor_arg(),
            k.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            delta.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_q.clone().into_tensor_arg(),
            seq as u32,
            heads as u32,
            kv_heads as u32,
            scale as f32,
            hd,
            dtype_to_storage_type(dtype),
        );
        attention_grad_kv_kernel::launch(
            &client,
            grid(batch, seq, heads),
            CubeDim::new_1d(ROWS_PER_CUBE as u32),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            lse.into_tensor_arg(),
            delta.into_tensor_arg(),
            grad.into_tensor_arg(),
            grad_k.clone().into_tensor_arg(),
            grad_v.clone().into_tensor_arg(),
            seq as u32,
            heads as u32,
            kv_heads as u32,
            scale as f32,
            hd,
            dtype_to_storage_type(dtype),
        );
    }
    [grad_q, sum_groups(grad_k, kv_heads, dtype), sum_groups(grad_v, kv_heads, dtype)]
}
