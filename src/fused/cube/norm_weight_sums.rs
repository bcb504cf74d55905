//! The last step of a norm's weight gradient: the column sums of its per-block partial sums.
//!
//! The weight-gradient kernels write `partials: [count, d]` in f32 (one row per block of input
//! rows; WGSL has no float atomics). One launch then gives
//!   `out[j] = scale * sum_p partials[p, j]`
//! in the weight's dtype: one unit per column, summing the partials in order (a fixed order, so
//! the result does not depend on timing). It replaces a sum, a multiplication and a cast.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::rows::BLOCK;

#[cube(launch)]
fn norm_weight_sums_kernel<G: Float>(
    partials: &Tensor<f32>,
    out: &mut Tensor<G>,
    count: u32,
    d: u32,
    scale: f32,
    #[define(G)] _dtype: ElemType,
) {
    let d = d as usize;
    let column = ABSOLUTE_POS_X as usize;
    if column >= d {
        terminate!();
    }
    let mut sum = 0.0f32;
    let mut partial = 0usize;
    while partial < count as usize {
        sum += partials[partial * d + column];
        partial += 1;
    }
    out[column] = G::cast_from(sum * scale);
}

/// `scale * sum over rows of partials: [count, d]` (contiguous f32) as a tensor of `shape`
/// (`d` elements) and `dtype`.
pub(super) fn norm_weight_sums(partials: CubeTensor, scale: f64, shape: Shape, dtype: DType) -> CubeTensor {
    let (count, d) = (partials.shape()[0], partials.shape()[1]);
    let out = empty_device_dtype(partials.client.clone(), partials.device.clone(), shape, dtype);
    if d == 0 {
        return out;
    }
    norm_weight_sums_kernel::launch(
        &partials.client,
        CubeCount::Static(d.div_ceil(BLOCK) as u32, 1, 1),
        CubeDim::new_1d(BLOCK as u32),
        partials.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        count as u32,
        d as u32,
        scale as f32,
        dtype_to_storage_type(dtype),
    );
    out
}
