//! Causal attention as CubeCL kernels, flash style: the forward keeps only the output and each
//! row's log-sum-exp; the backward recomputes the probabilities from them. Memory stays linear
//! in the sequence length. `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]` (contiguous), query head
//! `n` reading key/value head `n / (h / kv)`.
//!
//! A cube of [`ROWS_PER_CUBE`] units takes a block of query rows (forward, `dQ`) or key rows
//! (`dK`, `dV`) of one head, a row per unit, the row's `hd` values in registers, sums in f32. The
//! rows it sweeps (keys and values, or queries and output gradients) pass through shared memory a
//! tile of [`tile_rows`] rows at a time, loaded once per cube with neighbouring units reading
//! neighbouring values; tiles wholly above the causal diagonal are never loaded.
//!
//! - forward, over keys `j <= i` with a running maximum `m` and sum `l` (online softmax):
//!   `s_ij = scale q_i . k_j`, `O_i = sum_j exp(s_ij - m) v_j / l`, `lse_i = m + ln(l)`;
//! - backward, with `P_ij = exp(s_ij - lse_i)`, `D_i = dO_i . O_i` (the dQ kernel computes it
//!   from its row and writes it for the dK, dV kernel, which runs next) and
//!   `dS_ij = P_ij (dO_i . v_j - D_i)`:
//!   `dQ_i = scale sum_{j <= i} dS_ij k_j` per query row;
//!   `dV_j = sum_{i >= j} P_ij dO_i`, `dK_j = scale sum_{i >= j} dS_ij q_i` per key row and
//!   query head, summed over a group's query heads afterwards.
//!
//! The products are the units' own multiply-adds: no tensor cores (`cmma`) yet.

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

/// Shared memory a cube uses for its tiles: 16 KiB, what every WebGPU device offers.
const TILE_BYTES: usize = 16 * 1024;

/// The largest head size the kernels take: each unit keeps up to four rows of `hd` values in
/// registers, and a tile's row must fit [`TILE_BYTES`]. Larger heads take the portable body.
pub(super) const MAX_HEAD_DIM: usize = 256;

/// Rows per shared-memory tile for head size `hd`: two rows of `hd` f32 values and two f32
/// row statistics each (the `dK, dV` kernel's tiles; the others use less), within [`TILE_BYTES`].
fn tile_rows(hd: usize) -> usize {
    (TILE_BYTES / (4 * (2 * hd + 2))).clamp(1, ROWS_PER_CUBE)
}

/// Where row `row` of head `head` of sequence `batch` starts in a `[b, s, heads, hd]` tensor.
#[cube]
fn row_start(batch: usize, row: usize, head: usize, seq: usize, heads: usize, #[comptime] hd: usize) -> usize {
    ((batch * seq + row) * heads + head) * hd
}

/// Copies rows `first..first + tile` (those below `seq`) of head `head` of `source: [b, s,
/// heads, hd]` into `rows: [tile * hd]` in f32, the cube's units taking consecutive values.
#[cube]
fn load_tile<F: Float>(
    source: &Tensor<F>,
    rows: &mut Shared<[f32]>,
    batch: usize,
    first: usize,
    head: usize,
    seq: usize,
    heads: usize,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
) {
    let mut e = UNIT_POS_X as usize;
    while e < tile * hd {
        let row = first + e / hd;
        if row < seq {
            rows[e] = f32::cast_from(source[row_start(batch, row, head, seq, heads, hd) + e % hd]);
        }
        e += CUBE_DIM_X as usize;
    }
}

