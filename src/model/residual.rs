//! The residual stream between Pre-LN blocks, its last add left to the next norm.

use burn::tensor::{DType, Device, Tensor};

use crate::fused::mixed::{cast_counted, CastOf};
use crate::norm::Norm;

/// The hidden state `[batch, seq, d_model]` passed from block to block: either added up, or a
/// sum `base + branch` whose add is left to whatever normalises it next, which adds in its own
/// pass ([`Norm::forward_residual_in`]: one kernel launch fewer forward, and one backward, per
/// residual add on a GPU). Under mixed precision the branch may be in the half type: it is cast
/// to the stream's type as it is added.
#[derive(Clone, Debug)]
pub struct Residual {
    /// The hidden state, or where a branch is pending, the stream before that sub-layer.
    pub base: Tensor<3>,
    /// The sub-layer's output (gated and scaled as the scheme says) not added yet, if any.
    pub branch: Option<Tensor<3>>,
}

impl Residual {
    /// The hidden state `x` itself.
    pub fn new(x: Tensor<3>) -> Self {
        Self { base: x, branch: None }
    }

    /// The hidden state `base + branch`, not added yet.
    pub fn pending(base: Tensor<3>, branch: Tensor<3>) -> Self {
        Self { base, branch: Some(branch) }
    }

    /// The hidden state, added where it is pending (the branch cast to the base's type).
    pub fn sum(self) -> Tensor<3> {
        match self.branch {
            None => self.base,
            Some(branch) => {
                let dtype = self.base.dtype();
                self.base + cast_counted(branch, dtype, CastOf::Activation)
            }
        }
    }

    /// `(x, norm(x))` of the hidden state `x` (in the stream's type), the add (where pending) made
    /// in the norm's pass, which answers in `dtype` where it can (RMSNorm's kernels; the others
    /// answer in the stream's type).
    pub fn normed_in(self, norm: &Norm, dtype: DType) -> (Tensor<3>, Tensor<3>) {
        match self.branch {
            None => (self.base.clone(), norm.forward(self.base)),
            Some(branch) => norm.forward_residual_in(self.base, branch, dtype),
        }
    }

    /// The stream's type: the base's.
    pub fn dtype(&self) -> DType {
        self.base.dtype()
    }

    /// The stream's device.
    pub fn device(&self) -> Device {
        self.base.device()
    }
}
