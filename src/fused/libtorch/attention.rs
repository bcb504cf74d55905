//! Causal attention through torch's fused kernels, with grouped-query heads.
//!
//! `O = softmax(scale Q K^T + causal mask) V` per head, `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]`.
//! The forward keeps the output and each row's log-sum-exp (f32); the backward recomputes the
//! probabilities from them, tile by tile, inside torch:
//!
//! | device | forward | backward |
//! |---|---|---|
//! | CPU | `_scaled_dot_product_flash_attention_for_cpu` | its `_backward` |
//! | CUDA | `_scaled_dot_product_efficient_attention` (memory-efficient, f32 and half types) | `_efficient_attention_backward` |
//!
//! On CUDA, tch 0.22 binds the flash kernel's backward but not its forward (which returns more
//! values than its generator handles), so the memory-efficient kernel, whose forward and
//! backward it binds both, is the one used; its log-sum-exp has its rows padded to a multiple of
//! 32, which only its backward reads. Torch's kernels take as many key/value heads as query
//! heads: the `kv` heads are repeated for their `h / kv` query heads, and the gradients of a
//! group summed back into its head.

use burn::backend::libtorch::TchTensor;
use tch::{Kind, Tensor};

/// `[b, s, kv, hd] -> [b, s, h, hd]`: each key/value head repeated for its group of query heads.
fn expand_heads(x: &Tensor, heads: i64) -> Tensor {
    let groups = heads / x.size()[2];
    if groups == 1 {
        x.shallow_clone()
    } else {
        x.repeat_interleave_self_int(groups, 2, None)
    }
}

/// `[b, s, h, hd] -> [b, s, kv, hd]`: the gradients of each group's query heads summed.
fn sum_groups(grad: Tensor, kv: i64) -> TchTensor {
    let size = grad.size();
    let (heads, shape) = (size[2], [size[0], size[1], kv, size[2] / kv, size[3]]);
    let grad = if heads == kv { grad.contiguous() } else { grad.reshape(shape).sum_dim_intlist(3, false, None) };
    TchTensor::new(grad)
}

/// `[b, s, h, hd] <-> [b, h, s, hd]` (a view).
fn swap_seq_heads(x: &Tensor) -> Tensor {
    x.transpose(1, 2)
}

/// The forward -> `(output: [b, s, h, hd], log-sum-exp: [b, h, s (padded on CUDA), 1] in f32)`.
pub(super) fn forward(q: TchTensor, k: TchTensor, v: TchTensor, scale: f64) -> (TchTensor, TchTensor) {
    let heads = q.tensor.size()[2];
    // Torch's kernels read rows with a stride of 1 (CUDA checks it): made so where they are not.
    let q = swap_seq_heads(&q.tensor.contiguous());
    let k = swap_seq_heads(&expand_heads(&k.tensor.contiguous(), heads));
    let v = swap_seq_heads(&expand_heads(&v.tensor.contiguous(), heads));
    let (output, lse) = if q.device().is_cuda() {
        let (output, lse, _seed, _offset) =
            Tensor::internal_scaled_dot_product_efficient_attention(&q, &k, &v, None::<Tensor>, true, 0.0, true, scale);
        (output, lse)
    } else {
        Tensor::internal_scaled_dot_product_flash_attention_for_cpu(&q, &k, &v, 0.0, true, None::<Tensor>, scale)
    };
    // Both kernels write the output as `[b, s, h, hd]` in memory: swapping back is free.
    (TchTensor::new(swap_seq_heads(&output).contiguous()), TchTensor::new(lse.unsqueeze(-1)))
}

/// The backward -> `(grad q, grad k, grad v)`, shaped as `q`, `k` and `v`.
pub(super) fn backward(
    q: TchTensor,
    k: TchTensor,
    v: TchTensor,
    output: TchTensor,
    lse: TchTensor,
    grad: TchTensor,
    scale: f64,
) -> (TchTensor, TchTensor, TchTensor) {
    let (heads, kv, seq) = (q.tensor.size()[2], k.tensor.size()[2], q.tensor.size()[1]);
    let (q, output, grad) = (q.tensor.contiguous(), output.tensor.contiguous(), grad.tensor.contiguous());
    let (k, v) = (expand_heads(&k.tensor.contiguous(), heads), expand_heads(&v.tensor.contiguous(), heads));
    let lse = lse.tensor.squeeze_dim(-1);
    let (grad_q, grad_k, grad_v) = if q.device().is_cuda() {
        // Layout `[b, s, h, hd]` as given; no dropout, so its random state is never read.
        let no_dropout = Tensor::empty([0i64; 0], (Kind::Int64, tch::Device::Cpu));
        const CAUSAL_FROM_TOP_LEFT: i64 = 1;
        let (grad_q, grad_k, grad_v, _) = Tensor::internal_efficient_attention_backward(
            &grad,
            &q,
            &k,
            &v,
            None::<Tensor>,
            &output,
            None::<Tensor>,
            None::<Tensor>,
            seq,
            seq,
            &lse,
            0.0,
            &no_dropout,
            &no_dropout,
            CAUSAL_FROM_TOP_LEFT,
            false,
            scale,
            None,
            None,
            false,
        );
        (grad_q, grad_k, grad_v)
    } else {
        let [grad, q, k, v, output] = [&grad, &q, &k, &v, &output].map(swap_seq_heads);
        let (grad_q, grad_k, grad_v) = Tensor::internal_scaled_dot_product_flash_attention_for_cpu_backward(
            &grad,
            &q,
            &k,
            &v,
            &output,
            &lse,
            0.0,
            true,
            None::<Tensor>,
            scale,
        );
        (swap_seq_heads(&grad_q), swap_seq_heads(&grad_k), swap_seq_heads(&grad_v))
    };
    (TchTensor::new(grad_q.contiguous()), sum_groups(grad_k, kv), sum_groups(grad_v, kv))
}
