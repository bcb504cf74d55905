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
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// Rows (units) per cube.
pub(super) const ROWS_PER_CUBE: usize = 64;

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
pub(super) const MAX_JOINT_HEAD_DIM: usize = 32;

/// Rows per shared-memory tile for head size `hd`: two rows of `hd` f32 values and two f32
/// row statistics each (the `dK, dV` kernel's tiles; the others use less), within [`TILE_BYTES`].
pub(super) fn tile_rows(hd: usize) -> usize {
    (TILE_BYTES / (4 * (2 * hd + 2))).clamp(1, ROWS_PER_CUBE)
}

/// Where row `row` of head `head` of sequence `batch` starts in an operand whose `(batch, row)`
/// rows are `stride` values apart, beginning `offset` values into the buffer: a tensor `[b, s,
/// heads, hd]` of its own has `stride = heads hd`, `offset = 0`.
#[cube]
pub(super) fn row_start(
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
pub(super) fn load_value<F: Float, T: Float>(
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
pub(super) fn unrotated<T: Float>(
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
pub(super) fn load_tile<F: Float, T: Float>(
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
pub(super) fn last_row_of_cube(seq: usize) -> usize {
    let end = (CUBE_POS_X as usize + 1) * CUBE_DIM_X as usize;
    select(end < seq, end, seq) - 1
}

/// Where the operands lie: the queries' rows `q_stride` apart from `q_offset`, the keys' and
/// values' `kv_stride` apart from `k_offset` and `v_offset`.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct Layout {
    pub(super) seq: u32,
    pub(super) heads: u32,
    pub(super) kv_heads: u32,
    pub(super) q_stride: u32,
    pub(super) kv_stride: u32,
    pub(super) q_offset: u32,
    pub(super) k_offset: u32,
    pub(super) v_offset: u32,
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

/// The launch grid: a cube per block of rows, per head, per sequence.
pub(super) fn grid(batch: usize, seq: usize, heads: usize) -> CubeCount {
    CubeCount::Static(seq.div_ceil(ROWS_PER_CUBE) as u32, heads as u32, batch as u32)
}

/// The kernels' operands: queries, keys and values with where their rows lie, and the rotary
/// tables when the queries and keys are rotated as they are loaded.
pub(super) struct Operands {
    pub(super) q: CubeTensor,
    pub(super) k: CubeTensor,
    pub(super) v: CubeTensor,
    /// `(cos, sin)`, each `[s, hd]`.
    pub(super) tables: Option<(CubeTensor, CubeTensor)>,
    pub(super) batch: usize,
    pub(super) seq: usize,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) hd: usize,
    pub(super) q_stride: usize,
    pub(super) kv_stride: usize,
    pub(super) q_offset: usize,
    pub(super) k_offset: usize,
    pub(super) v_offset: usize,
}

impl Operands {
    /// `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`, each a tensor of its own.
    pub(super) fn separate(q: CubeTensor, k: CubeTensor, v: CubeTensor) -> Self {
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
    pub(super) fn packed(qkv: CubeTensor, cos: CubeTensor, sin: CubeTensor, heads: usize, kv_heads: usize) -> Self {
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

    pub(super) fn layout(&self) -> LayoutLaunch {
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
    pub(super) fn tables(&self) -> (CubeTensor, CubeTensor, bool, DType) {
        match &self.tables {
            Some((cos, sin)) => (cos.clone(), sin.clone(), true, cos.dtype),
            None => (self.q.clone(), self.q.clone(), false, self.q.dtype),
        }
    }

    pub(super) fn empty(&self) -> bool {
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
