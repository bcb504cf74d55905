//! The backward of the CubeCL causal attention ([`attention`](super::attention), whose module doc
//! gives the layout and the math): a dQ kernel over query rows, which also writes `D_i`, then dK
//! and dV over key rows (one launch, or two for heads wider than
//! [`MAX_JOINT_HEAD_DIM`]), summed over a group's query heads afterwards.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{DType, Shape, Slice, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::{cast, into_contiguous};
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::prelude::*;

use super::attention::{
    grid, last_row_of_cube, load_tile, load_value, row_start, tile_rows, unrotated, Layout, Operands,
    MAX_JOINT_HEAD_DIM, ROWS_PER_CUBE,
};

/// Writes `dQ` into `grad_q` (rows `grad_q_stride` apart from `grad_q_offset`, rotated back with
/// `rope`) and `D_i` into `delta: [b, s, h, 1]`. `output` and `grad` are `[b, s, h, hd]`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_grad_q_kernel<F: Float, T: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    output: &Tensor<F>,
    lse: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_q: &mut Tensor<F>,
    delta: &mut Tensor<f32>,
    layout: &Layout,
    grad_q_stride: u32,
    grad_q_offset: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
    #[comptime] rope: bool,
    #[define(F, T)] _dtypes: [ElemType; 2],
) {
    let seq = layout.seq as usize;
    let heads = layout.heads as usize;
    let kv_heads = layout.kv_heads as usize;
    let (q_stride, kv_stride) = (layout.q_stride as usize, layout.kv_stride as usize);
    let i = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    let active = i < seq;
    let row = select(active, i, seq - 1);
    let last = last_row_of_cube(seq);
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let q_start = row_start(batch, row, head, seq, q_stride, layout.q_offset as usize, hd);
    let out_start = row_start(batch, row, head, seq, heads * hd, 0, hd);
    let row_lse = lse[(batch * heads + head) * seq + row];
    let mut keys = Shared::<[f32]>::new_slice(tile * hd);
    let mut values = Shared::<[f32]>::new_slice(tile * hd);
    let mut query = Array::<f32>::new(hd);
    let mut grad_out = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    let mut row_delta = 0.0f32;
    #[unroll]
    for c in 0..hd {
        query[c] = load_value(q, q_start, c, row, cos, sin, hd, rope) * scale;
        grad_out[c] = f32::cast_from(grad[out_start + c]);
        row_delta += grad_out[c] * f32::cast_from(output[out_start + c]);
        acc[c] = 0.0;
    }
    // D_i, for the dK, dV kernel that runs next.
    if active {
        delta[(batch * seq + row) * heads + head] = row_delta;
    }
    let mut first = 0usize;
    while first <= last {
        let (k_offset, v_offset) = (layout.k_offset as usize, layout.v_offset as usize);
        load_tile(k, &mut keys, batch, first, kv_head, seq, kv_stride, k_offset, cos, sin, hd, tile, rope);
        load_tile(v, &mut values, batch, first, kv_head, seq, kv_stride, v_offset, cos, sin, hd, tile, false);
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
            acc[c] *= scale;
        }
        let grad_start = row_start(batch, row, head, seq, grad_q_stride as usize, grad_q_offset as usize, hd);
        #[unroll]
        for c in 0..hd {
            grad_q[grad_start + c] = F::cast_from(unrotated(&acc, c, row, cos, sin, hd, rope));
        }
    }
}