/// The last row of the cube's block of rows (its units' rows that are below `seq`).
#[cube]
fn last_row_of_cube(seq: usize) -> usize {
    let end = (CUBE_POS_X as usize + 1) * CUBE_DIM_X as usize;
    select(end < seq, end, seq) - 1
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
    #[comptime] tile: usize,
    #[define(F)] _dtype: ElemType,
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    let active = i < seq;
    let row = select(active, i, seq - 1);
    let last = last_row_of_cube(seq);
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let q_start = row_start(batch, row, head, seq, heads, hd);
    let mut keys = Shared::<[f32]>::new_slice(tile * hd);
    let mut values = Shared::<[f32]>::new_slice(tile * hd);
    let mut query = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    #[unroll]
    for c in 0..hd {
        query[c] = f32::cast_from(q[q_start + c]) * scale;
        acc[c] = 0.0;
    }
    let mut row_max = f32::new(-1.0e30);
    let mut sum = f32::new(0.0);
    let mut first = 0usize;
    while first <= last {
        load_tile(k, &mut keys, batch, first, kv_head, seq, kv_heads, hd, tile);
        load_tile(v, &mut values, batch, first, kv_head, seq, kv_heads, hd, tile);
        sync_cube();
        if active && first <= i {
            let end = select(first + tile <= i, first + tile, i + 1);
            for j in first..end {
                let at = (j - first) * hd;
                let mut score = 0.0f32;
                #[unroll]
                for c in 0..hd {
                    score += query[c] * keys[at + c];
                }
                let new_max = max(row_max, score);
                let correction = (row_max - new_max).exp();
                let p = (score - new_max).exp();
                sum = sum * correction + p;
                #[unroll]
                for c in 0..hd {
                    acc[c] = acc[c] * correction + p * values[at + c];
                }
                row_max = new_max;
            }
        }
        sync_cube();
        first += tile;
    }
    if active {
        let inv_sum = 1.0f32 / sum;
        #[unroll]
        for c in 0..hd {
            output[q_start + c] = F::cast_from(acc[c] * inv_sum);
        }
        lse[(batch * heads + head) * seq + i] = row_max + sum.ln();
    }
}

#[cube(launch)]
fn attention_grad_q_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    output: &Tensor<F>,
    lse: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_q: &mut Tensor<F>,
    delta: &mut Tensor<f32>,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
    #[define(F)] _dtype: ElemType,
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    let active = i < seq;
    let row = select(active, i, seq - 1);
    let last = last_row_of_cube(seq);
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let q_start = row_start(batch, row, head, seq, heads, hd);
    let row_lse = lse[(batch * heads + head) * seq + row];
    let mut keys = Shared::<[f32]>::new_slice(tile * hd);
    let mut values = Shared::<[f32]>::new_slice(tile * hd);
    let mut query = Array::<f32>::new(hd);
    let mut grad_out = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    let mut row_delta = 0.0f32;
    #[unroll]
    for c in 0..hd {
        query[c] = f32::cast_from(q[q_start + c]) * scale;
        grad_out[c] = f32::cast_from(grad[q_start + c]);
        row_delta += grad_out[c] * f32::cast_from(output[q_start + c]);
        acc[c] = 0.0;
    }
    // D_i, for the dK, dV kernel that runs next.
    if active {
        delta[(batch * seq + row) * heads + head] = row_delta;
    }
    let mut first = 0usize;
    while first <= last {
        load_tile(k, &mut keys, batch, first, kv_head, seq, kv_heads, hd, tile);
        load_tile(v, &mut values, batch, first, kv_head, seq, kv_heads, hd, tile);
        sync_cube();
        if active && first <= i {
            let end = select(first + tile <= i, first + tile, i + 1);
            for j in first..end {
                let at = (j - first) * hd;
                let mut score = 0.0f32;
                let mut grad_p = 0.0f32;
                #[unroll]
                for c in 0..hd {
                    score += query[c] * keys[at + c];
                    grad_p += grad_out[c] * values[at + c];
                }
                let grad_score = (score - row_lse).exp() * (grad_p - row_delta);
                #[unroll]
                for c in 0..hd {
                    acc[c] += grad_score * keys[at + c];
                }
            }
        }
        sync_cube();
        first += tile;
    }
    if active {
        #[unroll]
        for c in 0..hd {
            grad_q[q_start + c] = F::cast_from(acc[c] * scale);
        }
    }
}

