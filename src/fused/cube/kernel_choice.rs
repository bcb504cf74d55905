//! Which inputs the CubeCL kernels take: the float types GPUs compute in, and the shapes and sizes
//! each kernel handles; anything else runs the portable bodies.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Cube, DType, Shape};

use super::{attention, elementwise};

/// Whether the kernels take tensors of `dtype`: the float types GPUs compute in.
pub(super) fn kernel_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// Whether the SwiGLU kernels take `gate`, `up` (and `grad`): one shape and one dtype of theirs,
/// and elements a `u32` counts.
pub(super) fn swiglu_kernels_take(gate: &FloatTensor<Cube>, others: &[&FloatTensor<Cube>]) -> bool {
    kernel_dtype(gate.dtype)
        && others.iter().all(|t| t.dtype == gate.dtype && t.shape == gate.shape)
        && elementwise::countable(gate.shape.num_elements())
}

/// Whether the packed SwiGLU kernels take `gate_up: [..., 2 d]` (and `grad: [..., d]`): a dtype of
/// theirs for both, an even last dimension, and elements a `u32` counts.
pub(super) fn swiglu_packed_kernels_take(gate_up: &FloatTensor<Cube>, grad: Option<&FloatTensor<Cube>>) -> bool {
    let rank = gate_up.shape.num_dims();
    if rank == 0 || !gate_up.shape[rank - 1].is_multiple_of(2) {
        return false;
    }
    let mut half = gate_up.shape.clone();
    half[rank - 1] /= 2;
    kernel_dtype(gate_up.dtype)
        && grad.is_none_or(|grad| grad.dtype == gate_up.dtype && grad.shape == half)
        && elementwise::countable(gate_up.shape.num_elements())
}

/// Whether the RoPE kernel takes `x: [b, s, h, hd]` with `cos, sin: [s, hd]`: dtypes of its own
/// (the tables' may differ from `x`'s), `hd` even, and elements a `u32` counts.
pub(super) fn rope_kernel_takes(x: &FloatTensor<Cube>, cos: &FloatTensor<Cube>, sin: &FloatTensor<Cube>) -> bool {
    if x.shape.num_dims() != 4 {
        return false;
    }
    let dims = x.shape.dims::<4>();
    let table = Shape::from([dims[1], dims[3]]);
    kernel_dtype(x.dtype)
        && kernel_dtype(cos.dtype)
        && sin.dtype == cos.dtype
        && dims[3] % 2 == 0
        && cos.shape == table
        && sin.shape == table
        && elementwise::countable(x.shape.num_elements())
}

/// Whether the attention kernels take `q: [b, s, h, hd]` and `k, v: [b, s, kv, hd]`: a dtype of
/// theirs for all three, the key/value heads a divisor of the query heads, a head size of at most
/// [`attention::MAX_HEAD_DIM`], and a grid of `b x h` cubes per block of rows within a GPU's
/// 65535 per axis.
pub(super) fn attention_kernels_take(q: &FloatTensor<Cube>, k: &FloatTensor<Cube>, v: &FloatTensor<Cube>) -> bool {
    let [batch, _, heads, head_dim] = q.shape.dims::<4>();
    let kv_heads = k.shape[2];
    kernel_dtype(q.dtype)
        && k.dtype == q.dtype
        && v.dtype == q.dtype
        && kv_heads > 0
        && heads % kv_heads == 0
        && head_dim <= attention::MAX_HEAD_DIM
        && batch <= 65_535
        && heads <= 65_535
}

/// Whether the packed attention kernels take `qkv: [b, s, (h + 2 kv) hd]` with `cos, sin: [s,
/// hd]`: what [`attention_kernels_take`] asks of the parts, no groups (`h = kv`: each part's
/// gradient is then written in place), `hd` even, and offsets a `u32` counts.
pub(super) fn packed_attention_kernels_take(
    qkv: &FloatTensor<Cube>,
    cos: &FloatTensor<Cube>,
    sin: &FloatTensor<Cube>,
    heads: usize,
    kv_heads: usize,
) -> bool {
    if qkv.shape.num_dims() != 3 || heads == 0 || heads != kv_heads {
        return false;
    }
    let [batch, seq, width] = qkv.shape.dims::<3>();
    let hd = width / (heads + 2 * kv_heads);
    let table = Shape::from([seq, hd]);
    kernel_dtype(qkv.dtype)
        && kernel_dtype(cos.dtype)
        && sin.dtype == cos.dtype
        && cos.shape == table
        && sin.shape == table
        && hd.is_multiple_of(2)
        && hd <= attention::MAX_HEAD_DIM
        && batch <= 65_535
        && heads <= 65_535
        && elementwise::countable(qkv.shape.num_elements())
}

/// Whether the column kernels take two or three `[d_in, w]` parts of one kernel dtype, packed
/// into `dtype`, with elements a `u32` counts.
pub(super) fn column_kernels_take(parts: &[&FloatTensor<Cube>], dtype: DType) -> bool {
    let rows = parts[0].shape[0];
    let elements: usize = parts.iter().map(|part| part.shape.num_elements()).sum();
    (2..=3).contains(&parts.len())
        && kernel_dtype(dtype)
        && parts.iter().all(|part| part.shape.num_dims() == 2 && part.shape[0] == rows && part.dtype == parts[0].dtype)
        && kernel_dtype(parts[0].dtype)
        && elementwise::countable(elements)
}

/// Whether the cross-entropy kernel takes `logits: [rows, vocab]` and `targets: [rows]`.
pub(super) fn cross_entropy_kernel_takes(logits: &FloatTensor<Cube>, targets: &IntTensor<Cube>) -> bool {
    let [rows, vocab] = logits.shape.dims::<2>();
    kernel_dtype(logits.dtype)
        && vocab > 0
        && targets.shape.num_elements() == rows
        && elementwise::countable(rows * vocab)
}
