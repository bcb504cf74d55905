//! SwiGLU as CubeCL kernels, forward and backward, one unit per element of `gate, up: [..., d]`
//! (contiguous, one dtype), computed in f32 whatever the inputs' precision. With
//! `s = sigmoid(gate)` and `silu = gate s`:
//!   forward: `y = silu up`;
//!   backward: `d up = dy silu`, `d gate = dy up (s + silu - silu s)` (`s (1 + gate (1 - s))`),
//!   both written by one pass that reads `gate`, `up` and `dy` once.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::TensorMetadata;
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::elementwise::{element_cubes, UNITS};

/// `(sigmoid(g), g sigmoid(g))` in f32.
#[cube]
fn sigmoid_and_silu(g: f32) -> (f32, f32) {
    let s = 1.0f32 / (1.0f32 + (-g).exp());
    (s, g * s)
}

#[cube(launch)]
fn swiglu_forward_kernel<F: Float>(
    gate: &Tensor<F>,
    up: &Tensor<F>,
    y: &mut Tensor<F>,
    n: u32,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (_, silu) = sigmoid_and_silu(f32::cast_from(gate[i]));
    y[i] = F::cast_from(silu * f32::cast_from(up[i]));
}

#[cube(launch)]
fn swiglu_backward_kernel<F: Float>(
    gate: &Tensor<F>,
    up: &Tensor<F>,
    grad: &Tensor<F>,
    grad_gate: &mut Tensor<F>,
    grad_up: &mut Tensor<F>,
    n: u32,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (s, silu) = sigmoid_and_silu(f32::cast_from(gate[i]));
    let dy = f32::cast_from(grad[i]);
    grad_up[i] = F::cast_from(dy * silu);
    grad_gate[i] = F::cast_from(dy * f32::cast_from(up[i]) * (s + silu - silu * s));
}

/// `y`: `gate`'s shape and dtype.
pub(super) fn forward(gate: CubeTensor, up: CubeTensor) -> [CubeTensor; 1] {
    let (gate, up) = (into_contiguous(gate), into_contiguous(up));
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, gate.shape().num_elements());
    let y = empty_device_dtype(client.clone(), gate.device.clone(), gate.shape(), dtype);
    if n > 0 {
        swiglu_forward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            gate.into_tensor_arg(),
            up.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            n as u32,
            dtype_to_storage_type(dtype),
        );
    }
    [y]
}

/// `(grad gate, grad up)`: `gate`'s shape and dtype.
pub(super) fn backward(gate: CubeTensor, up: CubeTensor, grad: CubeTensor) -> [CubeTensor; 2] {
    let (gate, up, grad) = (into_contiguous(gate), into_contiguous(up), into_contiguous(grad));
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, gate.shape().num_elements());
    let empty = || empty_device_dtype(client.clone(), gate.device.clone(), gate.shape(), dtype);
    let (grad_gate, grad_up) = (empty(), empty());
    if n > 0 {
        swiglu_backward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            gate.into_tensor_arg(),
            up.into_tensor_arg(),
            grad.into_tensor_arg(),
            grad_gate.clone().into_tensor_arg(),
            grad_up.clone().into_tensor_arg(),
            n as u32,
            dtype_to_storage_type(dtype),
        );
    }
    [grad_gate, grad_up]
}