/// `grad_k` and `grad_v` are per query head, `[b, s, h, hd]`: in f32 where a group's heads are
/// summed afterwards, in the inputs' type without groups.
#[cube(launch)]
fn attention_grad_kv_kernel<F: Float, G: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_k: &mut Tensor<G>,
    grad_v: &mut Tensor<G>,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let seq = seq as usize;
    let heads = heads as usize;
    let kv_heads = kv_heads as usize;
    let first_key = CUBE_POS_X as usize * CUBE_DIM_X as usize;
    let j = first_key + UNIT_POS_X as usize;
    let active = j < seq;
    let row = select(active, j, seq - 1);
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let kv_start = row_start(batch, row, kv_head, seq, kv_heads, hd);
    let mut queries = Shared::<[f32]>::new_slice(tile * hd);
    let mut grads = Shared::<[f32]>::new_slice(tile * hd);
    let mut lses = Shared::<[f32]>::new_slice(tile);
    let mut deltas = Shared::<[f32]>::new_slice(tile);
    let mut key = Array::<f32>::new(hd);
    let mut value = Array::<f32>::new(hd);
    let mut acc_k = Array::<f32>::new(hd);
    let mut acc_v = Array::<f32>::new(hd);
    #[unroll]
    for c in 0..hd {
        key[c] = f32::cast_from(k[kv_start + c]) * scale;
        value[c] = f32::cast_from(v[kv_start + c]);
        acc_k[c] = 0.0;
        acc_v[c] = 0.0;
    }
    // Query rows below the cube's first key row see none of its keys: the sweep starts there.
    let mut first = first_key;
    while first < seq {
        load_tile(q, &mut queries, batch, first, head, seq, heads, hd, tile);
        load_tile(grad, &mut grads, batch, first, head, seq, heads, hd, tile);
        let unit = UNIT_POS_X as usize;
        if unit < tile && first + unit < seq {
            lses[unit] = lse[(batch * heads + head) * seq + first + unit];
            deltas[unit] = delta[(batch * seq + first + unit) * heads + head];
        }
        sync_cube();
        let end = select(first + tile < seq, first + tile, seq);
        if active && j < end {
            for i in select(j > first, j, first)..end {
                let at = (i - first) * hd;
                let mut score = 0.0f32;
                let mut grad_p = 0.0f32;
                #[unroll]
                for c in 0..hd {
                    score += key[c] * queries[at + c];
                    grad_p += value[c] * grads[at + c];
                }
                let p = (score - lses[i - first]).exp();
                let grad_score = p * (grad_p - deltas[i - first]);
                #[unroll]
                for c in 0..hd {
                    acc_v[c] += p * grads[at + c];
                    acc_k[c] += grad_score * queries[at + c];
                }
            }
        }
        sync_cube();
        first += tile;
    }
    if active {
        let out_start = row_start(batch, j, head, seq, heads, hd);
        #[unroll]
        for c in 0..hd {
            grad_k[out_start + c] = G::cast_from(acc_k[c] * scale);
            grad_v[out_start + c] = G::cast_from(acc_v[c]);
        }
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
        tile_rows(hd),
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
    let output = into_contiguous(output);
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    // D_i = dO_i . O_i, [b, s, h, 1] in f32: written by the dQ kernel, read by the dK, dV kernel.
    let delta = empty_device_dtype(client.clone(), device.clone(), Shape::from([batch, seq, heads, 1]), DType::F32);
    let grad_q = empty_device_dtype(client.clone(), device.clone(), q.shape(), dtype);
    let per_head = Shape::from([batch, seq, heads, hd]);
    // Without groups to sum, the per-head gradients are the result: in the inputs' type at once.
    let grad_kv_dtype = if heads == kv_heads { dtype } else { DType::F32 };
    let grad_k = empty_device_dtype(client.clone(), device.clone(), per_head.clone(), grad_kv_dtype);
    let grad_v = empty_device_dtype(client.clone(), device, per_head, grad_kv_dtype);
    if batch * seq * heads * hd > 0 {
        attention_grad_q_kernel::launch(
            &client,
            grid(batch, seq, heads),
            CubeDim::new_1d(ROWS_PER_CUBE as u32),
            q.clone().into_tensor_arg(),
            k.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            output.into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_q.clone().into_tensor_arg(),
            delta.clone().into_tensor_arg(),
            seq as u32,
            heads as u32,
            kv_heads as u32,
            scale as f32,
            hd,
            tile_rows(hd),
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
            tile_rows(hd),
            [dtype_to_storage_type(dtype), dtype_to_storage_type(grad_kv_dtype)],
        );
    }
    [grad_q, sum_groups(grad_k, kv_heads, dtype), sum_groups(grad_v, kv_heads, dtype)]
}
