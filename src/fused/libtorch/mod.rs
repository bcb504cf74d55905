//! LibTorch's own kernels for the fused ops, where torch has them: causal attention runs torch's
//! fused scaled-dot-product kernels, forward and backward, so no `S x S` scores are kept. The other
//! ops take the portable bodies (one autodiff node each, as on every backend).
// Burn deprecates its LibTorch backend; the crate keeps it for torch's kernels and CUDA builds.
#![allow(deprecated)]

mod attention;

use burn::backend::tensor::FloatTensor;
use burn::backend::LibTorch;

use super::kernels::FusedKernels;

impl FusedKernels for LibTorch {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        attention::forward(q, k, v, scale)
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
        attention::backward(q, k, v, output, lse, grad, scale)
    }
}
