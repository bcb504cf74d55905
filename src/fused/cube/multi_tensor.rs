//! The optimiser step over every parameter tensor in a few launches (as llm.c and PyTorch's fused
//! AdamW): the global gradient norm, the step's verdict, and AdamW, each kernel taking a group of
//! tensors at once (a `Sequence` of bindings, as many as the device binds).
//!
//! Each tensor of a group is cut into chunks of [`CHUNK`] elements, one cube per chunk; a cube
//! finds its tensor among the group's by the first cube of each (`first_cube[t] <= cube <
//! first_cube[t + 1]`, compared unrolled over the group), so that large and small tensors share one
//! grid without idle cubes. Over all tensors `g_t` with clip `c` (`None`: no clip), the run's
//! soundness `s` (1 or 0) and per tensor `lr`, decay `wd` and step `t`:
//!
//! ```text
//! partials[cube] = sum over the cube's chunk of g^2                     (sum_of_squares_kernel)
//! S = sum(partials)   n = sqrt(S)   s' = s and S finite                  (step_verdict_kernel)
//! f = s' ? (c and n > c ? c / (n + 1e-6) : 1) : -1
//! g' = f g   m' = b1 m + (1 - b1) g'   v' = b2 v + (1 - b2) g'^2          (adam_kernel)
//! p' = p (1 - lr wd) - lr (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps)
//! (p, m, v) <- f >= 0 ? (p', m', v') : (p, m, v)
//! ```
//!
//! The updated parameters and moments go to new buffers, never over the old ones: a checkpoint
//! being saved on another thread may still be reading them (written in place, a resumed run lost
//! bit-identity with the run it resumed). Each launch's group is one op on Burn's fusion stream, so
//! the old tensors of a group are freed once it ran: the step needs one group's new tensors beyond
//! the model's. Arithmetic in f32
//! whatever the tensors' type, in the order of Burn's AdamW, so f32 results equal the per-tensor
//! update's (`tests/multi_tensor.rs`).

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::FloatTensor;
use burn::backend::{BackendTensor, Cube, DType, DispatchTensor, DispatchTensorKind, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::server::CubeCountSelection;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::fusion::custom_op_of_many;
use super::reduce::cube_sum;
use crate::fused::adam_settings::{AdamTensorSettings, AnyTensor, LossScaleRule};

/// Units per cube.
const UNITS: usize = 256;
/// Elements per unit in a chunk.
const PER_UNIT: usize = 16;
/// Elements one cube handles: a chunk of one tensor.
pub(super) const CHUNK: usize = UNITS * PER_UNIT;
/// Tensors one launch takes at most: the kernels are unrolled over their group, so this bounds
/// their size (and compile time); the device's bindings may bound it lower.
const MAX_GROUP: usize = 64;

/// The index of the tensor whose chunks include `cube`, or the group's size (`count`) for a cube
/// past the last chunk.
#[cube]
fn tensor_of(cube: usize, first_cube: &Sequence<usize>, #[comptime] count: usize) -> usize {
    let mut found = count.runtime();
    #[unroll]
    for t in 0..count {
        if cube >= first_cube[t] && cube < first_cube[t + 1] {
            found = t;
        }
    }
    found
}

/// The first element this unit handles in the cube's chunk of a tensor of `len` elements, whose
/// first cube is `first`, and the chunk's end; the unit strides by [`UNITS`].
#[cube]
fn chunk_of_unit(cube: usize, first: usize, len: usize) -> (usize, usize) {
    let chunk_start = (cube - first) * CHUNK;
    (chunk_start + UNIT_POS as usize, usize::min(chunk_start + CHUNK, len))
}

#[cube(launch)]
fn sum_of_squares_kernel<F: Float>(
    grads: &Sequence<OwnedTensor<F>>,
    partials: &mut Tensor<f32>,
    first_cube: Sequence<usize>,
    offset: usize,
    #[define(F)] _dtype: ElemType,
) {
    let count = comptime!(grads.len());
    let cube = CUBE_POS;
    let owner = tensor_of(cube, &first_cube, count);
    let mut squares = 0.0f32;
    #[unroll]
    for t in 0..count {
        if owner == t {
            let grad = grads.index(t);
            let (start, end) = chunk_of_unit(cube, first_cube[t], grad.len());
            let mut i = start;
            while i < end {
                let value = f32::cast_from(grad[i]);
                squares += value * value;
                i += UNITS;
            }
        }
    }
    let total = cube_sum(squares, UNITS);
    if UNIT_POS == 0 && owner < count {
        partials[offset + cube] = total;
    }
}

/// The sum of all `partials`, in a fixed order (each unit strides, then the cube's tree): the same
/// sum on every run. Every unit of the (one) cube gets it.
#[cube]
fn total_of(partials: &Tensor<f32>) -> f32 {
    let mut part = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < partials.len() {
        part += partials[i];
        i += UNITS;
    }
    cube_sum(part, UNITS)
}

/// The clip factor for a gradient of norm `norm`: `max_norm / (norm + 1e-6)` above `max_norm`, else 1.
#[cube]
fn clip_factor(norm: f32, max_norm: f32, #[comptime] clip: bool) -> f32 {
    let mut f = 1.0f32.runtime();
    if clip {
        f = select(norm > max_norm, (1.0f32 / (norm + 1e-6f32)) * max_norm, 1.0f32);
    }
    f
}

#[cube(launch)]
fn step_verdict_kernel(
    partials: &Tensor<f32>,
    sound: &Tensor<f32>,
    sum_of_squares: &mut Tensor<f32>,
    factor: &mut Tensor<f32>,
    sound_after: &mut Tensor<f32>,
    max_norm: f32,
    #[comptime] clip: bool,
) {
    let total = total_of(partials);
    if UNIT_POS == 0 {
        let finite = !(f32::is_nan(total) || f32::is_inf(total));
        let now_sound = finite && sound[0] > 0.5f32;
        let f = clip_factor(f32::sqrt(total), max_norm, clip);
        sum_of_squares[0] = total;
        factor[0] = select(now_sound, f, -1.0f32);
        sound_after[0] = select(now_sound, 1.0f32, 0.0f32);
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn scaled_step_verdict_kernel(
    partials: &Tensor<f32>,
    sound: &Tensor<f32>,
    scale_state: &Tensor<f32>,
    sum_of_squares: &mut Tensor<f32>,
    factor: &mut Tensor<f32>,
    sound_after: &mut Tensor<f32>,
    scale_state_after: &mut Tensor<f32>,
    max_norm: f32,
    growth_interval: f32,
    min_scale: f32,
    #[comptime] clip: bool,
) {
    let total = total_of(partials);
    if UNIT_POS == 0 {
        let mut scale = scale_state[0];
        let mut good = scale_state[1];
        let mut skipped = scale_state[2];
        let finite = !(f32::is_nan(total) || f32::is_inf(total));
        let mut now_sound = sound[0] > 0.5f32;
        let mut f = (-1.0f32).runtime();
        let mut skipped_now = 0.0f32.runtime();
        let mut reported = total;
        if finite {
            // The norm of the unscaled gradients decides the clip and is the one reported.
            reported = total / scale / scale;
            f = clip_factor(f32::sqrt(reported), max_norm, clip) / scale;
            good += 1.0f32;
            if good >= growth_interval {
                scale *= 2.0f32;
                good = 0.0f32;
            }
        } else if scale > min_scale {
            scale = f32::max(scale * 0.5f32, min_scale);
            good = 0.0f32;
            skipped += 1.0f32;
            skipped_now = 1.0f32;
        } else {
            // Scaling cannot cure it: a divergence, the step refused and the run no longer sound.
            now_sound = false;
        }
        sum_of_squares[0] = reported;
        factor[0] = select(now_sound, f, -1.0f32);
        factor[1] = skipped;
        sound_after[0] = select(now_sound, 1.0f32, 0.0f32);
        scale_state_after[0] = scale;
        scale_state_after[1] = good;
        scale_state_after[2] = skipped;
        scale_state_after[3] = skipped_now;
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_kernel<F: Float>(
    params: &Sequence<OwnedTensor<F>>,
    grads: &Sequence<OwnedTensor<F>>,
    moments_1: &Sequence<OwnedTensor<F>>,
    moments_2: &Sequence<OwnedTensor<F>>,
    params_out: &mut Sequence<OwnedTensor<F>>,
    moments_1_out: &mut Sequence<OwnedTensor<F>>,
    moments_2_out: &mut Sequence<OwnedTensor<F>>,
    factor: &Tensor<f32>,
    first_cube: Sequence<usize>,
    lr: Sequence<f32>,
    decay: Sequence<f32>,
    bias_1: Sequence<f32>,
    bias_2: Sequence<f32>,
    time: Sequence<f32>,
    betas: Sequence<f32>,
    epsilon: f32,
    #[comptime] fresh: bool,
    #[comptime] counts_skips: bool,
    #[define(F)] _dtype: ElemType,
) {
    let count = comptime!(grads.len());
    let cube = CUBE_POS;
    let owner = tensor_of(cube, &first_cube, count);
    let f = factor[0];
    let mut skipped = 0.0f32.runtime();
    if counts_skips {
        skipped = factor[1];
    }
    let (beta_1, beta_2) = (betas[0], betas[1]);
    #[unroll]
    for t in 0..count {
        if owner == t {
            // Steps skipped for an f16 overflow were no steps for Adam: its time is `t - skipped`.
            let mut b1 = bias_1[t];
            let mut b2 = bias_2[t];
            if skipped > 0.0f32 {
                let steps = f32::max(time[t] - skipped, 1.0f32);
                b1 = 1.0f32 - f32::powf(beta_1, steps);
                b2 = 1.0f32 - f32::powf(beta_2, steps);
            }
            let grad = grads.index(t);
            let param = params.index(t);
            let param_out = params_out.index_mut(t);
            let moment_1_out = moments_1_out.index_mut(t);
            let moment_2_out = moments_2_out.index_mut(t);
            let (start, end) = chunk_of_unit(cube, first_cube[t], grad.len());
            let mut i = start;
            while i < end {
                let p = f32::cast_from(param[i]);
                let mut m = 0.0f32.runtime();
                let mut v = 0.0f32.runtime();
                if !fresh {
                    m = f32::cast_from(moments_1.index(t)[i]);
                    v = f32::cast_from(moments_2.index(t)[i]);
                }
                if f >= 0.0f32 {
                    let g = f32::cast_from(grad[i]) * f;
                    let m_new = m * beta_1 + g * (1.0f32 - beta_1);
                    let v_new = v * beta_2 + g * g * (1.0f32 - beta_2);
                    let delta = (m_new / b1) / (f32::sqrt(v_new / b2) + epsilon);
                    param_out[i] = F::cast_from(p * decay[t] - delta * lr[t]);
                    moment_1_out[i] = F::cast_from(m_new);
                    moment_2_out[i] = F::cast_from(v_new);
                } else {
                    // A refused step keeps the parameter and its moments (zero before the first).
                    param_out[i] = F::cast_from(p);
                    moment_1_out[i] = F::cast_from(m);
                    moment_2_out[i] = F::cast_from(v);
                }
                i += UNITS;
            }
        }
    }
}

/// The tensors a launch of a kernel binding `per_tensor` buffers for each may take on a device
/// that binds `bindings` (`reserved` of them being the kernel's others).
fn group_size(bindings: u32, per_tensor: usize, reserved: usize) -> usize {
    ((bindings as usize).saturating_sub(reserved) / per_tensor).clamp(1, MAX_GROUP)
}

/// The first cube of each tensor of `group` and, last, the cubes of all.
fn first_cubes(group: &[CubeTensor]) -> Vec<usize> {
    let mut first = vec![0];
    for tensor in group {
        first.push(first.last().unwrap() + tensor.shape().num_elements().div_ceil(CHUNK));
    }
    first
}

/// The per-chunk sums of the squares of all `grads` (one dtype, contiguous), f32: one value per
/// cube, summed by the verdict kernels.
fn partial_sums_of_squares(grads: Vec<CubeTensor>, like: &CubeTensor) -> CubeTensor {
    let grads: Vec<CubeTensor> = grads.into_iter().map(into_contiguous).collect();
    let (client, device, dtype) = (like.client.clone(), like.device.clone(), grads[0].dtype);
    let group = group_size(client.properties().hardware.max_bindings, 1, 2);
    let cubes = first_cubes(&grads);
    let partials = empty_device_dtype(client.clone(), device, [cubes[cubes.len() - 1]].into(), DType::F32);
    let mut offset = 0;
    for chunk in grads.chunks(group) {
        let first = first_cubes(chunk);
        let total = first[first.len() - 1];
        if total > 0 {
            sum_of_squares_kernel::launch(
                &client,
                CubeCountSelection::new(&client, total as u32).cube_count(),
                CubeDim::new_1d(UNITS as u32),
                chunk.iter().map(|t| t.clone().into_tensor_arg()).collect(),
                partials.clone().into_tensor_arg(),
                first.into_iter().collect(),
                offset,
                dtype_to_storage_type(dtype),
            );
        }
        offset += total;
    }
    partials
}

/// An f32 tensor of `len` elements on `like`'s device, to be written.
fn f32_output(like: &CubeTensor, len: usize) -> CubeTensor {
    empty_device_dtype(like.client.clone(), like.device.clone(), [len].into(), DType::F32)
}

/// The sum of the squares of all `grads` (one dtype, contiguous), `[1]` f32, with the step's
/// verdict: `(sum, factor, sound after)` as in the module's doc, each `[1]` f32. `sound` is `[1]`
/// f32, 1 while every step so far had finite gradients.
pub(super) fn grad_norm_and_verdict(
    grads: Vec<CubeTensor>,
    sound: CubeTensor,
    max_norm: Option<f32>,
) -> [CubeTensor; 3] {
    let partials = partial_sums_of_squares(grads, &sound);
    let (sum, factor, sound_after) = (f32_output(&sound, 1), f32_output(&sound, 1), f32_output(&sound, 1));
    step_verdict_kernel::launch(
        &sound.client.clone(),
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(UNITS as u32),
        partials.into_tensor_arg(),
        sound.into_tensor_arg(),
        sum.clone().into_tensor_arg(),
        factor.clone().into_tensor_arg(),
        sound_after.clone().into_tensor_arg(),
        max_norm.unwrap_or(0.0),
        max_norm.is_some(),
    );
    [sum, factor, sound_after]
}

/// [`grad_norm_and_verdict`] for gradients of a loss multiplied by a dynamic loss scale (f16):
/// `scale_state` is `[scale, good steps, skipped steps]` (`[3]` f32). Returns `(sum, factor,
/// sound after, state after)`: the sum of the unscaled gradients' squares (the scaled one where it
/// overflowed), the factor `[2]` (the unscale times the clip, or -1; then the steps skipped so
/// far), and the state `[4]` (then whether this step was skipped).
pub(super) fn scaled_grad_norm_and_verdict(
    grads: Vec<CubeTensor>,
    sound: CubeTensor,
    scale_state: CubeTensor,
    max_norm: Option<f32>,
    rule: LossScaleRule,
) -> [CubeTensor; 4] {
    let partials = partial_sums_of_squares(grads, &sound);
    let (sum, factor, sound_after) = (f32_output(&sound, 1), f32_output(&sound, 2), f32_output(&sound, 1));
    let state_after = f32_output(&sound, 4);
    scaled_step_verdict_kernel::launch(
        &sound.client.clone(),
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(UNITS as u32),
        partials.into_tensor_arg(),
        sound.into_tensor_arg(),
        into_contiguous(scale_state).into_tensor_arg(),
        sum.clone().into_tensor_arg(),
        factor.clone().into_tensor_arg(),
        sound_after.clone().into_tensor_arg(),
        state_after.clone().into_tensor_arg(),
        max_norm.unwrap_or(0.0),
        rule.growth_interval as f32,
        rule.min_scale as f32,
        max_norm.is_some(),
    );
    [sum, factor, sound_after, state_after]
}

/// AdamW over one group of tensors (as many as one launch binds): `params`, `grads` and (`None`:
/// the first step, zero) the moments, all of one dtype; `factor` the verdict's (`[1]` f32, or `[2]`
/// with the steps skipped so far for an f16 overflow).
/// Returns `(params, moments 1, moments 2)` updated, in new buffers: the inputs are never
/// written, as a checkpoint being saved on another thread may still read them.
#[allow(clippy::too_many_arguments)]
fn adam(
    params: Vec<CubeTensor>,
    grads: Vec<CubeTensor>,
    moments: Option<(Vec<CubeTensor>, Vec<CubeTensor>)>,
    factor: CubeTensor,
    settings: &[AdamTensorSettings],
    betas: (f32, f32),
    epsilon: f32,
) -> (Vec<CubeTensor>, Vec<CubeTensor>, Vec<CubeTensor>) {
    let fresh = moments.is_none();
    let counts_skips = factor.shape().num_elements() == 2;
    let contiguous = |tensors: Vec<CubeTensor>| tensors.into_iter().map(into_contiguous).collect::<Vec<_>>();
    let (params, grads) = (contiguous(params), contiguous(grads));
    let (moments_1, moments_2) = moments.map_or((Vec::new(), Vec::new()), |(m1, m2)| (contiguous(m1), contiguous(m2)));
    let empty = |t: &CubeTensor| empty_device_dtype(t.client.clone(), t.device.clone(), t.shape(), t.dtype);
    let outputs = || params.iter().map(empty).collect::<Vec<_>>();
    let (params_out, moments_1_out, moments_2_out) = (outputs(), outputs(), outputs());
    let first = first_cubes(&params);
    let total = first[first.len() - 1];
    if total > 0 {
        let client = factor.client.clone();
        let args = |tensors: &[CubeTensor]| tensors.iter().map(|t| t.clone().into_tensor_arg()).collect();
        let each = |value: fn(&AdamTensorSettings) -> f32| settings.iter().map(value).collect();
        adam_kernel::launch(
            &client,
            CubeCountSelection::new(&client, total as u32).cube_count(),
            CubeDim::new_1d(UNITS as u32),
            args(&params),
            args(&grads),
            args(&moments_1),
            args(&moments_2),
            args(&params_out),
            args(&moments_1_out),
            args(&moments_2_out),
            factor.into_tensor_arg(),
            first.into_iter().collect(),
            each(|s| s.lr),
            each(|s| s.decay),
            each(|s| s.bias_1),
            each(|s| s.bias_2),
            each(|s| s.time),
            [betas.0, betas.1].into_iter().collect(),
            epsilon,
            fresh,
            counts_skips,
            dtype_to_storage_type(params[0].dtype),
        );
    }
    (params_out, moments_1_out, moments_2_out)
}

/// Whether the kernels take `tensors`: one float type of theirs, each tensor's elements a `u32`
/// counts. Their shapes are free.
fn kernels_take(tensors: &[FloatTensor<Cube>]) -> bool {
    let dtype = tensors[0].dtype;
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && tensors.iter().all(|t| t.dtype == dtype && u32::try_from(t.shape.num_elements()).is_ok())
}

/// `tensor`'s fusion tensor, if it is a float tensor of the CubeCL backend.
fn fusion_tensor(tensor: AnyTensor) -> Option<FloatTensor<Cube>> {
    match tensor.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(tensor)) => Some(tensor),
        _ => None,
    }
}

/// `tensor` as a tensor of any rank.
fn any_tensor(tensor: FloatTensor<Cube>) -> AnyTensor {
    DispatchTensor { kind: DispatchTensorKind::Cube(BackendTensor::Float(tensor)), autodiff: Default::default() }
}

/// Whether the kernels take `tensor`: a float tensor of the CubeCL backend, of a type of theirs,
/// whose elements a `u32` counts.
pub(in crate::fused) fn takes(tensor: &AnyTensor) -> bool {
    match &tensor.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(tensor)) => kernels_take(std::slice::from_ref(tensor)),
        _ => false,
    }
}

/// All `tensors` as fusion tensors, or `None`.
fn fusion_tensors(tensors: Vec<AnyTensor>) -> Option<Vec<FloatTensor<Cube>>> {
    tensors.into_iter().map(fusion_tensor).collect()
}

/// [`grad_norm_and_verdict`] on the fusion stream, for
/// [`fused::multi_tensor::grad_norm_and_verdict`](crate::fused::multi_tensor::grad_norm_and_verdict).
pub(in crate::fused) fn grad_norm_and_verdict_op(
    grads: Vec<AnyTensor>,
    sound: AnyTensor,
    max_norm: Option<f32>,
) -> Option<[AnyTensor; 3]> {
    let grads = fusion_tensors(grads)?;
    let sound = fusion_tensor(sound)?;
    if grads.is_empty() || !kernels_take(&grads) || sound.dtype != DType::F32 {
        return None;
    }
    let mut inputs = grads;
    inputs.push(sound);
    let scalar = TensorSpec::new([1].into(), DType::F32);
    let scalars = [f64::from(max_norm.unwrap_or(f32::NAN))];
    let outputs = custom_op_of_many("grad_norm_and_verdict", inputs, vec![scalar; 3], &scalars, move |mut tensors| {
        let sound = tensors.pop().expect("the soundness flag");
        grad_norm_and_verdict(tensors, sound, max_norm).into()
    });
    let [sum, factor, sound] = outputs.try_into().ok()?;
    Some([sum, factor, sound].map(any_tensor))
}

/// [`scaled_grad_norm_and_verdict`] on the fusion stream, for
/// [`fused::multi_tensor::scaled_grad_norm_and_verdict`](crate::fused::multi_tensor::scaled_grad_norm_and_verdict).
pub(in crate::fused) fn scaled_grad_norm_and_verdict_op(
    grads: Vec<AnyTensor>,
    sound: AnyTensor,
    scale_state: AnyTensor,
    max_norm: Option<f32>,
    rule: LossScaleRule,
) -> Option<[AnyTensor; 4]> {
    let grads = fusion_tensors(grads)?;
    let (sound, scale_state) = (fusion_tensor(sound)?, fusion_tensor(scale_state)?);
    if grads.is_empty()
        || !kernels_take(&grads)
        || sound.dtype != DType::F32
        || scale_state.dtype != DType::F32
        || scale_state.shape.num_elements() < 3
    {
        return None;
    }
    let mut inputs = grads;
    inputs.extend([sound, scale_state]);
    let spec = |len: usize| TensorSpec::new([len].into(), DType::F32);
    let outputs = vec![spec(1), spec(2), spec(1), spec(4)];
    let scalars = [max_norm.unwrap_or(f32::NAN), rule.growth_interval as f32, rule.min_scale as f32].map(f64::from);
    let outputs = custom_op_of_many("scaled_grad_norm_and_verdict", inputs, outputs, &scalars, move |mut tensors| {
        let scale_state = tensors.pop().expect("the loss scale's state");
        let sound = tensors.pop().expect("the soundness flag");
        scaled_grad_norm_and_verdict(tensors, sound, scale_state, max_norm, rule).into()
    });
    let [sum, factor, sound, state] = outputs.try_into().ok()?;
    Some([sum, factor, sound, state].map(any_tensor))
}

/// [`adam`] on the fusion stream, for
/// [`fused::multi_tensor::adam_step`](crate::fused::multi_tensor::adam_step); empty moments: the
/// first step. `None` for tensors the kernels do not take.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(in crate::fused) fn adam_step(
    params: Vec<AnyTensor>,
    grads: Vec<AnyTensor>,
    moments_1: Vec<AnyTensor>,
    moments_2: Vec<AnyTensor>,
    factor: AnyTensor,
    settings: Vec<AdamTensorSettings>,
    betas: (f32, f32),
    epsilon: f32,
) -> Option<(Vec<AnyTensor>, Vec<AnyTensor>, Vec<AnyTensor>)> {
    let (params, grads) = (fusion_tensors(params)?, fusion_tensors(grads)?);
    let (moments_1, moments_2) = (fusion_tensors(moments_1)?, fusion_tensors(moments_2)?);
    let factor = fusion_tensor(factor)?;
    let count = params.len();
    let fresh = moments_1.is_empty() && moments_2.is_empty();
    let same = |others: &[FloatTensor<Cube>]| {
        others.len() == count && others.iter().zip(&params).all(|(o, p)| o.shape == p.shape && o.dtype == p.dtype)
    };
    if count == 0
        || settings.len() != count
        || !kernels_take(&params)
        || !same(&grads)
        || !(fresh || (same(&moments_1) && same(&moments_2)))
        || factor.dtype != DType::F32
        || !matches!(factor.shape.num_elements(), 1 | 2)
    {
        return None;
    }
    // One op per launch's group, so that each group's old tensors are freed once its update ran:
    // the step needs memory for one group's new tensors beyond the model's, not the model's again.
    let per_tensor = if fresh { 5 } else { 7 };
    let bindings = params[0].client.device().client().properties().hardware.max_bindings;
    let group = group_size(bindings, per_tensor, 2);
    let (mut params, mut grads, mut moments_1, mut moments_2) = (params, grads, moments_1, moments_2);
    let (mut new_params, mut new_moments_1, mut new_moments_2) = (Vec::new(), Vec::new(), Vec::new());
    let mut settings = settings;
    while !params.is_empty() {
        let n = group.min(params.len());
        let take = |tensors: &mut Vec<FloatTensor<Cube>>| tensors.drain(..n.min(tensors.len())).collect::<Vec<_>>();
        let (group_params, group_grads) = (take(&mut params), take(&mut grads));
        let (group_moments_1, group_moments_2) = (take(&mut moments_1), take(&mut moments_2));
        let group_settings: Vec<AdamTensorSettings> = settings.drain(..n).collect();
        let specs: Vec<TensorSpec> = group_params.iter().map(|p| TensorSpec::new(p.shape.clone(), p.dtype)).collect();
        let outputs = [specs.clone(), specs.clone(), specs].concat();
        let mut scalars = vec![f64::from(betas.0), f64::from(betas.1), f64::from(epsilon)];
        scalars.extend(group_settings.iter().flat_map(|s| [s.lr, s.decay, s.bias_1, s.bias_2, s.time].map(f64::from)));
        let inputs = [group_params, group_grads, group_moments_1, group_moments_2, vec![factor.clone()]].concat();
        let mut outputs = custom_op_of_many("adam_step", inputs, outputs, &scalars, move |mut tensors| {
            let factor = tensors.pop().expect("the factor");
            let mut take = |n: usize| tensors.drain(..n).collect::<Vec<_>>();
            let (params, grads) = (take(n), take(n));
            let moments = (!fresh).then(|| (take(n), take(n)));
            let (params, moments_1, moments_2) = adam(params, grads, moments, factor, &group_settings, betas, epsilon);
            [params, moments_1, moments_2].concat()
        });
        let group_moments_2 = outputs.split_off(2 * n);
        let group_moments_1 = outputs.split_off(n);
        new_params.extend(outputs.into_iter().map(any_tensor));
        new_moments_1.extend(group_moments_1.into_iter().map(any_tensor));
        new_moments_2.extend(group_moments_2.into_iter().map(any_tensor));
    }
    let (outputs, moments_1, moments_2) = (new_params, new_moments_1, new_moments_2);
    Some((outputs, moments_1, moments_2))
}
