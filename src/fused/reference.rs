//! The decomposed ops, built from Burn's tensor ops as the model used them before the fused ops:
//! the reference every fused op is tested against ([`OpPath::Reference`](super::OpPath)).

use burn::tensor::activation::{log_softmax, silu};
use burn::tensor::module::{attention, layer_norm};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, IndexingUpdateOp, Int, Tensor};

use super::heads::repeat_kv;

/// [`rms_norm`](super::rms_norm) from Burn's ops: `x / rms * (gamma * scale)`.
pub fn rms_norm_reference<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, epsilon: f64, scale: f64) -> Tensor<D> {
    let dtype = x.dtype();
    let mean_square = x.clone().cast(DType::F32).square().mean_dim(D - 1); // [..., 1]
    let rms = (mean_square + epsilon).sqrt().cast(dtype);
    // Folding the factor into gamma costs d multiplications instead of a pass over x.
    (x / rms) * (gamma * scale).unsqueeze()
}

/// [`layer_norm`](super::layer_norm) from Burn's `layer_norm`, in f32 for half-precision inputs.
pub fn layer_norm_reference<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    let dtype = x.dtype();
    if matches!(dtype, DType::F16 | DType::BF16) {
        let (gamma, beta) = (gamma.cast(DType::F32), beta.cast(DType::F32));
        layer_norm(x.cast(DType::F32), gamma, Some(beta), epsilon).cast(dtype)
    } else {
        layer_norm(x, gamma, Some(beta), epsilon)
    }
}

/// [`cross_entropy_with_gradient`](super::cross_entropy_with_gradient) from Burn's ops, in f32:
/// the value f32, the gradient in the logits' type.
pub fn cross_entropy_with_gradient_reference(logits: Tensor<2>, targets: Tensor<1, Int>) -> (Tensor<1>, Tensor<2>) {
    let [tokens, _] = logits.dims();
    let dtype = logits.dtype();
    let targets = targets.reshape([tokens, 1]);
    let log_probs = log_softmax(logits.cast(DType::F32), 1); // finite where softmax underflows to 0
    let value = log_probs.clone().gather(1, targets.clone()).neg().mean(); // mean of [tokens, 1]
    let probs = log_probs.exp();
    let minus_one = Tensor::<2>::full([tokens, 1], -1.0, &targets.device()).cast(probs.dtype());
    let grad = probs.scatter(1, targets, minus_one, IndexingUpdateOp::Add) / tokens as f64;
    (value, grad.cast(dtype))
}

/// [`lm_head_cross_entropy_with_gradients`](super::lm_head_cross_entropy_with_gradients) from
/// Burn's ops: the whole `[tokens, vocab]` logits, the loss in f32, then both gradient products of
/// `softmax - onehot` in the inputs' type, divided by the token count in f32.
pub fn lm_head_cross_entropy_with_gradients_reference(
    hidden: Tensor<2>,
    weight: Tensor<2>,
    targets: Tensor<1, Int>,
) -> (Tensor<1>, Tensor<2>, Tensor<2>) {
    let ([tokens, _], dtype) = (hidden.dims(), hidden.dtype());
    let logits = hidden.clone().matmul(weight.clone()).cast(DType::F32);
    let (value, grad_logits) = cross_entropy_with_gradient_reference(logits, targets);
    let unit = (grad_logits * tokens as f64).cast(dtype);
    let per_token = 1.0 / tokens as f64;
    let grad_hidden = unit.clone().matmul(weight.transpose()).cast(DType::F32) * per_token;
    (value, grad_hidden, hidden.transpose().matmul(unit).cast(DType::F32) * per_token)
}

/// [`swiglu`](super::swiglu) from Burn's ops.
pub fn swiglu_reference<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    silu(gate) * up
}

/// [`rope`](super::rope) from Burn's ops, on `x: [batch, seq, heads, head_dim]` with tables
/// `[seq, head_dim]` already in `x`'s dtype.
pub fn rope_reference(x: Tensor<4>, cos: Tensor<2>, sin: Tensor<2>) -> Tensor<4> {
    let [_, seq, _, head_dim] = x.dims();
    let half = head_dim / 2;
    let cos = cos.reshape([1, seq, 1, head_dim]);
    let sin = sin.reshape([1, seq, 1, head_dim]);
    // rotate_half(x) = [-x2, x1] where x = [x1, x2]
    let x1 = x.clone().narrow(3, 0, half);
    let x2 = x.clone().narrow(3, half, half);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    x * cos + rotated * sin
}

/// [`causal_attention`](super::causal_attention) from Burn's `attention` (which, under autodiff,
/// keeps the `S x S` probabilities), the key and value heads repeated for their query groups.
pub fn causal_attention_reference(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let heads = q.dims()[2];
    let head_major = |t: Tensor<4>| repeat_kv(t.swap_dims(1, 2), heads); // [b, h, s, hd]
    let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: true };
    let context = attention(head_major(q), head_major(k), head_major(v), None, None, options);
    context.swap_dims(1, 2)
}

/// [`causal_attention_packed`](super::causal_attention_packed) from Burn's ops: the parts cut out
/// with `narrow`, rotated by [`rope_reference`], and passed to [`causal_attention_reference`].
pub fn causal_attention_packed_reference(
    qkv: Tensor<3>,
    cos: Tensor<2>,
    sin: Tensor<2>,
    heads: usize,
    kv_heads: usize,
) -> Tensor<4> {
    let [batch, seq, width] = qkv.dims();
    let hd = width / (heads + 2 * kv_heads);
    let part =
        |first: usize, count: usize| qkv.clone().narrow(2, first * hd, count * hd).reshape([batch, seq, count, hd]);
    let (q, k, v) = (part(0, heads), part(heads, kv_heads), part(heads + kv_heads, kv_heads));
    let dtype = qkv.dtype();
    let (cos, sin) = (cos.cast(dtype), sin.cast(dtype));
    causal_attention_reference(rope_reference(q, cos.clone(), sin.clone()), rope_reference(k, cos, sin), v)
}

/// [`swiglu_packed`](super::swiglu_packed) from Burn's ops: the halves cut out with `narrow`.
pub fn swiglu_packed_reference<const D: usize>(gate_up: Tensor<D>) -> Tensor<D> {
    let d = gate_up.dims()[D - 1] / 2;
    swiglu_reference(gate_up.clone().narrow(D - 1, 0, d), gate_up.narrow(D - 1, d, d))
}
