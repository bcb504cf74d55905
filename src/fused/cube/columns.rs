//! Weights' columns packed side by side and cut apart again, as CubeCL kernels: one unit per
//! element of the packed `[d_in, w_0 + w_1 + w_2]` matrix, `w_2` possibly 0. With `w = w_0 + w_1 +
//! w_2`, element `(r, c)` of the packed matrix is element `(r, c - start_p)` of the part `p` whose
//! columns `start_p .. start_p + w_p` hold `c`, converted to the destination's type:
//!   pack:   `packed[r w + c] = part_p[r w_p + c - start_p]`
//!   unpack: `part_p[r w_p + c - start_p] = packed[r w + c]`
//! So a projection's weights are cast once and packed in one launch, and their gradients come
//! back in one.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::elementwise::{element_cubes, UNITS};

#[cube(launch)]
fn pack_columns_kernel<F: Float, G: Float>(
    first: &Tensor<F>,
    second: &Tensor<F>,
    third: &Tensor<F>,
    packed: &mut Tensor<G>,
    n: u32,
    first_width: u32,
    second_width: u32,
    third_width: u32,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (w0, w1, w2) = (first_width as usize, second_width as usize, third_width as usize);
    let width = w0 + w1 + w2;
    let (row, c) = (i / width, i % width);
    if c < w0 {
        packed[i] = G::cast_from(first[row * w0 + c]);
    } else if c < w0 + w1 {
        packed[i] = G::cast_from(second[row * w1 + c - w0]);
    } else {
        packed[i] = G::cast_from(third[row * w2 + c - w0 - w1]);
    }
}

#[cube(launch)]
fn unpack_columns_kernel<F: Float, G: Float>(
    packed: &Tensor<F>,
    first: &mut Tensor<G>,
    second: &mut Tensor<G>,
    third: &mut Tensor<G>,
    n: u32,
    first_width: u32,
    second_width: u32,
    third_width: u32,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (w0, w1, w2) = (first_width as usize, second_width as usize, third_width as usize);
    let width = w0 + w1 + w2;
    let (row, c) = (i / width, i % width);
    let value = G::cast_from(packed[i]);
    if c < w0 {
        first[row * w0 + c] = value;
    } else if c < w0 + w1 {
        second[row * w1 + c - w0] = value;
    } else {
        third[row * w2 + c - w0 - w1] = value;
    }
}

/// The widths of up to three parts, missing ones 0.
fn widths_of(widths: &[usize]) -> [u32; 3] {
    let mut all = [0u32; 3];
    for (slot, &width) in all.iter_mut().zip(widths) {
        *slot = width as u32;
    }
    all
}

/// `parts` (two or three `[d_in, w_p]` matrices of one dtype) packed into `[d_in, sum w_p]` in `dtype`.
pub(super) fn pack(parts: Vec<CubeTensor>, dtype: DType) -> [CubeTensor; 1] {
    let parts: Vec<CubeTensor> = parts.into_iter().map(into_contiguous).collect();
    let rows = parts[0].shape()[0];
    let widths: Vec<usize> = parts.iter().map(|part| part.shape()[1]).collect();
    let width: usize = widths.iter().sum();
    let (client, device, part_dtype) = (parts[0].client.clone(), parts[0].device.clone(), parts[0].dtype);
    let packed = empty_device_dtype(client.clone(), device, Shape::from([rows, width]), dtype);
    let n = rows * width;
    // A missing third part is never read: the first stands in for its binding.
    let third = parts.get(2).unwrap_or(&parts[0]).clone();
    let [w0, w1, w2] = widths_of(&widths);
    if n > 0 {
        pack_columns_kernel::launch(
            &client,
            element_cubes(&packed, n),
            CubeDim::new_1d(UNITS as u32),
            parts[0].clone().into_tensor_arg(),
            parts[1].clone().into_tensor_arg(),
            third.into_tensor_arg(),
            packed.clone().into_tensor_arg(),
            n as u32,
            w0,
            w1,
            w2,
            [dtype_to_storage_type(part_dtype), dtype_to_storage_type(dtype)],
        );
    }
    [packed]
}

/// `packed: [d_in, sum widths]` cut into two or three `[d_in, widths[p]]` parts in `dtype`.
pub(super) fn unpack(packed: CubeTensor, widths: Vec<usize>, dtype: DType) -> Vec<CubeTensor> {
    let packed = into_contiguous(packed);
    let rows = packed.shape()[0];
    let (client, device) = (packed.client.clone(), packed.device.clone());
    let parts: Vec<CubeTensor> = widths
        .iter()
        .map(|&width| empty_device_dtype(client.clone(), device.clone(), Shape::from([rows, width]), dtype))
        .collect();
    // A missing third part is never written: a one-value buffer stands in for its binding.
    let third = match parts.get(2) {
        Some(part) => part.clone(),
        None => empty_device_dtype(client.clone(), device, Shape::from([1]), dtype),
    };
    let n = packed.shape().num_elements();
    let [w0, w1, w2] = widths_of(&widths);
    if n > 0 {
        unpack_columns_kernel::launch(
            &client,
            element_cubes(&packed, n),
            CubeDim::new_1d(UNITS as u32),
            packed.clone().into_tensor_arg(),
            parts[0].clone().into_tensor_arg(),
            parts[1].clone().into_tensor_arg(),
            third.into_tensor_arg(),
            n as u32,
            w0,
            w1,
            w2,
            [dtype_to_storage_type(packed.dtype), dtype_to_storage_type(dtype)],
        );
    }
    parts
}
