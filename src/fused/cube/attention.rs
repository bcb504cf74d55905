//! Causal attention as CubeCL kernels, flash style: the forward keeps only the output and each
//! row's log-sum-exp; the backward recomputes the probabilities from them. Memory stays linear
//! in the sequence length. `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`, query head `n` reading
//! key/value head `n / (h / kv)`.
//!
//! The operands are either tensors of their own (contiguous) or the three parts of one packed
//! projection `qkv: [b, s, (h + 2 kv) hd]` (queries, then keys, then values: what one matrix
//! product of the three projections makes), read in place. Each operand's rows are found from a
//! stride and an offset ([`row_start`]); with rotary tables the queries and keys are rotated as
//! they are loaded (`x cos + rotate_half(x) sin`, in f32), and their gradients rotated back as
//! they are written, so RoPE costs no launch of its own.
//!
//! A cube of [`ROWS_PER_CUBE`] units takes a block of query rows (forward, `dQ`) or key rows
//! (`dK`, `dV`) of one head, a row per unit, the row's `hd` values in registers, sums in f32. The
//! rows it sweeps (keys and values, or queries and output gradients) pass through shared memory a
//! tile of [`tile_rows`] rows at a time, loaded once per cube with neighbouring units reading
//! neighbouring values; tiles wholly above the causal diagonal are never loaded.
//!
//! - forward, over keys `j <= i` with a reference maximum `m` and sum `l` (online softmax):
//!   `s_ij = scale q_i . k_j`, `O_i = sum_j exp(s_ij - m) v_j / l`, `lse_i = m + ln(l)`; `m`
//!   moves (and the sums are rescaled) only when a score passes it by more than
//!   [`RESCALE_MARGIN`], not at every key;
//! - backward, with `P_ij = exp(s_ij - lse_i)`, `D_i = dO_i . O_i` (the dQ kernel computes it
//!   from its row and writes it for the dK, dV kernel, which runs next) and
//!   `dS_ij = P_ij (dO_i . v_j - D_i)`:
//!   `dQ_i = scale sum_{j <= i} dS_ij k_j` per query row;
//!   `dV_j = sum_{i >= j} P_ij dO_i`, `dK_j = scale sum_{i >= j} dS_ij q_i` per key row and
//!   query head, summed over a group's query heads afterwards. For heads wider than
//!   [`MAX_JOINT_HEAD_DIM`] dV and dK are two launches, so that a unit holds two or three rows
//!   (`k_j` and `dV_j`; `k_j`, `v_j` and `dK_j`) where both at once would hold four; each then
//!   computes the scores and loads the query and output-gradient tiles again.
//!
//! The products are the units' own multiply-adds: no tensor cores (`cmma`) yet.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{DType, Shape, Slice, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::{cast, into_contiguous};
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::prelude::*;

/// Rows (units) per cube.
const ROWS_PER_CUBE: usize = 64;

/// How far (in natural-log units) a score may pass the forward's reference maximum before the
/// running sums are rescaled to it: each term is then at most `e^8` (about 3,000), far inside f32.
/// (FlashAttention-4's threshold is the same idea on base-2 scores.)
const RESCALE_MARGIN: f32 = 8.0;

/// Shared memory a cube uses for its tiles: 16 KiB, what every WebGPU device offers.
const TILE_BYTES: usize = 16 * 1024;

/// The largest head size the kernels take: each unit keeps up to four rows of `hd` values in
/// registers (three past [`MAX_JOINT_HEAD_DIM`]), and a tile's row must fit [`TILE_BYTES`].
/// Larger heads take the portable body.
pub(super) const MAX_HEAD_DIM: usize = 256;

/// The widest head whose dK and dV one launch computes together, a unit holding four rows (128
/// f32 values, half of CUDA's 255 registers a thread); wider heads take a launch for each.
const MAX_JOINT_HEAD_DIM: usize = 32;

/// Rows per shared-memory tile for head size `hd`: two rows of `hd` f32 values and two f32
/// row statistics each (the `dK, dV` kernel's tiles; the others use less), within [`TILE_BYTES`].
fn tile_rows(hd: usize) -> usize {
    (TILE_BYTES / (4 * (2 * hd + 2))).clamp(1, ROWS_PER_CUBE)
}

/// Where row `row` of head `head` of sequence `batch` starts in an operand whose `(batch, row)`
/// rows are `stride` values apart, beginning `offset` values into the buffer: a tensor `[b, s,
/// heads, hd]` of its own has `stride = heads hd`, `offset = 0`.
#[cube]
fn row_start(
    batch: usize,
    row: usize,
    head: usize,
    seq: usize,
    stride: usize,
    offset: usize,
    #[comptime] hd: usize,
) -> usize {
    (batch * seq + row) * stride + offset + head * hd
}

