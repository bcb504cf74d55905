//! Global-norm gradient clipping, as PyTorch's `clip_grad_norm_` (Burn's own clipping is per tensor).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor, TensorReadError};

/// The L2 norm of all gradients of `model`'s parameters together, summed in f32 whatever the
/// training precision (a bf16 sum of squares loses the small terms). Read on the host: the
/// training step keeps [`grad_sum_of_squares`] on the device instead.
pub fn global_grad_norm<M: Module>(grads: &GradientsParams, model: &M) -> f64 {
    grad_sum_of_squares(grads, model).map_or(0.0, |total| {
        read_norm(total).unwrap_or_else(|e| panic!("the device failed reading the gradient norm: {e:?}"))
    })
}

/// The norm `sqrt(sum_of_squares)`, read on the host (a blocking read, counted).
pub fn read_norm(sum_of_squares: Tensor<1>) -> Result<f64, TensorReadError> {
    super::step_cost::count_host_read();
    Ok((sum_of_squares.try_into_scalar::<f32>()? as f64).sqrt())
}

/// The sum of the squares of all gradients of `model`'s parameters, in f32, `[1]` on the device;
/// `None` when no parameter has a gradient.
pub fn grad_sum_of_squares<M: Module>(grads: &GradientsParams, model: &M) -> Option<Tensor<1>> {
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
    visitor.total
}

/// The factor [`clip_known_norm`] scales the gradients by, on the device: `max_norm / (norm +
/// 1e-6)` where the norm (`sqrt(sum_of_squares)`) is above `max_norm`, exactly 1 elsewhere and
/// without `max_norm`. `[1]`, f32.
pub fn clip_factor(sum_of_squares: Tensor<1>, max_norm: Option<f64>) -> Tensor<1> {
    let ones = sum_of_squares.ones_like();
    match max_norm {
        Some(max_norm) => {
            let norm = sum_of_squares.sqrt();
            let above = norm.clone().greater_elem(max_norm);
            ones.mask_where(above, norm.add_scalar(1e-6).recip().mul_scalar(max_norm))
        }
        None => ones,
    }
}

/// The step's verdict by Burn's ops (where the backend has no multi-tensor kernels, as
/// [`grad_norm_and_verdict`](crate::fused::multi_tensor::grad_norm_and_verdict) computes it):
/// `(factor, sound after)` from the gradients' `sum_of_squares` and the run's soundness `sound`
/// (`[1]` f32, 1 while every earlier step had finite gradients). The factor is the clip's
/// ([`clip_factor`]), or -1 where the step is refused.
pub fn verdict(sum_of_squares: Tensor<1>, sound: Tensor<1>, max_norm: Option<f64>) -> (Tensor<1>, Tensor<1>) {
    let sound = sound * sum_of_squares.clone().is_finite().float();
    let factor = clip_factor(sum_of_squares, max_norm).mask_fill(sound.clone().lower_elem(0.5), -1.0);
    (factor, sound)
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
