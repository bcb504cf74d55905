//! Fused transformer ops with backward passes of their own: causal attention (flash style),
//! RMSNorm and LayerNorm (with the LNS factor), SwiGLU and RoPE.
//!
//! Under autodiff, Burn 0.22 builds each of these from many small ops, every one a full pass over
//! its input and many a tensor kept for the backward pass (attention keeps the `S x S` scores, on
//! every backend). Each op here is one node of the autodiff graph with a hand-written backward:
//!
//! | op | keeps for backward | backward |
//! |---|---|---|
//! | [`causal_attention`] | q, k, v, the output, each row's log-sum-exp | recomputes the probabilities block by block |
//! | [`rms_norm`] | x, gamma, each row's inverse RMS | closed form |
//! | [`residual_rms_norm`] | as [`rms_norm`], of the residual sum it adds | closed form, adding the sum's other gradient |
//! | [`layer_norm`] | x, gamma, each row's mean and inverse standard deviation | closed form |
//! | [`swiglu`] | gate, up | closed form |
//! | [`rope`] | nothing but the tables | the rotation by minus the angle |
//!
//! On flex (f32) each op runs a hand-written kernel, parallel over rows or heads, with a
//! vectorised `exp`; sums run in a fixed order whatever the number of threads, so training stays
//! bit-for-bit reproducible. On the GPU backends (wgpu, Vulkan, CUDA), RMSNorm, LayerNorm and
//! attention run CubeCL kernels of their own, and on LibTorch attention runs torch's fused
//! kernels. Everything else (ndarray, the GPUs' and LibTorch's other ops, flex in bf16) runs a
//! portable body written in Burn's backend ops, with the same short graph.
//!
//! The decomposed ops (Burn's own, as the model used before) stay available as the reference the
//! tests compare against: [`OpPath::Reference`], chosen for the whole process with
//! [`set_default_path`] or the environment variable `LAYERNORM_SCALING_OPS=reference`, or for one
//! thread with [`with_path`].

mod adam_settings;
mod autodiff;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube;
#[cfg(feature = "flex")]
mod flex;
mod heads;
mod kernels;
#[cfg(feature = "tch")]
mod libtorch;
pub mod mixed;
pub mod multi_tensor;
mod op_path;
mod packed;
mod portable;
pub mod profile;
pub(crate) mod reference;

use burn::backend::Dispatch;
use burn::tensor::{DType, Int, Tensor};

pub(crate) use heads::repeat_kv;
pub use kernels::{FusedKernels, FusedOps};
use mixed::CastOf::{Activation, Weight};
use mixed::{cast_around, cast_counted};
pub use mixed::{compute_dtype, half_compute, set_half_compute, with_half_compute, RestoreHalfCompute};
#[cfg(feature = "autodiff")]
use op_path::backward_follows;
use op_path::with_thread_value;
pub use op_path::{current_path, set_default_path, with_backward_following, with_path, OpPath, ENV_VAR};
pub use reference::{
    causal_attention_packed_reference, causal_attention_reference, cross_entropy_with_gradient_reference,
    layer_norm_reference, lm_head_cross_entropy_with_gradients_reference, rms_norm_reference, rope_reference,
    swiglu_packed_reference, swiglu_reference,
};

/// `[..., d] -> [..., 1]`: the shape of one statistic per row (the norms' kernels).
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
fn row_stats_shape(shape: &burn::backend::Shape) -> burn::backend::Shape {
    let mut stats = shape.clone();
    let last = stats.num_dims() - 1;
    stats[last] = 1;
    stats
}

/// RMS normalisation with a constant factor: `x / sqrt(mean(x^2) + epsilon) * gamma * scale`
/// over the last dimension. Shapes: `x: [..., d]`, `gamma: [d]` -> `[..., d]`.
///
/// [`RmsNormScaling`](crate::norm::RmsNormScaling) passes its LNS factor as `scale`: the kernels
/// multiply by it with `gamma` (and scale gamma's gradient by it), so the factor costs no launch
/// of its own. The mean square is accumulated in f32.
pub fn rms_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, epsilon: f64, scale: f64) -> Tensor<D> {
    let [d] = gamma.dims();
    assert_eq!(x.dims()[D - 1], d, "rms_norm: the input's last dimension must match gamma's size");
    match current_path() {
        OpPath::Reference => rms_norm_reference(x, gamma, epsilon, scale),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_rms_norm(
            x.into_dispatch(),
            gamma.into_dispatch(),
            epsilon,
            scale,
        )),
    }
}