/// Value `c` of the row starting at `start` of `source`, in f32; with `rope`, rotated by the
/// angles of position `position` (`x cos + rotate_half(x) sin`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_value<F: Float, T: Float>(
    source: &Tensor<F>,
    start: usize,
    c: usize,
    position: usize,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    #[comptime] hd: usize,
    #[comptime] rope: bool,
) -> f32 {
    let mut value = f32::cast_from(source[start + c]);
    if rope {
        let half = hd / 2;
        let at = position * hd + c;
        // rotate_half: the value half a head away, negated in the first half.
        let sign = select(c < half, -1.0f32, 1.0f32);
        let partner = f32::cast_from(source[start + (c + half) % hd]);
        value = value * f32::cast_from(cos[at]) + sign * partner * f32::cast_from(sin[at]);
    }
    value
}

/// Value `c` of the gradient `grad` (a row in registers) of a rotated row, rotated back to the
/// gradient of the row before the rotation (the rotation by minus the angles); without `rope`,
/// the value itself.
#[cube]
fn unrotated<T: Float>(
    grad: &Array<f32>,
    c: usize,
    position: usize,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    #[comptime] hd: usize,
    #[comptime] rope: bool,
) -> f32 {
    let mut value = grad[c];
    if rope {
        let half = hd / 2;
        let at = position * hd + c;
        let sign = select(c < half, 1.0f32, -1.0f32);
        value = value * f32::cast_from(cos[at]) + sign * grad[(c + half) % hd] * f32::cast_from(sin[at]);
    }
    value
}

/// Copies rows `first..first + tile` (those below `seq`) of head `head` of `source` (rows
/// `stride` apart from `offset`) into `rows: [tile * hd]` in f32, the cube's units taking
/// consecutive values; with `rope`, rotated.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tile<F: Float, T: Float>(
    source: &Tensor<F>,
    rows: &mut Shared<[f32]>,
    batch: usize,
    first: usize,
    head: usize,
    seq: usize,
    stride: usize,
    offset: usize,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    #[comptime] hd: usize,
    #[comptime] tile: usize,
    #[comptime] rope: bool,
) {
    let mut e = UNIT_POS_X as usize;
    while e < tile * hd {
        let row = first + e / hd;
        if row < seq {
            let start = row_start(batch, row, head, seq, stride, offset, hd);
            rows[e] = load_value(source, start, e % hd, row, cos, sin, hd, rope);
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

/// Where the operands lie: the queries' rows `q_stride` apart from `q_offset`, the keys' and
/// values' `kv_stride` apart from `k_offset` and `v_offset`.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct Layout {
    seq: u32,
    heads: u32,
    kv_heads: u32,
    q_stride: u32,
    kv_stride: u32,
    q_offset: u32,
    k_offset: u32,
    v_offset: u32,
}

#[cube(launch)]
fn attention_forward_kernel<F: Float, T: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    cos: &Tensor<T>,
    sin: &Tensor<T>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    layout: &Layout,
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
    let mut keys = Shared::<[f32]>::new_slice(tile * hd);
    let mut values = Shared::<[f32]>::new_slice(tile * hd);
    let mut query = Array::<f32>::new(hd);
    let mut acc = Array::<f32>::new(hd);
    #[unroll]
    for c in 0..hd {
        query[c] = load_value(q, q_start, c, row, cos, sin, hd, rope) * scale;
        acc[c] = 0.0;
    }
    let mut row_max = f32::new(-1.0e30);
    let mut sum = f32::new(0.0);
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
                #[unroll]
                for c in 0..hd {
                    score += query[c] * keys[at + c];
                }
                // The sums are rescaled only when a score passes the reference maximum by more
                // than RESCALE_MARGIN: a few times a row, not at every key.
                if score > row_max + RESCALE_MARGIN {
                    let correction = (row_max - score).exp();
                    sum *= correction;
                    #[unroll]
                    for c in 0..hd {
                        acc[c] *= correction;
                    }
                    row_max = score;
                }
                let p = (score - row_max).exp();
                sum += p;
                #[unroll]
                for c in 0..hd {
                    acc[c] += p * values[at + c];
                }
            }
        }
        sync_cube();
        first += tile;
    }
    if active {
        let inv_sum = 1.0f32 / sum;
        let out_start = row_start(batch, i, head, seq, heads * hd, 0, hd);
        #[unroll]
        for c in 0..hd {
            output[out_start + c] = F::cast_from(acc[c] * inv_sum);
        }
        lse[(batch * heads + head) * seq + i] = row_max + sum.ln();
    }
}

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

/// The launch grid: a cube per block of rows, per head, per sequence.
fn grid(batch: usize, seq: usize, heads: usize) -> CubeCount {
    CubeCount::Static(seq.div_ceil(ROWS_PER_CUBE) as u32, heads as u32, batch as u32)
}

