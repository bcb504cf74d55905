//! SwiGLU as CubeCL kernels, forward and backward, one unit per element of the output `[..., d]`,
//! computed in f32 whatever the inputs' precision. With `s = sigmoid(gate)` and `silu = gate s`:
//!   forward: `y = silu up`;
//!   backward: `d up = dy silu`, `d gate = dy up (s + silu - silu s)` (`s (1 + gate (1 - s))`),
//!   both written by one pass that reads `gate`, `up` and `dy` once.
//!
//! `gate` and `up` are either tensors of their own (contiguous, one dtype) or the two halves of
//! one packed projection `[..., 2d]` (what one matrix product of the gate and up projections
//! makes), read in place: element `i` of a half is at `(i / d) stride + offset + i % d` ([`Halves`]).
//! The backward writes both gradients into one buffer laid out the same way.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Shape, Slice, TensorMetadata};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::prelude::*;

use super::elementwise::{element_cubes, UNITS};

/// Where the gate's and up's rows of `d` values lie: `stride` values apart, from `gate_offset`
/// and `up_offset`.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct Halves {
    d: u32,
    stride: u32,
    gate_offset: u32,
    up_offset: u32,
}

/// Where element `i` of the gate and of up are.
#[cube]
fn places(i: usize, halves: &Halves) -> (usize, usize) {
    let d = halves.d as usize;
    let start = (i / d) * halves.stride as usize + i % d;
    (start + halves.gate_offset as usize, start + halves.up_offset as usize)
}

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
    halves: &Halves,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (at_gate, at_up) = places(i, halves);
    let (_, silu) = sigmoid_and_silu(f32::cast_from(gate[at_gate]));
    y[i] = F::cast_from(silu * f32::cast_from(up[at_up]));
}

#[cube(launch)]
fn swiglu_backward_kernel<F: Float>(
    gate: &Tensor<F>,
    up: &Tensor<F>,
    grad: &Tensor<F>,
    grad_gate_up: &mut Tensor<F>,
    n: u32,
    halves: &Halves,
    grad_halves: &Halves,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let (at_gate, at_up) = places(i, halves);
    let (s, silu) = sigmoid_and_silu(f32::cast_from(gate[at_gate]));
    let dy = f32::cast_from(grad[i]);
    let (grad_gate, grad_up) = places(i, grad_halves);
    grad_gate_up[grad_up] = F::cast_from(dy * silu);
    grad_gate_up[grad_gate] = F::cast_from(dy * f32::cast_from(up[at_up]) * (s + silu - silu * s));
}

fn halves(d: usize, stride: usize, gate_offset: usize, up_offset: usize) -> HalvesLaunch {
    HalvesLaunch::new(d as u32, stride as u32, gate_offset as u32, up_offset as u32)
}

/// `y: [..., d]` of `gate`, `up` laid out as `layout` says; `shape` is `y`'s.
fn launch_forward(gate: CubeTensor, up: CubeTensor, shape: Shape, layout: HalvesLaunch) -> CubeTensor {
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, shape.num_elements());
    let y = empty_device_dtype(client.clone(), gate.device.clone(), shape, dtype);
    if n > 0 {
        swiglu_forward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            gate.into_tensor_arg(),
            up.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            n as u32,
            layout,
            dtype_to_storage_type(dtype),
        );
    }
    y
}

/// Writes the gradients of `gate`, `up` (laid out as `layout`) into `grad_gate_up` (laid out as
/// `grad_layout`) from `grad: [..., d]`.
fn launch_backward(
    gate: CubeTensor,
    up: CubeTensor,
    grad: CubeTensor,
    grad_gate_up: &CubeTensor,
    layout: HalvesLaunch,
    grad_layout: HalvesLaunch,
) {
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, grad.shape().num_elements());
    if n > 0 {
        swiglu_backward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            gate.into_tensor_arg(),
            up.into_tensor_arg(),
            grad.into_tensor_arg(),
            grad_gate_up.clone().into_tensor_arg(),
            n as u32,
            layout,
            grad_layout,
            dtype_to_storage_type(dtype),
        );
    }
}

/// `y`: `gate`'s shape and dtype.
pub(super) fn forward(gate: CubeTensor, up: CubeTensor) -> [CubeTensor; 1] {
    let (gate, up) = (into_contiguous(gate), into_contiguous(up));
    let shape = gate.shape();
    let d = shape[shape.num_dims() - 1];
    [launch_forward(gate, up, shape, halves(d, d, 0, 0))]
}

/// `(grad gate, grad up)`: `gate`'s shape and dtype, written one after the other into one buffer.
pub(super) fn backward(gate: CubeTensor, up: CubeTensor, grad: CubeTensor) -> [CubeTensor; 2] {
    let (gate, up, grad) = (into_contiguous(gate), into_contiguous(up), into_contiguous(grad));
    let shape = gate.shape();
    let (d, n) = (shape[shape.num_dims() - 1], shape.num_elements());
    let both = empty_device_dtype(gate.client.clone(), gate.device.clone(), Shape::from([2 * n]), gate.dtype);
    launch_backward(gate, up, grad, &both, halves(d, d, 0, 0), halves(d, d, 0, n));
    let part = |range: std::ops::Range<usize>| {
        CubeBackend::float_reshape(CubeBackend::float_slice(both.clone(), &[Slice::from(range)]), shape.clone())
    };
    [part(0..n), part(n..2 * n)]
}

/// `y: [..., d]` of the halves of `gate_up: [..., 2d]`, in its dtype.
pub(super) fn packed_forward(gate_up: CubeTensor) -> [CubeTensor; 1] {
    let gate_up = into_contiguous(gate_up);
    let mut shape = gate_up.shape();
    let last = shape.num_dims() - 1;
    let d = shape[last] / 2;
    shape[last] = d;
    [launch_forward(gate_up.clone(), gate_up, shape, halves(d, 2 * d, 0, d))]
}

/// The gradient of [`packed_forward`]'s `gate_up`, `[..., 2d]`, from `grad: [..., d]`.
pub(super) fn packed_backward(gate_up: CubeTensor, grad: CubeTensor) -> [CubeTensor; 1] {
    let (gate_up, grad) = (into_contiguous(gate_up), into_contiguous(grad));
    let shape = gate_up.shape();
    let d = shape[shape.num_dims() - 1] / 2;
    let grad_gate_up = empty_device_dtype(gate_up.client.clone(), gate_up.device.clone(), shape, gate_up.dtype);
    let layout = || halves(d, 2 * d, 0, d);
    launch_backward(gate_up.clone(), gate_up, grad, &grad_gate_up, layout(), layout());
    [grad_gate_up]
}
