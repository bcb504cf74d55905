//! LibTorch's own kernels for the fused ops, where torch has them: causal attention runs torch's
//! fused scaled-dot-product kernels, forward and backward, so no `S x S` scores are kept. The other
//! ops take the portable bodies (one autodiff node each, as on every backend).
// Burn deprecates its LibTorch backend; the crate keeps it for torch's kernels and CUDA builds.
#![allow(deprecated)]

mod attention;

use burn::backend::tensor::FloatTensor;
use burn::backend::LibTorch;

use super::kernels::FusedKernels;
use super::portable;

/// Whether torch's fused attention takes `q`, `k`, `v` of this kind (not f64; the others take the
/// portable body), with the key/value heads a divisor of the query heads.
fn torch_attention_takes(q: &FloatTensor<LibTorch>, k: &FloatTensor<LibTorch>, v: &FloatTensor<LibTorch>) -> bool {
    let kind = q.tensor.kind();
    let (heads, kv_heads) = (q.tensor.size()[2], k.tensor.size()[2]);
    matches!(kind, tch::Kind::Float | tch::Kind::BFloat16 | tch::Kind::Half)
        && k.tensor.kind() == kind
        && v.tensor.kind() == kind
        && kv_heads > 0
        && heads % kv_heads == 0
}

impl FusedKernels for LibTorch {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        match torch_attention_takes(&q, &k, &v) {
            true => attention::forward(q, k, v, scale),
            false => portable::attention_forward::<Self>(q, k, v, scale),
        }
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        // The forward took the same path: its log-sum-exp is torch's, or the portable body's.
        match torch_attention_takes(&q, &k, &v) {
            true => attention::backward(q, k, v, output, lse, grad, scale),
            false => portable::attention_backward::<Self>(q, k, v, output, lse, grad, scale),
        }
    }
}