/// A residual add and the RMSNorm of its sum in one pass: `(x, rms_norm(x))` with `x = base +
/// branch`. Shapes: `base, branch: [..., d]` (the same), `gamma: [d]` -> two `[..., d]`.
///
/// A Pre-LN block adds each sub-layer's output to the residual stream and normalises the sum
/// for the next sub-layer; here both are one kernel forward, and backward the gradient the sum
/// gets from its other use (the next residual add) is added in the norm's own pass, inside
/// [`with_backward_following`] (elsewhere Burn adds it after the norm's backward). The sum is
/// in the base's (the stream's) type, the branch cast to it as it is read: where both have one
/// type, the separate add's, bit for bit. See [`residual_rms_norm_in`] for the norm's output in
/// another type.
pub fn residual_rms_norm<const D: usize>(
    base: Tensor<D>,
    branch: Tensor<D>,
    gamma: Tensor<1>,
    epsilon: f64,
    scale: f64,
) -> (Tensor<D>, Tensor<D>) {
    let dtype = base.dtype();
    residual_rms_norm_in(base, branch, gamma, epsilon, scale, dtype)
}

/// [`residual_rms_norm`] with the norm's output made in `dtype`: under mixed precision the half
/// type the next sub-layer computes in, so that neither the branch's way into the sum nor the
/// norm's way out costs a cast of its own (nor one for its gradient).
pub fn residual_rms_norm_in<const D: usize>(
    base: Tensor<D>,
    branch: Tensor<D>,
    gamma: Tensor<1>,
    epsilon: f64,
    scale: f64,
    dtype: DType,
) -> (Tensor<D>, Tensor<D>) {
    assert_eq!(base.dims(), branch.dims(), "residual_rms_norm: both terms of the sum must have one shape");
    let [d] = gamma.dims();
    assert_eq!(base.dims()[D - 1], d, "residual_rms_norm: the input's last dimension must match gamma's size");
    if current_path() == OpPath::Reference {
        let base_dtype = base.dtype();
        let x = base + branch.cast(base_dtype);
        return (x.clone(), rms_norm_reference(x, gamma, epsilon, scale).cast(dtype));
    }
    let (x, y) = <Dispatch as FusedOps>::fused_residual_rms_norm(
        base.into_dispatch(),
        branch.into_dispatch(),
        gamma.into_dispatch(),
        epsilon,
        scale,
        dtype,
    );
    (Tensor::from_dispatch(x), Tensor::from_dispatch(y))
}

/// Layer normalisation over the last dimension: `(x - mean) / sqrt(var + epsilon) * gamma + beta`
/// (biased variance). Shapes: `x: [..., d]`, `gamma, beta: [d]` -> `[..., d]`. Statistics in f32.
///
/// LNS folds its factor into `gamma` and `beta` before the call.
pub fn layer_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, beta: Tensor<1>, epsilon: f64) -> Tensor<D> {
    let [d] = gamma.dims();
    assert_eq!(x.dims()[D - 1], d, "layer_norm: the input's last dimension must match gamma's size");
    assert_eq!(beta.dims(), [d], "layer_norm: beta must have gamma's size");
    match current_path() {
        OpPath::Reference => layer_norm_reference(x, gamma, beta, epsilon),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_layer_norm(
            x.into_dispatch(),
            gamma.into_dispatch(),
            beta.into_dispatch(),
            epsilon,
        )),
    }
}

/// The mean cross-entropy of `logits: [tokens, vocab]` against `targets: [tokens]` -> `[1]`, in
/// f32 whatever the logits' type, and its gradient `(softmax(logits) - onehot(targets)) / tokens`
/// in the logits' type: both constants (no autodiff), for
/// [`lm_head_cross_entropy`](crate::model::lm_head_cross_entropy). On flex one parallel pass.
pub fn cross_entropy_with_gradient(logits: Tensor<2>, targets: Tensor<1, Int>) -> (Tensor<1>, Tensor<2>) {
    let [tokens, _] = logits.dims();
    assert_eq!(targets.dims(), [tokens], "cross_entropy: one target per row of logits");
    match current_path() {
        OpPath::Reference => cross_entropy_with_gradient_reference(logits, targets),
        OpPath::Fused => {
            let (value, grad) =
                <Dispatch as FusedOps>::fused_cross_entropy(logits.into_dispatch(), targets.into_dispatch());
            (Tensor::from_dispatch(value), Tensor::from_dispatch(grad))
        }
    }
}