/// Writes `dK` (with `writes_k`) and `dV` (with `writes_v`) of each query head into `grad_kv`
/// (rows `grad_kv_stride` apart, from `grad_k_offset` and `grad_v_offset`; `dK` rotated back with
/// `rope`): in f32 where a group's heads are summed afterwards, in the inputs' type without
/// groups. `grad` is `[b, s, h, hd]`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_grad_kv_kernel<F: Float, G: Float, T: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    grad: &Tensor<F>,
    grad_kv: &mut Tensor<G>,
    layout: &Layout,
    grad_kv_stride: u32,
    grad_k_offset: u32,
    grad_v_offset: u32,
    scale: f32,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
    #[comptime] rope: bool,
    #[comptime] writes_k: bool,
    #[comptime] writes_v: bool,
    #[define(F, G, T)] _dtypes: [ElemType; 3],
) {
    let seq = layout.seq as usize;
    let heads = layout.heads as usize;
    let kv_heads = layout.kv_heads as usize;
    let (q_stride, kv_stride) = (layout.q_stride as usize, layout.kv_stride as usize);
    let first_key = CUBE_POS_X as usize * CUBE_DIM_X as usize;
    let j = first_key + UNIT_POS_X as usize;
    let active = j < seq;
    let row = select(active, j, seq - 1);
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let kv_head = head / (heads / kv_heads);
    let k_start = row_start(batch, row, kv_head, seq, kv_stride, layout.k_offset as usize, hd);
    let v_start = row_start(batch, row, kv_head, seq, kv_stride, layout.v_offset as usize, hd);
    let mut queries = Shared::<[f32]>::new_slice(tile * hd);
    let mut grads = Shared::<[f32]>::new_slice(tile * hd);
    let mut lses = Shared::<[f32]>::new_slice(tile);
    let mut deltas = Shared::<[f32]>::new_slice(tile);
    // The rows a unit holds: its key, and its value and dK where it writes dK, dV where dV.
    let k_width = comptime!(if writes_k { hd } else { 1 });
    let v_width = comptime!(if writes_v { hd } else { 1 });
    let mut key = Array::<f32>::new(hd);
    let mut value = Array::<f32>::new(k_width);
    let mut acc_k = Array::<f32>::new(k_width);
    let mut acc_v = Array::<f32>::new(v_width);
    #[unroll]
    for c in 0..hd {
        key[c] = load_value(k, k_start, c, row, cos, sin, hd, rope) * scale;
    }
    if writes_k {
        #[unroll]
        for c in 0..hd {
            value[c] = f32::cast_from(v[v_start + c]);
            acc_k[c] = 0.0;
        }
    }
    if writes_v {
        #[unroll]
        for c in 0..hd {
            acc_v[c] = 0.0;
        }
    }
    // Query rows below the cube's first key row see none of its keys: the sweep starts there.
    let mut first = first_key;
    while first < seq {
        let q_offset = layout.q_offset as usize;
        load_tile(q, &mut queries, batch, first, head, seq, q_stride, q_offset, cos, sin, hd, tile, rope);
        load_tile(grad, &mut grads, batch, first, head, seq, heads * hd, 0, cos, sin, hd, tile, false);
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
                #[unroll]
                for c in 0..hd {
                    score += key[c] * queries[at + c];
                }
                let p = (score - lses[i - first]).exp();
                if writes_v {
                    #[unroll]
                    for c in 0..hd {
                        acc_v[c] += p * grads[at + c];
                    }
                }
                if writes_k {
                    let mut grad_p = 0.0f32;
                    #[unroll]
                    for c in 0..hd {
                        grad_p += value[c] * grads[at + c];
                    }
                    let grad_score = p * (grad_p - deltas[i - first]);
                    #[unroll]
                    for c in 0..hd {
                        acc_k[c] += grad_score * queries[at + c];
                    }
                }
            }
        }
        sync_cube();
        first += tile;
    }
    if active {
        let stride = grad_kv_stride as usize;
        if writes_k {
            #[unroll]
            for c in 0..hd {
                acc_k[c] *= scale;
            }
            let k_out = row_start(batch, j, head, seq, stride, grad_k_offset as usize, hd);
            #[unroll]
            for c in 0..hd {
                grad_kv[k_out + c] = G::cast_from(unrotated(&acc_k, c, j, cos, sin, hd, rope));
            }
        }
        if writes_v {
            let v_out = row_start(batch, j, head, seq, stride, grad_v_offset as usize, hd);
            #[unroll]
            for c in 0..hd {
                grad_kv[v_out + c] = G::cast_from(acc_v[c]);
            }
        }
    }
}

/// Where the backward writes a gradient: a buffer whose `(batch, row)` rows are `stride` apart,
/// the first (queries, or keys) from `offset`, the second (values) from `second_offset`.
struct Target {
    tensor: CubeTensor,
    stride: usize,
    offset: usize,
    second_offset: usize,
}

