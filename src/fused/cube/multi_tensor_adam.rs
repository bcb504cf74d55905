//! AdamW over every parameter tensor in a few launches: the last kernel of the optimiser step of
//! [`multi_tensor`](super::multi_tensor), whose module doc gives the chunking and the update's
//! formula. Each launch's group is one op on Burn's fusion stream.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Cube, DType, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::server::CubeCountSelection;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::fusion::custom_op_of_many;
use super::multi_tensor::{
    any_tensor, chunk_of_unit, first_cubes, fusion_tensor, fusion_tensors, group_size, kernels_take, tensor_of, UNITS,
};
use crate::fused::adam_settings::{AdamTensorSettings, AnyTensor};

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