/// The LM head and the loss: the mean cross-entropy of the logits `hidden @ weight`
/// (`hidden: [tokens, d_model]`, `weight: [d_model, vocab]`) against `targets: [tokens]` -> `([1],
/// grad_hidden: [tokens, d_model], grad_weight: [d_model, vocab])`, all constants (no autodiff),
/// for [`lm_head_cross_entropy`](crate::model::lm_head_cross_entropy). The logits are made a block
/// of rows at a time (32 MiB of f32 on CPUs, 128 MiB on CubeCL's GPUs), so the whole
/// `[tokens, vocab]` tensor never exists; on flex each block is a gemm into one reused buffer. The
/// logits and the gradients' products are made in the inputs' type (the products of
/// `softmax - onehot`, which f16 holds without underflow), the softmax, the loss and the division
/// by the token count in f32: all three results are f32.
pub fn lm_head_cross_entropy_with_gradients(
    hidden: Tensor<2>,
    weight: Tensor<2>,
    targets: Tensor<1, Int>,
) -> (Tensor<1>, Tensor<2>, Tensor<2>) {
    let ([tokens, d_model], [weight_rows, vocab]) = (hidden.dims(), weight.dims());
    assert_eq!(weight_rows, d_model, "lm_head_cross_entropy: weight must be [d_model, vocab]");
    assert!(vocab > 0, "lm_head_cross_entropy: the vocabulary is empty (weight [{d_model}, 0])");
    assert_eq!(targets.dims(), [tokens], "lm_head_cross_entropy: one target per row of hidden");
    assert!(tokens > 0, "lm_head_cross_entropy: no tokens");
    match current_path() {
        OpPath::Reference => lm_head_cross_entropy_with_gradients_reference(hidden, weight, targets),
        OpPath::Fused => {
            let (value, grad_hidden, grad_weight) = <Dispatch as FusedOps>::fused_lm_head_cross_entropy(
                hidden.into_dispatch(),
                weight.into_dispatch(),
                targets.into_dispatch(),
            );
            (Tensor::from_dispatch(value), Tensor::from_dispatch(grad_hidden), Tensor::from_dispatch(grad_weight))
        }
    }
}

/// A linear layer without bias: `x @ weight`, `x: [..., d_in]`, `weight: [d_in, d_out]` ->
/// `[..., d_out]`. The leading dimensions are folded into rows, so the forward and both gradients
/// are one matrix product each (on flex, gemm into a fresh buffer).
///
/// Under mixed precision ([`half_compute`]) the product runs in the half type and the result
/// comes back in `x`'s type; a half-precision `x` takes the weight to its type.
pub fn linear<const D: usize>(x: Tensor<D>, weight: Tensor<2>) -> Tensor<D> {
    let compute = compute_dtype(x.dtype(), &x.device());
    // Each cast is skipped where the tensor is in the compute type already (an input a sub-block
    // cast once for all its projections, a whole-bf16 model).
    cast_around(x, compute, |x| linear_in_input_type(x, cast_counted(weight, compute, Weight)))
}

/// [`linear`] in the inputs' own type.
fn linear_in_input_type<const D: usize>(x: Tensor<D>, weight: Tensor<2>) -> Tensor<D> {
    let dims = x.dims();
    let [d_in, d_out] = weight.dims();
    assert_eq!(dims[D - 1], d_in, "linear: the input's last dimension must match the weight's rows");
    let mut out_dims = dims;
    out_dims[D - 1] = d_out;
    // An empty output holds nothing to compute (and flex's gemm faults on some empty inputs):
    // zeros of its shape, a constant.
    if out_dims.contains(&0) {
        return Tensor::<D>::zeros(out_dims, &x.device()).cast(x.dtype());
    }
    match current_path() {
        // A sum over nothing (`d_in = 0`) has nothing to fuse (and a reshape would read its 0 as "keep").
        OpPath::Fused if d_in > 0 => {
            let rows = dims[..D - 1].iter().product();
            let x = x.reshape([rows, d_in]);
            let output = Tensor::<2>::from_dispatch(<Dispatch as FusedOps>::fused_linear(
                x.into_dispatch(),
                weight.into_dispatch(),
            ));
            output.reshape(out_dims)
        }
        _ => burn::tensor::module::linear(x, weight, None),
    }
}

