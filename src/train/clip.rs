//! Global-norm gradient clipping, as PyTorch's `clip_grad_norm_` (Burn's own clipping is per tensor).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};

/// The L2 norm of all gradients of `model`'s parameters together, summed in f32 whatever the
/// training precision (a bf16 sum of squares loses the small terms).
pub fn global_grad_norm<M: Module>(grads: &GradientsParams, model: &M) -> f64 {
    struct SumOfSquares<'a> {
        grads: &'a GradientsParams,
        total: Option<Tensor<1>>,
    }
    impl ModuleVisitor for SumOfSquares<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.get::<D>(param.id) {
                let squares = grad.cast(FloatDType::F32).square().sum();
                self.total = Some(match self.total.take() {
                    Some(total) => total + squares,
                    None => squares,
                });
            }
        }
    }
    let mut visitor = SumOfSquares { grads, total: None };
    model.visit(&mut visitor);
    visitor.total.map_or(0.0, |total| {
        super::step_cost::count_host_read();
        (total.into_scalar::<f32>() as f64).sqrt()
    })
}

/// Multiplies every gradient by `factor`.
pub fn scale_grads<M: Module>(grads: &mut GradientsParams, model: &M, factor: f64) {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: f64,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.remove::<D>(param.id) {
                self.grads.register(param.id, grad * self.factor);
            }
        }
    }
    model.visit(&mut Scale { grads, factor });
}

/// Rescales the gradients so that their global norm is at most `max_norm` (factor
/// `max_norm / (norm + 1e-6)`, as PyTorch); returns the norm before clipping.
pub fn clip_grad_norm<M: Module>(grads: &mut GradientsParams, model: &M, max_norm: f64) -> f64 {
    let norm = global_grad_norm(grads, model);
    clip_known_norm(grads, model, norm, max_norm);
    norm
}

/// [`clip_grad_norm`] for gradients whose global norm `norm` is already known (the training
/// step measures it once, for the metrics and the divergence check, before clipping).
pub fn clip_known_norm<M: Module>(grads: &mut GradientsParams, model: &M, norm: f64, max_norm: f64) {
    if norm > max_norm {
        scale_grads(grads, model, max_norm / (norm + 1e-6));
    }
}
