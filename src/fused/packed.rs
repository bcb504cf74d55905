//! Packed projections in Burn's backend ops: the portable bodies of
//! [`FusedKernels::packed_attention_forward`](super::FusedKernels::packed_attention_forward) and
//! [`FusedKernels::swiglu_packed_forward`](super::FusedKernels::swiglu_packed_forward), their
//! backwards, and the packing of weights' columns. Backends without kernels of their own for these
//! (flex, ndarray, LibTorch, grouped heads on the GPUs) run them: the parts are cut out of the
//! packed tensor (rotated by the backend's RoPE) and passed to the backend's attention or SwiGLU.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DType, Shape, Slice, TensorMetadata};

fn cast<B: Backend>(x: FloatTensor<B>, dtype: DType) -> FloatTensor<B> {
    if x.dtype() == dtype {
        x
    } else {
        B::float_cast(x, dtype.into())
    }
}

/// Columns `start..end` of the last dimension of `x`.
fn columns<B: Backend>(x: FloatTensor<B>, start: usize, end: usize) -> FloatTensor<B> {
    let rank = x.shape().num_dims();
    let mut slices = vec![Slice::from(..); rank];
    slices[rank - 1] = Slice::from(start..end);
    B::float_slice(x, &slices)
}

/// `qkv: [b, s, (h + 2 kv) hd]` cut into `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`.
pub(super) fn split_qkv<B: Backend>(qkv: FloatTensor<B>, heads: usize, kv_heads: usize) -> [FloatTensor<B>; 3] {
    let [batch, seq, width] = qkv.shape().dims::<3>();
    let hd = width / (heads + 2 * kv_heads);
    let bounds = [(0, heads), (heads, heads + kv_heads), (heads + kv_heads, heads + 2 * kv_heads)];
    bounds.map(|(first, end)| {
        let part = columns::<B>(qkv.clone(), first * hd, end * hd);
        B::float_reshape(part, Shape::from([batch, seq, end - first, hd]))
    })
}

/// `x, cos, sin -> x rotated`: a backend's RoPE.
type Rope<B> = fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>;

/// A backend's RoPE and attention, forward and backward: what the packed attention's portable body
/// builds on (the backend's [`FusedKernels`](super::FusedKernels) methods of those names).
pub struct AttentionOps<B: Backend> {
    /// RoPE on `[b, s, heads, hd]`.
    pub rope: Rope<B>,
    /// `q, k, v, scale -> (output, log-sum-exp)`.
    #[allow(clippy::type_complexity)]
    pub forward: fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64) -> (FloatTensor<B>, FloatTensor<B>),
    /// `q, k, v, output, log-sum-exp, grad, scale -> (grad q, grad k, grad v)`.
    #[allow(clippy::type_complexity)]
    pub backward: fn(
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        f64,
    ) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>),
}

/// The queries and keys of `qkv` rotated by `rope`, and the values: the operands of attention.
fn rotated_operands<B: Backend>(
    qkv: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    rope: Rope<B>,
) -> [FloatTensor<B>; 3] {
    let dtype = qkv.dtype();
    let (cos, sin) = (cast::<B>(cos, dtype), cast::<B>(sin, dtype));
    let [q, k, v] = split_qkv::<B>(qkv, heads, kv_heads);
    [rope(q, cos.clone(), sin.clone()), rope(k, cos, sin), v]
}

/// See [`FusedKernels::packed_attention_forward`](super::FusedKernels::packed_attention_forward).
pub fn attention_forward<B: Backend>(
    qkv: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    scale: f64,
    ops: &AttentionOps<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [batch, seq, width] = qkv.shape().dims::<3>();
    if qkv.shape().num_elements() == 0 {
        // No rows to attend: empty results (a part cut from an empty tensor trips flex).
        let hd = width / (heads + 2 * kv_heads);
        let zeros = |dims: [usize; 4], dtype: DType| B::float_zeros(Shape::from(dims), &qkv.device(), dtype.into());
        return (zeros([batch, seq, heads, hd], qkv.dtype()), zeros([batch, heads, seq, 1], DType::F32));
    }
    let [q, k, v] = rotated_operands::<B>(qkv, cos, sin, heads, kv_heads, ops.rope);
    (ops.forward)(q, k, v, scale)
}