/// Several linear layers of one input (no biases) as one matrix product: `x @ [w_1 | w_2 | ...]`,
/// `x: [..., d_in]`, `weights[i]: [d_in, d_i]` (one to three of them) -> `[..., sum d_i]`, the
/// layers' outputs side by side. Each weight's gradient is its own columns of the packed one.
///
/// The weights are packed into one matrix each pass (on the GPUs one launch, which under mixed
/// precision is also their cast; its backward one more): for q, k and v that is three products
/// forward and six backward made one and two.
pub fn linear_packed<const D: usize>(x: Tensor<D>, weights: &[Tensor<2>]) -> Tensor<D> {
    let compute = compute_dtype(x.dtype(), &x.device());
    cast_around(x, compute, |x| linear_in_input_type(x, pack_columns(weights, compute)))
}

/// The columns of `parts` (one to three `[d_in, d_i]` matrices) side by side, `[d_in, sum d_i]`,
/// in `dtype`; each part's gradient is its columns of the gradient. The bytes converted count
/// as cast weights ([`mixed::cast_bytes`]).
pub fn pack_columns(parts: &[Tensor<2>], dtype: burn::tensor::DType) -> Tensor<2> {
    assert!((1..=3).contains(&parts.len()), "pack_columns: takes one to three matrices, not {}", parts.len());
    let rows = parts[0].dims()[0];
    assert!(parts.iter().all(|part| part.dims()[0] == rows), "pack_columns: the matrices must have the same rows");
    assert!(parts.iter().any(|part| part.dims()[1] > 0), "pack_columns: the matrices have no columns");
    if parts.len() == 1 {
        return cast_counted(parts[0].clone(), dtype, Weight);
    }
    let casts: usize = parts.iter().filter(|part| part.dtype() != dtype).map(|part| part.shape().num_elements()).sum();
    mixed::count_cast(casts * dtype.size(), Weight);
    match current_path() {
        OpPath::Reference => Tensor::cat(parts.iter().map(|part| part.clone().cast(dtype)).collect(), 1),
        OpPath::Fused => {
            let device = parts[0].device();
            let [first, second, third] = [0, 1, 2].map(|i| match parts.get(i) {
                Some(part) => part.clone(),
                None => Tensor::<2>::empty([rows, 0], &device),
            });
            Tensor::from_dispatch(<Dispatch as FusedOps>::fused_pack_columns(
                first.into_dispatch(),
                second.into_dispatch(),
                third.into_dispatch(),
                dtype,
            ))
        }
    }
}

/// SwiGLU's gating: `silu(gate) * up`. Shapes: `[..., d_ff]` each -> `[..., d_ff]`.
pub fn swiglu<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    assert_eq!(gate.dims(), up.dims(), "swiglu: gate and up must have the same shape");
    match current_path() {
        OpPath::Reference => swiglu_reference(gate, up),
        OpPath::Fused => {
            Tensor::from_dispatch(<Dispatch as FusedOps>::fused_swiglu(gate.into_dispatch(), up.into_dispatch()))
        }
    }
}

/// SwiGLU's gating of one packed projection: `silu(gate) * up` of the halves of `gate_up: [...,
/// 2 d_ff]` (the gate's columns, then up's, as [`linear_packed`] makes them) -> `[..., d_ff]`. On
/// the GPUs the kernels read both halves in place and write the packed gradient.
pub fn swiglu_packed<const D: usize>(gate_up: Tensor<D>) -> Tensor<D> {
    assert!(gate_up.dims()[D - 1].is_multiple_of(2), "swiglu_packed: the last dimension must hold two halves");
    match current_path() {
        OpPath::Reference => swiglu_packed_reference(gate_up),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_swiglu_packed(gate_up.into_dispatch())),
    }
}

/// Rotary position embedding, "rotate-half" pairing (dimension `i` with `i + head_dim/2`):
/// `x * cos + rotate_half(x) * sin`. Shapes: `x: [batch, seq, heads, head_dim]`,
/// `cos, sin: [seq, head_dim]` (both halves holding the same angles) -> `x`'s shape.
pub fn rope(x: Tensor<4>, cos: Tensor<2>, sin: Tensor<2>) -> Tensor<4> {
    let [_, seq, _, head_dim] = x.dims();
    assert_eq!(cos.dims(), [seq, head_dim], "rope: the tables must be [seq, head_dim]");
    assert_eq!(sin.dims(), [seq, head_dim], "rope: the tables must be [seq, head_dim]");
    assert!(head_dim % 2 == 0, "rope: head_dim must be even");
    let dtype = x.dtype();
    let (cos, sin) = (cos.cast(dtype), sin.cast(dtype));
    match current_path() {
        OpPath::Reference => rope_reference(x, cos, sin),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_rope(
            x.into_dispatch(),
            cos.into_dispatch(),
            sin.into_dispatch(),
        )),
    }
}