/// Runs the dQ and the dK, dV kernels, writing into `grad_q` and `grad_kv`.
fn launch_backward(
    operands: Operands,
    output: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    scale: f64,
    grad_q: &Target,
    grad_kv: &Target,
) {
    if operands.empty() {
        return;
    }
    let Operands { batch, seq, heads, hd, .. } = operands;
    let (output, lse, grad) = (into_contiguous(output), into_contiguous(lse), into_contiguous(grad));
    let (client, device, dtype) = (operands.q.client.clone(), operands.q.device.clone(), operands.q.dtype);
    let (cos, sin, rope, table_dtype) = operands.tables();
    // D_i = dO_i . O_i, [b, s, h, 1] in f32: written by the dQ kernel, read by the dK, dV kernel.
    let delta = empty_device_dtype(client.clone(), device, Shape::from([batch, seq, heads, 1]), DType::F32);
    let u = |n: usize| n as u32;
    attention_grad_q_kernel::launch(
        &client,
        grid(batch, seq, heads),
        CubeDim::new_1d(ROWS_PER_CUBE as u32),
        operands.q.clone().into_tensor_arg(),
        operands.k.clone().into_tensor_arg(),
        operands.v.clone().into_tensor_arg(),
        cos.clone().into_tensor_arg(),
        sin.clone().into_tensor_arg(),
        output.into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        grad.clone().into_tensor_arg(),
        grad_q.tensor.clone().into_tensor_arg(),
        delta.clone().into_tensor_arg(),
        operands.layout(),
        u(grad_q.stride),
        u(grad_q.offset),
        scale as f32,
        hd,
        tile_rows(hd),
        rope,
        [dtype_to_storage_type(dtype), dtype_to_storage_type(table_dtype)],
    );
    // (writes dK, writes dV) per launch: both at once for narrow heads, else one each.
    let parts: &[(bool, bool)] =
        if hd <= MAX_JOINT_HEAD_DIM { &[(true, true)] } else { &[(false, true), (true, false)] };
    for &(writes_k, writes_v) in parts {
        attention_grad_kv_kernel::launch(
            &client,
            grid(batch, seq, heads),
            CubeDim::new_1d(ROWS_PER_CUBE as u32),
            operands.q.clone().into_tensor_arg(),
            operands.k.clone().into_tensor_arg(),
            operands.v.clone().into_tensor_arg(),
            cos.clone().into_tensor_arg(),
            sin.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            delta.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_kv.tensor.clone().into_tensor_arg(),
            operands.layout(),
            u(grad_kv.stride),
            u(grad_kv.offset),
            u(grad_kv.second_offset),
            scale as f32,
            hd,
            tile_rows(hd),
            rope,
            writes_k,
            writes_v,
            [
                dtype_to_storage_type(dtype),
                dtype_to_storage_type(grad_kv.tensor.dtype),
                dtype_to_storage_type(table_dtype),
            ],
        );
    }
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
    let operands = Operands::separate(q, k, v);
    let Operands { batch, seq, heads, kv_heads, hd, .. } = operands;
    let (client, device, dtype) = (operands.q.client.clone(), operands.q.device.clone(), operands.q.dtype);
    let grad_q = empty_device_dtype(client.clone(), device.clone(), Shape::from([batch, seq, heads, hd]), dtype);
    // dK and dV per query head, one after the other in one buffer `[2, b, s, h, hd]`; without
    // groups to sum, in the inputs' type at once.
    let grad_kv_dtype = if heads == kv_heads { dtype } else { DType::F32 };
    let grad_kv = empty_device_dtype(client, device, Shape::from([2, batch, seq, heads, hd]), grad_kv_dtype);
    let per_head = batch * seq * heads * hd;
    launch_backward(
        operands,
        output,
        lse,
        grad,
        scale,
        &Target { tensor: grad_q.clone(), stride: heads * hd, offset: 0, second_offset: 0 },
        &Target { tensor: grad_kv.clone(), stride: heads * hd, offset: 0, second_offset: per_head },
    );
    let part = |index: usize| {
        let slices =
            [Slice::from(index..index + 1), Slice::from(..), Slice::from(..), Slice::from(..), Slice::from(..)];
        let one = CubeBackend::float_slice(grad_kv.clone(), &slices);
        sum_groups(CubeBackend::float_reshape(one, Shape::from([batch, seq, heads, hd])), kv_heads, dtype)
    };
    [grad_q, part(0), part(1)]
}

/// The gradient of [`packed_forward`]'s `qkv`, `[b, s, (h + 2 kv) hd]`: each part written in
/// place (the queries' and keys' rotated back). Takes no groups (`h = kv`).
#[allow(clippy::too_many_arguments)]
pub(super) fn packed_backward(
    qkv: CubeTensor,
    cos: CubeTensor,
    sin: CubeTensor,
    output: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    heads: usize,
    kv_heads: usize,
    scale: f64,
) -> CubeTensor {
    assert_eq!(heads, kv_heads, "packed attention backward: grouped heads take the portable body");
    let operands = Operands::packed(qkv, cos, sin, heads, kv_heads);
    let grad_qkv =
        empty_device_dtype(operands.q.client.clone(), operands.q.device.clone(), operands.q.shape(), operands.q.dtype);
    let (stride, k_offset, v_offset) = (operands.q_stride, operands.k_offset, operands.v_offset);
    launch_backward(
        operands,
        output,
        lse,
        grad,
        scale,
        &Target { tensor: grad_qkv.clone(), stride, offset: 0, second_offset: 0 },
        &Target { tensor: grad_qkv.clone(), stride, offset: k_offset, second_offset: v_offset },
    );
    grad_qkv
}
