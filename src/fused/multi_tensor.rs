//! The optimiser step over all parameter tensors at once: the global gradient norm with the step's
//! verdict, and AdamW, each a few kernel launches for the whole model where a backend has
//! multi-tensor kernels (the CubeCL GPUs: `cube/multi_tensor.rs` has the math), in place of a
//! reduction and an update per tensor. Other backends answer `None` and the caller keeps its
//! per-tensor ops (on a CPU a launch costs nothing).

use burn::tensor::Tensor;

pub use super::adam_settings::{any, AdamTensorSettings, AnyTensor, LossScaleRule};

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use super::cube::{multi_tensor as kernels, multi_tensor_adam};

/// Whether the backend of `tensor` has multi-tensor kernels for tensors of its type: then
/// [`adam_step`] takes them.
pub fn multi_tensor_kernels_take(tensor: &AnyTensor) -> bool {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        kernels::takes(tensor)
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = tensor;
        false
    }
}

/// The global gradient norm and the step's verdict in one pass over `grads` (all of one float
/// type, on one device): `(sum of squares, factor, sound after)`, each `[1]` f32 on the device.
/// `sound` (`[1]` f32) is 1 while every earlier step had finite gradients; `sound after` is it and
/// this step's sum finite. `factor` multiplies the gradients: the clip to `max_norm` (`max_norm /
/// (norm + 1e-6)` where the norm is above it, else 1), or -1 where the step is refused (not sound).
/// `None` where the backend has no multi-tensor kernels, or for tensors they do not take.
pub fn grad_norm_and_verdict(
    grads: Vec<AnyTensor>,
    sound: Tensor<1>,
    max_norm: Option<f64>,
) -> Option<(Tensor<1>, Tensor<1>, Tensor<1>)> {
    if grads.is_empty() || !grads.iter().all(multi_tensor_kernels_take) {
        return None;
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        let [sum, factor, sound] =
            kernels::grad_norm_and_verdict_op(grads, sound.into_dispatch(), max_norm.map(|norm| norm as f32))?;
        Some((Tensor::from_dispatch(sum), Tensor::from_dispatch(factor), Tensor::from_dispatch(sound)))
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = (sound, max_norm);
        None
    }
}

/// The verdict of a step under a dynamic loss scale (f16), all on the device: `(sum of squares,
/// factor, sound after, scale state after)`.
pub struct ScaledVerdict {
    /// The sum of the unscaled gradients' squares, `[1]` f32 (the scaled one where it overflowed).
    pub sum_of_squares: Tensor<1>,
    /// `[2]` f32: the factor the gradients are multiplied by (`1 / scale` times the clip), or -1
    /// where the step is skipped or refused; then the steps skipped so far, for [`adam_step`].
    pub factor: Tensor<1>,
    /// `[1]` f32: 1 while every step had finite gradients, an overflow at the lowest scale included.
    pub sound: Tensor<1>,
    /// `[4]` f32: the scale, the good steps in a row, the steps skipped so far, and 1 if this step
    /// was skipped (else 0).
    pub scale_state: Tensor<1>,
}

/// [`grad_norm_and_verdict`] for the gradients of a loss multiplied by a dynamic loss scale:
/// `scale_state` is `[scale, good steps in a row, steps skipped]` (`[3]` or more, f32). A finite
/// norm is unscaled, clipped and applied (the scale doubling after `rule.growth_interval` good
/// steps); an overflow skips the step and halves the scale, unless it is at `rule.min_scale`: then
/// the step is refused and the run marked unsound (a divergence). `None` as
/// [`grad_norm_and_verdict`], and for a state that is not f32 with at least 3 values.
pub fn scaled_grad_norm_and_verdict(
    grads: Vec<AnyTensor>,
    sound: Tensor<1>,
    scale_state: Tensor<1>,
    max_norm: Option<f64>,
    rule: LossScaleRule,
) -> Option<ScaledVerdict> {
    if grads.is_empty() || !grads.iter().all(multi_tensor_kernels_take) {
        return None;
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        let [sum, factor, sound, state] = kernels::scaled_grad_norm_and_verdict_op(
            grads,
            sound.into_dispatch(),
            scale_state.into_dispatch(),
            max_norm.map(|norm| norm as f32),
            rule,
        )?;
        Some(ScaledVerdict {
            sum_of_squares: Tensor::from_dispatch(sum),
            factor: Tensor::from_dispatch(factor),
            sound: Tensor::from_dispatch(sound),
            scale_state: Tensor::from_dispatch(state),
        })
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = (sound, scale_state, max_norm, rule);
        None
    }
}

/// The updated tensors of one [`adam_step`], in its inputs' order.
pub struct AdamUpdate {
    /// The parameters.
    pub params: Vec<AnyTensor>,
    /// The first moments.
    pub moments_1: Vec<AnyTensor>,
    /// The second moments.
    pub moments_2: Vec<AnyTensor>,
}

/// Adam(W) over all `params` at once (one float type, one device) with their `grads`, the moments
/// (`None` before the first step) and per tensor its [`AdamTensorSettings`]: the gradients
/// multiplied by `factor` (`[1]` f32, [`grad_norm_and_verdict`]'s, or `[2]`,
/// [`scaled_grad_norm_and_verdict`]'s, whose skipped steps do not count in Adam's time), nothing
/// changed where it is negative. Burn's AdamW's arithmetic, in f32. For tensors [`multi_tensor_kernels_take`], each
/// moment and gradient of its parameter's shape and type.
///
/// # Panics
/// For other tensors: parameters the kernels do not take, gradients or moments of other shapes or
/// types, a settings count other than the parameters', a factor of other than 1 or 2 f32 values.
#[allow(clippy::too_many_arguments)]
pub fn adam_step(
    params: Vec<AnyTensor>,
    grads: Vec<AnyTensor>,
    moments: Option<(Vec<AnyTensor>, Vec<AnyTensor>)>,
    factor: Tensor<1>,
    settings: Vec<AdamTensorSettings>,
    betas: (f32, f32),
    epsilon: f32,
) -> AdamUpdate {
    const TAKES: &str = "adam_step takes parameters the multi-tensor kernels take, gradients (and moments) of \
                         their shapes and types, one settings per parameter, and a factor of 1 or 2 f32 values";
    assert!(params.iter().all(multi_tensor_kernels_take), "{TAKES}");
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        let (moments_1, moments_2) = moments.unwrap_or_default();
        let (params, moments_1, moments_2) = multi_tensor_adam::adam_step(
            params,
            grads,
            moments_1,
            moments_2,
            factor.into_dispatch(),
            settings,
            betas,
            epsilon,
        )
        .expect(TAKES);
        AdamUpdate { params, moments_1, moments_2 }
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = (grads, moments, factor, settings, betas, epsilon);
        unreachable!("no multi-tensor kernels in this build")
    }
}
