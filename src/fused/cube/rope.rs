//! RoPE as a CubeCL kernel: one unit per element of `x: [b, s, h, hd]` (contiguous, `hd` even)
//! with tables `cos, sin: [s, hd]`, computed in f32. With `half = hd / 2`, `j` the element's place
//! in its head and `p` its position:
//!   `y[j] = x[j] cos[p, j] - x[j + half] sin[p, j]` for `j < half`,
//!   `y[j] = x[j] cos[p, j] + x[j - half] sin[p, j]` otherwise;
//! that is `x cos + rotate_half(x) sin`. The backward is the same kernel with `-sin`.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::TensorMetadata;
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::elementwise::{element_cubes, UNITS};

#[cube(launch)]
fn rope_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    cos: &Tensor<G>,
    sin: &Tensor<G>,
    y: &mut Tensor<F>,
    n: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    #[define(F, G)] _dtypes: [ElemType; 2],
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let head_dim = head_dim as usize;
    let half = head_dim / 2;
    let j = i % head_dim;
    let position = (i / (head_dim * heads as usize)) % seq as usize;
    let at = position * head_dim + j;
    // rotate_half: the element half a head away, negated in the first half.
    let partner = i - j + (j + half) % head_dim;
    let mut sign = 1.0f32;
    if j < half {
        sign = -1.0f32;
    }
    let rotated = sign * f32::cast_from(x[partner]);
    let value = f32::cast_from(x[i]) * f32::cast_from(cos[at]) + rotated * f32::cast_from(sin[at]);
    y[i] = F::cast_from(value);
}

/// `y`: `x`'s shape and dtype.
pub(super) fn forward(x: CubeTensor, cos: CubeTensor, sin: CubeTensor) -> [CubeTensor; 1] {
    let (x, cos, sin) = (into_contiguous(x), into_contiguous(cos), into_contiguous(sin));
    let shape = x.shape();
    let [_, seq, heads, head_dim] = shape.dims::<4>();
    let (client, dtype, table_dtype, n) = (x.client.clone(), x.dtype, cos.dtype, shape.num_elements());
    let y = empty_device_dtype(client.clone(), x.device.clone(), shape, dtype);
    if n > 0 {
        rope_kernel::launch(
            &client,
            element_cubes(&x, n),
            CubeDim::new_1d(UNITS as u32),
            x.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            n as u32,
            seq as u32,
            heads as u32,
            head_dim as u32,
            [dtype_to_storage_type(dtype), dtype_to_storage_type(table_dtype)],
        );
    }
    [y]
}
