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
use crate::fused::adam_settings::{AnyTensor, LossScaleRule};

/// Units per cube.
pub(super) const UNITS: usize = 256;
/// Elements per unit in a chunk.
pub(super) const PER_UNIT: usize = 16;
/// Elements one cube handles: a chunk of one tensor.
pub(super) const CHUNK: usize = UNITS * PER_UNIT;
/// Tensors one launch takes at most: the kernels are unrolled over their group, so this bounds
/// their size (and compile time); the device's bindings may bound it lower.
const MAX_GROUP: usize = 64;

/// The index of the tensor whose chunks include `cube`, or the group's size (`count`) for a cube
/// past the last chunk.
#[cube]
pub(super) fn tensor_of(cube: usize, first_cube: &Sequence<usize>, #[comptime] count: usize) -> usize {
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
pub(super) fn chunk_of_unit(cube: usize, first: usize, len: usize) -> (usize, usize) {
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

/// The tensors a launch of a kernel binding `per_tensor` buffers for each may take on a device
/// that binds `bindings` (`reserved` of them being the kernel's others).
pub(super) fn group_size(bindings: u32, per_tensor: usize, reserved: usize) -> usize {
    ((bindings as usize).saturating_sub(reserved) / per_tensor).clamp(1, MAX_GROUP)
}

/// The first cube of each tensor of `group` and, last, the cubes of all.
pub(super) fn first_cubes(group: &[CubeTensor]) -> Vec<usize> {
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

/// Whether the kernels take `tensors`: one float type of theirs, each tensor's elements a `u32`
/// counts. Their shapes are free.
pub(super) fn kernels_take(tensors: &[FloatTensor<Cube>]) -> bool {
    let dtype = tensors[0].dtype;
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && tensors.iter().all(|t| t.dtype == dtype && u32::try_from(t.shape.num_elements()).is_ok())
}

/// `tensor`'s fusion tensor, if it is a float tensor of the CubeCL backend.
pub(super) fn fusion_tensor(tensor: AnyTensor) -> Option<FloatTensor<Cube>> {
    match tensor.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(tensor)) => Some(tensor),
        _ => None,
    }
}

/// `tensor` as a tensor of any rank.
pub(super) fn any_tensor(tensor: FloatTensor<Cube>) -> AnyTensor {
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
pub(super) fn fusion_tensors(tensors: Vec<AnyTensor>) -> Option<Vec<FloatTensor<Cube>>> {
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
