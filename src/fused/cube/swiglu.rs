//! SwiGLU as CubeCL kernels, forward and backward, one unit per vector of the output `[..., d]`
//! (up to 16 bytes of consecutive values, as many as the runtime vectorises: 4 on wgpu, up to 8
//! half values on CUDA; loaded and stored as one: [`vector_size`]), computed in
//! f32 whatever the inputs' precision. With `s = sigmoid(gate)` and `silu = gate s`:
//!   forward: `y = silu up`;
//!   backward: `d up = dy silu`, `d gate = dy up (s + silu - silu s)` (`s (1 + gate (1 - s))`),
//!   both written by one pass that reads `gate`, `up` and `dy` once.
//!
//! `gate` and `up` are either tensors of their own (contiguous, one dtype) or the two halves of
//! one packed projection `[..., 2d]` (what one matrix product of the gate and up projections
//! makes), read in place: element `i` of a half is at `(i / d) stride + offset + i % d` ([`Halves`],
//! counted in vectors).
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

/// Where the gate's and up's rows of `d` vectors lie: `stride` vectors apart, from `gate_offset`
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
fn sigmoid_and_silu<N: Size>(g: Vector<f32, N>) -> (Vector<f32, N>, Vector<f32, N>) {
    let one = Vector::<f32, N>::new(1.0);
    let s = one / (one + (-g).exp());
    (s, g * s)
}

/// Vector `at` of `x` in f32.
#[cube]
fn load<F: Float, N: Size>(x: &Tensor<Vector<F, N>>, at: usize) -> Vector<f32, N> {
    Vector::<f32, N>::cast_from(x[at])
}

#[cube(launch)]
fn swiglu_forward_kernel<F: Float, N: Size>(
    gate: &Tensor<Vector<F, N>>,
    up: &Tensor<Vector<F, N>>,
    y: &mut Tensor<Vector<F, N>>,
    vectors: u32,
    halves: &Halves,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= vectors as usize {
        terminate!();
    }
    let (at_gate, at_up) = places(i, halves);
    let (_, silu) = sigmoid_and_silu::<N>(load::<F, N>(gate, at_gate));
    y[i] = Vector::<F, N>::cast_from(silu * load::<F, N>(up, at_up));
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn swiglu_backward_kernel<F: Float, N: Size>(
    gate: &Tensor<Vector<F, N>>,
    up: &Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    grad_gate_up: &mut Tensor<Vector<F, N>>,
    vectors: u32,
    halves: &Halves,
    grad_halves: &Halves,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= vectors as usize {
        terminate!();
    }
    let (at_gate, at_up) = places(i, halves);
    let (s, silu) = sigmoid_and_silu::<N>(load::<F, N>(gate, at_gate));
    let dy = load::<F, N>(grad, i);
    let (grad_gate, grad_up) = places(i, grad_halves);
    grad_gate_up[grad_up] = Vector::<F, N>::cast_from(dy * silu);
    grad_gate_up[grad_gate] = Vector::<F, N>::cast_from(dy * load::<F, N>(up, at_up) * (s + silu - silu * s));
}

/// The layout of halves of rows of `d` values, `stride` apart from `gate_offset` and `up_offset`
/// (all counted in values), in vectors of `vector` values.
fn halves(vector: usize, d: usize, stride: usize, gate_offset: usize, up_offset: usize) -> HalvesLaunch {
    let v = |n: usize| {
        debug_assert!(n.is_multiple_of(vector), "SwiGLU's layout: {n} values are not whole vectors of {vector}");
        (n / vector) as u32
    };
    HalvesLaunch::new(v(d), v(stride), v(gate_offset), v(up_offset))
}

/// The values a unit loads at once for `gate`'s dtype: the widest vector the device favours (at
/// most 16 bytes) that divides each of `sizes`, or 1. The callers pass the row's width `d`, of
/// which every stride and offset of their layouts is a multiple.
fn vector_size(gate: &CubeTensor, sizes: &[usize]) -> usize {
    gate.client
        .io_optimized_vector_sizes(gate.dtype.size())
        .filter(|&v| sizes.iter().all(|n| n.is_multiple_of(v)))
        .max()
        .unwrap_or(1)
}

/// `y: [..., d]` of `gate`, `up` laid out as `layout` says (in vectors of `vector` values);
/// `shape` is `y`'s.
fn launch_forward(gate: CubeTensor, up: CubeTensor, shape: Shape, vector: usize, layout: HalvesLaunch) -> CubeTensor {
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, shape.num_elements() / vector);
    let y = empty_device_dtype(client.clone(), gate.device.clone(), shape, dtype);
    if n > 0 {
        swiglu_forward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            vector,
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
/// `grad_layout`) from `grad: [..., d]`, in vectors of `vector` values.
fn launch_backward(
    gate: CubeTensor,
    up: CubeTensor,
    grad: CubeTensor,
    grad_gate_up: &CubeTensor,
    vector: usize,
    [layout, grad_layout]: [HalvesLaunch; 2],
) {
    let (client, dtype, n) = (gate.client.clone(), gate.dtype, grad.shape().num_elements() / vector);
    if n > 0 {
        swiglu_backward_kernel::launch(
            &client,
            element_cubes(&gate, n),
            CubeDim::new_1d(UNITS as u32),
            vector,
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
    let vector = vector_size(&gate, &[d]);
    [launch_forward(gate, up, shape, vector, halves(vector, d, d, 0, 0))]
}

/// `(grad gate, grad up)`: `gate`'s shape and dtype, written one after the other into one buffer.
pub(super) fn backward(gate: CubeTensor, up: CubeTensor, grad: CubeTensor) -> [CubeTensor; 2] {
    let (gate, up, grad) = (into_contiguous(gate), into_contiguous(up), into_contiguous(grad));
    let shape = gate.shape();
    let (d, n) = (shape[shape.num_dims() - 1], shape.num_elements());
    let both = empty_device_dtype(gate.client.clone(), gate.device.clone(), Shape::from([2 * n]), gate.dtype);
    let vector = vector_size(&gate, &[d]);
    let layouts = [halves(vector, d, d, 0, 0), halves(vector, d, d, 0, n)];
    launch_backward(gate, up, grad, &both, vector, layouts);
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
    let vector = vector_size(&gate_up, &[d]);
    [launch_forward(gate_up.clone(), gate_up, shape, vector, halves(vector, d, 2 * d, 0, d))]
}

/// The gradient of [`packed_forward`]'s `gate_up`, `[..., 2d]`, from `grad: [..., d]`.
pub(super) fn packed_backward(gate_up: CubeTensor, grad: CubeTensor) -> [CubeTensor; 1] {
    let (gate_up, grad) = (into_contiguous(gate_up), into_contiguous(grad));
    let shape = gate_up.shape();
    let d = shape[shape.num_dims() - 1] / 2;
    let grad_gate_up = empty_device_dtype(gate_up.client.clone(), gate_up.device.clone(), shape, gate_up.dtype);
    let vector = vector_size(&gate_up, &[d]);
    let layout = || halves(vector, d, 2 * d, 0, d);
    launch_backward(gate_up.clone(), gate_up, grad, &grad_gate_up, vector, [layout(), layout()]);
    [grad_gate_up]
}