/// Causal self-attention with grouped-query heads, scaled by `1/sqrt(head_dim)`: query `i` sees
/// keys `0..=i`. Shapes: `q: [batch, seq, heads, head_dim]`, `k, v: [batch, seq, kv_heads,
/// head_dim]` with `heads` a multiple of `kv_heads` -> `[batch, seq, heads, head_dim]`.
///
/// The layout is the projections' own (`[batch, seq, heads * head_dim]` reshaped), so neither the
/// inputs nor the output are transposed in memory. Under mixed precision ([`half_compute`]) the
/// inputs are cast to the half type and the output comes back in `q`'s type.
pub fn causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let dtype = q.dtype();
    let compute = compute_dtype(dtype, &q.device());
    let [q, k, v] = [q, k, v].map(|x| cast_counted(x, compute, Activation));
    cast_counted(causal_attention_in_input_type(q, k, v), dtype, Activation)
}

/// [`causal_attention`] of one packed projection, with RoPE: `qkv: [batch, seq, (heads + 2
/// kv_heads) * head_dim]` holds the queries, keys and values side by side (as [`linear_packed`]
/// makes them from the three projections); the queries and keys are rotated by `cos, sin: [seq,
/// head_dim]` as [`rope`] does. -> `[batch, seq, heads, head_dim]`.
///
/// On the GPUs the kernels read the three parts in place and rotate them as they load them; the
/// backward writes the packed gradient, rotated back, in the same two launches as
/// [`causal_attention`]'s (grouped heads, `kv_heads < heads`, take the portable body). Under mixed
/// precision the input is cast to the half type and the output comes back in `qkv`'s type.
pub fn causal_attention_packed(
    qkv: Tensor<3>,
    cos: Tensor<2>,
    sin: Tensor<2>,
    heads: usize,
    kv_heads: usize,
) -> Tensor<4> {
    let [_, seq, width] = qkv.dims();
    assert!(
        heads > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads) && width.is_multiple_of(heads + 2 * kv_heads),
        "causal_attention_packed: a width of {width} does not hold {heads} query and 2 x {kv_heads} key/value heads"
    );
    let head_dim = width / (heads + 2 * kv_heads);
    assert!(
        head_dim > 0 && head_dim.is_multiple_of(2),
        "causal_attention_packed: head_dim must be even, not {head_dim}"
    );
    assert_eq!(cos.dims(), [seq, head_dim], "causal_attention_packed: the tables must be [seq, head_dim]");
    assert_eq!(sin.dims(), [seq, head_dim], "causal_attention_packed: the tables must be [seq, head_dim]");
    let dtype = qkv.dtype();
    let compute = compute_dtype(dtype, &qkv.device());
    let qkv = cast_counted(qkv, compute, Activation);
    let output = match current_path() {
        OpPath::Reference => causal_attention_packed_reference(qkv, cos, sin, heads, kv_heads),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_packed_attention(
            qkv.into_dispatch(),
            cos.into_dispatch(),
            sin.into_dispatch(),
            heads,
            kv_heads,
            1.0 / (head_dim as f64).sqrt(),
        )),
    };
    cast_counted(output, dtype, Activation)
}

/// [`causal_attention`] in the inputs' own type.
fn causal_attention_in_input_type(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let [batch, seq, heads, head_dim] = q.dims();
    let [k_batch, k_seq, kv_heads, k_dim] = k.dims();
    assert_eq!(k.dims(), v.dims(), "causal_attention: keys and values must have the same shape");
    assert!(
        k_batch == batch && k_seq == seq && k_dim == head_dim && kv_heads > 0 && heads % kv_heads == 0,
        "causal_attention: keys [{k_batch}, {k_seq}, {kv_heads}, {k_dim}] do not fit queries \
         [{batch}, {seq}, {heads}, {head_dim}]"
    );
    let scale = 1.0 / (head_dim as f64).sqrt();
    match current_path() {
        OpPath::Reference => causal_attention_reference(q, k, v),
        OpPath::Fused => Tensor::from_dispatch(<Dispatch as FusedOps>::fused_causal_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            scale,
        )),
    }
}
