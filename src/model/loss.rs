//! The language-modelling loss: mean cross-entropy of next-token prediction, with its gradient
//! computed in closed form (`softmax - onehot`) from one fused softmax instead of being traced
//! through log-softmax's many `[tokens, vocab]` temporaries.
//!
//! The loss returned is `value + (s - s.detach())`, where `value` is the cross-entropy (a
//! constant) and `s` a surrogate whose gradient is the cross-entropy's: its value is exactly
//! `value`, and its backward pass is the closed form. [`lm_head_cross_entropy`] goes one step
//! further and takes the LM head in: the surrogate is over the hidden states and the head weight,
//! so the logits are never kept for the backward pass.

use burn::tensor::{DType, Int, Tensor};

use crate::fused;
use crate::fused::mixed::{cast_counted, CastOf};

/// Mean cross-entropy of `logits: [batch, seq, vocab]` against `targets: [batch, seq]` -> `[1]`.
///
/// For next-token prediction, `targets` are the inputs shifted left by one position.
pub fn cross_entropy(logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<1> {
    let [batch, seq, vocab] = logits.dims();
    let logits = logits.reshape([batch * seq, vocab]);
    let (value, grad) = closed_form(logits.clone().without_autodiff(), targets.reshape([batch * seq]));
    if !tracked(&logits) {
        return autodiff_like(value, &logits);
    }
    with_gradient(value, (logits * grad).sum())
}

/// [`cross_entropy`] over the targets at `counted: [n]` only (positions `row * seq + column` of
/// `targets: [batch, seq]`; `None`: all of them), the mean taken over those.
pub fn cross_entropy_counting(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    counted: Option<Tensor<1, Int>>,
) -> Tensor<1> {
    let Some(rows) = counted else {
        return cross_entropy(logits, targets);
    };
    let ([batch, seq, vocab], [n]) = (logits.dims(), rows.dims());
    let logits = logits.reshape([batch * seq, vocab]).select(0, rows.clone()).reshape([1, n, vocab]);
    cross_entropy(logits, targets.reshape([batch * seq]).select(0, rows).reshape([1, n]))
}

/// Mean cross-entropy of the LM head `hidden @ weight` (`hidden: [tokens, d_model]`,
/// `weight: [d_model, vocab]`) against `targets: [tokens]` -> `[1]`: [`cross_entropy`] of the
/// logits, with the head's two gradient products taken at once
/// ([`fused::lm_head_cross_entropy_with_gradients`]): the backward pass holds no `[tokens, vocab]`
/// tensor, and the forward makes the logits a block of rows at a time.
pub fn lm_head_cross_entropy(hidden: Tensor<2>, weight: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    // Under mixed precision the head's products run in the half type; the loss stays in f32.
    let (dtype, compute) = (hidden.dtype(), fused::compute_dtype(hidden.dtype(), &hidden.device()));
    let h = cast_counted(hidden.clone().without_autodiff(), compute, CastOf::Activation);
    let w = cast_counted(weight.clone().without_autodiff(), compute, CastOf::Weight);
    if !tracked(&hidden) && !tracked(&weight) {
        return autodiff_like(closed_form(h.matmul(w).cast(dtype), targets).0, &hidden);
    }
    let (value, grad_hidden, grad_weight) =
        fused::lm_head_cross_entropy_with_gradients(h, w, targets.without_autodiff());
    // f32 (each is multiplied by the loss scale, if any, before it meets a half type).
    let (grad_hidden, grad_weight) = (grad_hidden.cast(dtype), grad_weight.cast(weight.dtype()));
    with_gradient(value, (hidden * grad_hidden).sum() + (weight * grad_weight).sum())
}

/// The mean cross-entropy of constant `logits: [tokens, vocab]` against `targets: [tokens]`, and
/// its gradient `(softmax(logits) - onehot(targets)) / tokens` (both without autodiff).
fn closed_form(logits: Tensor<2>, targets: Tensor<1, Int>) -> (Tensor<1>, Tensor<2>) {
    fused::cross_entropy_with_gradient(logits, targets.without_autodiff())
}

/// `value` carrying the gradient of `surrogate`: `value + (surrogate - surrogate.detach())`,
/// whose value is exactly `value`, in f32 (the loss is f32 whatever the model's type).
fn with_gradient(value: Tensor<1>, surrogate: Tensor<1>) -> Tensor<1> {
    let value = autodiff_like(value.cast(DType::F32), &surrogate);
    (surrogate.clone() - surrogate.detach()).cast(DType::F32) + value
}

/// Whether gradients flow through `tensor` (it takes part in an autodiff graph).
#[cfg(feature = "autodiff")]
fn tracked<const D: usize>(tensor: &Tensor<D>) -> bool {
    tensor.is_tracked()
}

/// Without autodiff, no gradient flows anywhere.
#[cfg(not(feature = "autodiff"))]
fn tracked<const D: usize>(_tensor: &Tensor<D>) -> bool {
    false
}

/// `value` on autodiff when `like` is (there a constant), as it is otherwise.
fn autodiff_like<const D: usize>(value: Tensor<1>, like: &Tensor<D>) -> Tensor<1> {
    if like.is_autodiff() {
        value.autodiff()
    } else {
        value
    }
}
