//! Gradient-Preserving Activation Scaling (GPAS, Chen et al. 2025, arXiv 2506.22049): the
//! residual stream scaled down in the forward pass while its gradient passes unscaled.

use burn::tensor::activation::silu;
use burn::tensor::Tensor;

/// `r - SiLU(g) sg(r)` for a residual sum `r` (any shape) and a learnable gate `g: [1]`, `sg`
/// the stop-gradient. Its value is `(1 - SiLU(g)) r`; its gradient to `r` is the identity, and
/// to `g` it is `-SiLU'(g) <dL/dy, r>`. At `g = 0` (the gate's init) it is the identity.
pub fn gpas<const D: usize>(r: Tensor<D>, gate: Tensor<1>) -> Tensor<D> {
    let scale = silu(gate).unsqueeze::<D>(); // [1, ..., 1]
    r.clone() - r.detach() * scale
}