/// The kernels' operands: queries, keys and values with where their rows lie, and the rotary
/// tables when the queries and keys are rotated as they are loaded.
struct Operands {
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    /// `(cos, sin)`, each `[s, hd]`.
    tables: Option<(CubeTensor, CubeTensor)>,
    batch: usize,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    q_stride: usize,
    kv_stride: usize,
    q_offset: usize,
    k_offset: usize,
    v_offset: usize,
}

impl Operands {
    /// `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`, each a tensor of its own.
    fn separate(q: CubeTensor, k: CubeTensor, v: CubeTensor) -> Self {
        let [batch, seq, heads, hd] = q.shape().dims::<4>();
        let kv_heads = k.shape()[2];
        Operands {
            q: into_contiguous(q),
            k: into_contiguous(k),
            v: into_contiguous(v),
            tables: None,
            batch,
            seq,
            heads,
            kv_heads,
            hd,
            q_stride: heads * hd,
            kv_stride: kv_heads * hd,
            q_offset: 0,
            k_offset: 0,
            v_offset: 0,
        }
    }

    /// The three parts of `qkv: [b, s, (h + 2 kv) hd]`, queries and keys rotated by `cos, sin: [s, hd]`.
    fn packed(qkv: CubeTensor, cos: CubeTensor, sin: CubeTensor, heads: usize, kv_heads: usize) -> Self {
        let [batch, seq, width] = qkv.shape().dims::<3>();
        let hd = width / (heads + 2 * kv_heads);
        let qkv = into_contiguous(qkv);
        Operands {
            q: qkv.clone(),
            k: qkv.clone(),
            v: qkv,
            tables: Some((into_contiguous(cos), into_contiguous(sin))),
            batch,
            seq,
            heads,
            kv_heads,
            hd,
            q_stride: width,
            kv_stride: width,
            q_offset: 0,
            k_offset: heads * hd,
            v_offset: (heads + kv_heads) * hd,
        }
    }

    fn layout(&self) -> LayoutLaunch {
        let u = |n: usize| n as u32;
        LayoutLaunch::new(
            u(self.seq),
            u(self.heads),
            u(self.kv_heads),
            u(self.q_stride),
            u(self.kv_stride),
            u(self.q_offset),
            u(self.k_offset),
            u(self.v_offset),
        )
    }

    /// The tables, whether they rotate, and their dtype; without rotation the queries stand in
    /// for them (the kernels never read them then).
    fn tables(&self) -> (CubeTensor, CubeTensor, bool, DType) {
        match &self.tables {
            Some((cos, sin)) => (cos.clone(), sin.clone(), true, cos.dtype),
            None => (self.q.clone(), self.q.clone(), false, self.q.dtype),
        }
    }

    fn empty(&self) -> bool {
        self.batch * self.seq * self.heads * self.hd == 0
    }
}

/// `(output: [b, s, h, hd] in q's dtype, log-sum-exp: [b, h, s, 1] in f32)`.
fn launch_forward(operands: Operands, scale: f64) -> [CubeTensor; 2] {
    let Operands { batch, seq, heads, hd, .. } = operands;
    let (client, device, dtype) = (operands.q.client.clone(), operands.q.device.clone(), operands.q.dtype);
    let output = empty_device_dtype(client.clone(), device.clone(), Shape::from([batch, seq, heads, hd]), dtype);
    let lse = empty_device_dtype(client.clone(), device, Shape::from([batch, heads, seq, 1]), DType::F32);
    if operands.empty() {
        return [output, lse];
    }
    let (cos, sin, rope, table_dtype) = operands.tables();
    attention_forward_kernel::launch(
        &client,
        grid(batch, seq, heads),
        CubeDim::new_1d(ROWS_PER_CUBE as u32),
        operands.q.clone().into_tensor_arg(),
        operands.k.clone().into_tensor_arg(),
        operands.v.clone().into_tensor_arg(),
        cos.into_tensor_arg(),
        sin.into_tensor_arg(),
        output.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        operands.layout(),
        scale as f32,
        hd,
        tile_rows(hd),
        rope,
        [dtype_to_storage_type(dtype), dtype_to_storage_type(table_dtype)],
    );
    [output, lse]
}

/// `(output: [b, s, h, hd] in q's dtype, log-sum-exp: [b, h, s, 1] in f32)`.
pub(super) fn forward(q: CubeTensor, k: CubeTensor, v: CubeTensor, scale: f64) -> [CubeTensor; 2] {
    launch_forward(Operands::separate(q, k, v), scale)
}

/// [`forward`] of the parts of `qkv: [b, s, (h + 2 kv) hd]`, queries and keys rotated by `cos,
/// sin: [s, hd]` as they are loaded.
pub(super) fn packed_forward(
    qkv: CubeTensor,
    cos: CubeTensor,
    sin: CubeTensor,
    heads: usize,
    kv_heads: usize,
    scale: f64,
) -> [CubeTensor; 2] {
    launch_forward(Operands::packed(qkv, cos, sin, heads, kv_heads), scale)
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