/// See [`FusedKernels::packed_attention_backward`](super::FusedKernels::packed_attention_backward):
/// the rotations recomputed, attention's backward, the gradients of the queries and keys rotated
/// back (RoPE by minus the angles), and the three put side by side.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<B: Backend>(
    qkv: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    output: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    scale: f64,
    ops: &AttentionOps<B>,
) -> FloatTensor<B> {
    let [batch, seq, width] = qkv.shape().dims::<3>();
    let dtype = qkv.dtype();
    if qkv.shape().num_elements() == 0 {
        return B::float_zeros(qkv.shape(), &qkv.device(), dtype.into());
    }
    let [q, k, v] = rotated_operands::<B>(qkv, cos.clone(), sin.clone(), heads, kv_heads, ops.rope);
    let (grad_q, grad_k, grad_v) = (ops.backward)(q, k, v, output, lse, grad, scale);
    let (cos, minus_sin) = (cast::<B>(cos, dtype), B::float_neg(cast::<B>(sin, dtype)));
    let grad_q = (ops.rope)(grad_q, cos.clone(), minus_sin.clone());
    let grad_k = (ops.rope)(grad_k, cos, minus_sin);
    let flat = |x: FloatTensor<B>| {
        let n = x.shape().num_elements() / (batch * seq).max(1);
        B::float_reshape(x, Shape::from([batch, seq, n]))
    };
    let packed = B::float_cat(vec![flat(grad_q), flat(grad_k), flat(grad_v)], 2);
    debug_assert_eq!(packed.shape().dims::<3>(), [batch, seq, width]);
    packed
}

/// `gate_up: [..., 2 d]` cut into its halves.
fn halves<B: Backend>(gate_up: FloatTensor<B>) -> [FloatTensor<B>; 2] {
    let shape = gate_up.shape();
    let d = shape[shape.num_dims() - 1] / 2;
    [columns::<B>(gate_up.clone(), 0, d), columns::<B>(gate_up, d, 2 * d)]
}

/// See [`FusedKernels::swiglu_packed_forward`](super::FusedKernels::swiglu_packed_forward), on the
/// backend's `swiglu` of separate halves.
pub fn swiglu_forward<B: Backend>(
    gate_up: FloatTensor<B>,
    swiglu: fn(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<B> {
    if gate_up.shape().num_elements() == 0 {
        let mut shape = gate_up.shape();
        let last = shape.num_dims() - 1;
        shape[last] /= 2;
        return B::float_zeros(shape, &gate_up.device(), gate_up.dtype().into());
    }
    let [gate, up] = halves::<B>(gate_up);
    swiglu(gate, up)
}

/// See [`FusedKernels::swiglu_packed_backward`](super::FusedKernels::swiglu_packed_backward), on
/// the backend's `swiglu_backward` of separate halves.
#[allow(clippy::type_complexity)]
pub fn swiglu_backward<B: Backend>(
    gate_up: FloatTensor<B>,
    grad: FloatTensor<B>,
    swiglu_backward: fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) -> (FloatTensor<B>, FloatTensor<B>),
) -> FloatTensor<B> {
    if gate_up.shape().num_elements() == 0 {
        return B::float_zeros(gate_up.shape(), &gate_up.device(), gate_up.dtype().into());
    }
    let last = grad.shape().num_dims() - 1;
    let [gate, up] = halves::<B>(gate_up);
    let (grad_gate, grad_up) = swiglu_backward(gate, up, grad);
    B::float_cat(vec![grad_gate, grad_up], last)
}

/// The parts with at least one column: what [`pack_columns`] takes.
pub(super) fn nonempty_columns<B: Backend>(parts: [FloatTensor<B>; 3]) -> Vec<FloatTensor<B>> {
    parts.into_iter().filter(|part| part.shape()[1] > 0).collect()
}

/// See [`FusedKernels::pack_columns`](super::FusedKernels::pack_columns).
pub fn pack_columns<B: Backend>(parts: Vec<FloatTensor<B>>, dtype: DType) -> FloatTensor<B> {
    let parts: Vec<_> = parts.into_iter().map(|part| cast::<B>(part, dtype)).collect();
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_else(|| unreachable!());
    }
    B::float_cat(parts, 1)
}

/// See [`FusedKernels::unpack_columns`](super::FusedKernels::unpack_columns).
pub fn unpack_columns<B: Backend>(
    packed: FloatTensor<B>,
    widths: Vec<usize>,
    dtypes: Vec<DType>,
) -> Vec<FloatTensor<B>> {
    let mut start = 0;
    widths
        .into_iter()
        .zip(dtypes)
        .map(|(width, dtype)| {
            let part = columns::<B>(packed.clone(), start, start + width);
            start += width;
            cast::<B>(part, dtype)
        })
        .collect()
}
