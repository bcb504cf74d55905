//! CubeCL kernels for the fused ops on GPUs: one source for wgpu (WGSL), Vulkan (SPIR-V) and
//! CUDA. Each kernel runs as one op on Burn's fusion stream ([`fusion`]). Ops without a kernel
//! here, and dtypes the kernels do not take (f64), run the portable bodies.

mod attention;
mod attention_backward;
mod columns;
mod cross_entropy;
mod elementwise;
mod fusion;
mod kernel_choice;
mod layer_norm;
pub(super) mod multi_tensor;
pub(super) mod multi_tensor_adam;
mod norm_weight_sums;
mod reduce;
mod rms_norm;
mod rope;
mod rows;
mod swiglu;

use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Cube, DType, Shape};
use burn_cubecl::tensor::CubeTensor;

use super::kernels::{self, attention_ops, FusedKernels};
use super::row_stats_shape;
use super::{packed, portable};
use kernel_choice::{
    attention_kernels_take, column_kernels_take, cross_entropy_kernel_takes, kernel_dtype,
    packed_attention_kernels_take, rope_kernel_takes, swiglu_kernels_take, swiglu_packed_kernels_take,
};

/// The cross-entropy kernel on the fusion stream: `(value, gradient)`, the gradient the mean's
/// (`per_token`) or `softmax - onehot`, in the logits' type.
fn cross_entropy_op(
    logits: FloatTensor<Cube>,
    targets: IntTensor<Cube>,
    per_token: bool,
) -> (FloatTensor<Cube>, FloatTensor<Cube>) {
    let outputs = [TensorSpec::new(Shape::from([1]), DType::F32), TensorSpec::new(logits.shape.clone(), logits.dtype)];
    let name = if per_token { "cross_entropy" } else { "unit_cross_entropy" };
    let [value, grad] = fusion::custom_op(name, [logits, targets], outputs, &[], move |[logits, targets]| {
        cross_entropy::cross_entropy(logits, targets, per_token)
    });
    (value, grad)
}

impl FusedKernels for Cube {
    /// 128 MiB of f32 logits (64 MiB of a half type): a thousand rows at a LLaMA vocabulary,
    /// whose products fill a GPU (the CPU's 32 MiB is 260), and no larger than WebGPU's default
    /// limit on one buffer binding. (Twice the rows in a half type would double what each
    /// element of a block's f16 weight gradient sums, nearer f16's 65504.)
    const LM_HEAD_BLOCK_VALUES: usize = 1 << 25;

    fn rms_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !(kernel_dtype(x.dtype) && kernel_dtype(gamma.dtype)) {
            return portable::rms_norm_forward::<Self>(x, gamma, epsilon, scale);
        }
        let outputs =
            [TensorSpec::new(x.shape.clone(), x.dtype), TensorSpec::new(row_stats_shape(&x.shape), DType::F32)];
        let [y, inv_rms] =
            fusion::custom_op("rms_norm_forward", [x, gamma], outputs, &[epsilon, scale], move |[x, gamma]| {
                rms_norm::forward(x, gamma, epsilon, scale)
            });
        (y, inv_rms)
    }

    fn rms_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        inv_rms: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !(kernel_dtype(x.dtype)
            && kernel_dtype(gamma.dtype)
            && kernel_dtype(grad.dtype)
            && inv_rms.dtype == DType::F32)
        {
            return portable::rms_norm_backward::<Self>(x, gamma, inv_rms, grad, scale);
        }
        let outputs = [TensorSpec::new(x.shape.clone(), x.dtype), TensorSpec::new(gamma.shape.clone(), gamma.dtype)];
        let [grad_x, grad_gamma] = fusion::custom_op(
            "rms_norm_backward",
            [x, gamma, inv_rms, grad],
            outputs,
            &[scale],
            move |[x, gamma, inv_rms, grad]| rms_norm::backward(x, gamma, inv_rms, grad, None, scale),
        );
        (grad_x, grad_gamma)
    }

    fn residual_rms_norm_forward(
        base: FloatTensor<Self>,
        branch: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
        out_dtype: DType,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        if ![base.dtype, branch.dtype, gamma.dtype, out_dtype].into_iter().all(kernel_dtype) {
            return kernels::add_then_rms_norm::<Self>(base, branch, gamma, epsilon, scale, out_dtype);
        }
        let outputs = [
            TensorSpec::new(base.shape.clone(), base.dtype),
            TensorSpec::new(base.shape.clone(), out_dtype),
            TensorSpec::new(row_stats_shape(&base.shape), DType::F32),
        ];
        let [x, y, inv_rms] = fusion::custom_op(
            "residual_rms_norm_forward",
            [base, branch, gamma],
            outputs,
            &[epsilon, scale],
            move |[base, branch, gamma]| rms_norm::residual_forward(base, branch, gamma, epsilon, scale, out_dtype),
        );
        (x, y, inv_rms)
    }

    fn rms_norm_backward_adding(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        inv_rms: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        grad_residual: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !(kernel_dtype(x.dtype)
            && kernel_dtype(gamma.dtype)
            && kernel_dtype(grad.dtype)
            && grad_residual.dtype == x.dtype
            && inv_rms.dtype == DType::F32)
        {
            return kernels::rms_norm_backward_then_add::<Self>(x, gamma, inv_rms, grad, grad_residual, scale);
        }
        let outputs = [TensorSpec::new(x.shape.clone(), x.dtype), TensorSpec::new(gamma.shape.clone(), gamma.dtype)];
        let [grad_x, grad_gamma] = fusion::custom_op(
            "rms_norm_backward_adding",
            [x, gamma, inv_rms, grad, grad_residual],
            outputs,
            &[scale],
            move |[x, gamma, inv_rms, grad, grad_residual]| {
                rms_norm::backward(x, gamma, inv_rms, grad, Some(grad_residual), scale)
            },
        );
        (grad_x, grad_gamma)
    }

    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        if !(kernel_dtype(x.dtype) && kernel_dtype(gamma.dtype) && beta.dtype == gamma.dtype) {
            return portable::layer_norm_forward::<Self>(x, gamma, beta, epsilon);
        }
        let stats = TensorSpec::new(row_stats_shape(&x.shape), DType::F32);
        let outputs = [TensorSpec::new(x.shape.clone(), x.dtype), stats.clone(), stats];
        let [y, mean, inv_std] =
            fusion::custom_op("layer_norm_forward", [x, gamma, beta], outputs, &[epsilon], move |[x, gamma, beta]| {
                layer_norm::forward(x, gamma, beta, epsilon)
            });
        (y, mean, inv_std)
    }

    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let stats_f32 = mean.dtype == DType::F32 && inv_std.dtype == DType::F32;
        if !(kernel_dtype(x.dtype) && kernel_dtype(gamma.dtype) && grad.dtype == x.dtype && stats_f32) {
            return portable::layer_norm_backward::<Self>(x, gamma, mean, inv_std, grad);
        }
        let weights = TensorSpec::new(gamma.shape.clone(), gamma.dtype);
        let outputs = [TensorSpec::new(x.shape.clone(), x.dtype), weights.clone(), weights];
        let [grad_x, grad_gamma, grad_beta] = fusion::custom_op(
            "layer_norm_backward",
            [x, gamma, mean, inv_std, grad],
            outputs,
            &[],
            |[x, gamma, mean, inv_std, grad]| layer_norm::backward(x, gamma, mean, inv_std, grad),
        );
        (grad_x, grad_gamma, grad_beta)
    }

    fn swiglu_forward(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self> {
        if !swiglu_kernels_take(&gate, &[&up]) {
            return portable::swiglu_forward::<Self>(gate, up);
        }
        let output = [TensorSpec::new(gate.shape.clone(), gate.dtype)];
        let [y] = fusion::custom_op("swiglu_forward", [gate, up], output, &[], |[gate, up]| swiglu::forward(gate, up));
        y
    }

    fn swiglu_backward(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !swiglu_kernels_take(&gate, &[&up, &grad]) {
            return portable::swiglu_backward::<Self>(gate, up, grad);
        }
        let outputs = [&gate, &up].map(|t| TensorSpec::new(t.shape.clone(), t.dtype));
        let [grad_gate, grad_up] =
            fusion::custom_op("swiglu_backward", [gate, up, grad], outputs, &[], |[gate, up, grad]| {
                swiglu::backward(gate, up, grad)
            });
        (grad_gate, grad_up)
    }

    fn swiglu_packed_forward(gate_up: FloatTensor<Self>) -> FloatTensor<Self> {
        if !swiglu_packed_kernels_take(&gate_up, None) {
            return packed::swiglu_forward::<Self>(gate_up, Self::swiglu_forward);
        }
        let mut shape = gate_up.shape.clone();
        let last = shape.num_dims() - 1;
        shape[last] /= 2;
        let output = [TensorSpec::new(shape, gate_up.dtype)];
        let [y] = fusion::custom_op("swiglu_packed_forward", [gate_up], output, &[], |[gate_up]| {
            swiglu::packed_forward(gate_up)
        });
        y
    }

    fn swiglu_packed_backward(gate_up: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        if !swiglu_packed_kernels_take(&gate_up, Some(&grad)) {
            return packed::swiglu_backward::<Self>(gate_up, grad, Self::swiglu_backward);
        }
        let output = [TensorSpec::new(gate_up.shape.clone(), gate_up.dtype)];
        let [grad_gate_up] =
            fusion::custom_op("swiglu_packed_backward", [gate_up, grad], output, &[], |[gate_up, grad]| {
                swiglu::packed_backward(gate_up, grad)
            });
        grad_gate_up
    }

    fn rope_forward(x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>) -> FloatTensor<Self> {
        if !rope_kernel_takes(&x, &cos, &sin) {
            return portable::rope_forward::<Self>(x, cos, sin);
        }
        let output = [TensorSpec::new(x.shape.clone(), x.dtype)];
        let [y] = fusion::custom_op("rope", [x, cos, sin], output, &[], |[x, cos, sin]| rope::forward(x, cos, sin));
        y
    }

    fn cross_entropy(logits: FloatTensor<Self>, targets: IntTensor<Self>) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !cross_entropy_kernel_takes(&logits, &targets) {
            return portable::cross_entropy::<Self>(logits, targets);
        }
        cross_entropy_op(logits, targets, true)
    }

    fn unit_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !cross_entropy_kernel_takes(&logits, &targets) {
            return portable::unit_cross_entropy::<Self>(logits, targets, Self::cross_entropy);
        }
        cross_entropy_op(logits, targets, false)
    }

    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !attention_kernels_take(&q, &k, &v) {
            return portable::attention_forward::<Self>(q, k, v, scale);
        }
        let [batch, seq, heads, _] = q.shape.dims::<4>();
        let outputs = [
            TensorSpec::new(q.shape.clone(), q.dtype),
            TensorSpec::new(Shape::from([batch, heads, seq, 1]), DType::F32),
        ];
        let [output, lse] = fusion::custom_op("attention_forward", [q, k, v], outputs, &[scale], move |[q, k, v]| {
            attention::forward(q, k, v, scale)
        });
        (output, lse)
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        // The forward took the same path: the log-sum-exp is the kernels', or the portable body's.
        let same = [&output, &grad].iter().all(|t| t.dtype == q.dtype);
        if !(attention_kernels_take(&q, &k, &v) && same && lse.dtype == DType::F32) {
            return portable::attention_backward::<Self>(q, k, v, output, lse, grad, scale);
        }
        let outputs = [&q, &k, &v].map(|t| TensorSpec::new(t.shape.clone(), t.dtype));
        let [grad_q, grad_k, grad_v] = fusion::custom_op(
            "attention_backward",
            [q, k, v, output, lse, grad],
            outputs,
            &[scale],
            move |[q, k, v, output, lse, grad]| attention_backward::backward(q, k, v, output, lse, grad, scale),
        );
        (grad_q, grad_k, grad_v)
    }

    fn packed_attention_forward(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !packed_attention_kernels_take(&qkv, &cos, &sin, heads, kv_heads) {
            return packed::attention_forward::<Self>(qkv, cos, sin, heads, kv_heads, scale, &attention_ops::<Self>());
        }
        let [batch, seq, width] = qkv.shape.dims::<3>();
        let hd = width / (heads + 2 * kv_heads);
        let outputs = [
            TensorSpec::new(Shape::from([batch, seq, heads, hd]), qkv.dtype),
            TensorSpec::new(Shape::from([batch, heads, seq, 1]), DType::F32),
        ];
        let settings = [heads as f64, kv_heads as f64, scale];
        let [output, lse] = fusion::custom_op(
            "packed_attention_forward",
            [qkv, cos, sin],
            outputs,
            &settings,
            move |[qkv, cos, sin]| attention::packed_forward(qkv, cos, sin, heads, kv_heads, scale),
        );
        (output, lse)
    }

    fn packed_attention_backward(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        scale: f64,
    ) -> FloatTensor<Self> {
        // The forward took the same path: the log-sum-exp is the kernels', or the portable body's.
        let same = [&output, &grad].iter().all(|t| t.dtype == qkv.dtype);
        if !(packed_attention_kernels_take(&qkv, &cos, &sin, heads, kv_heads) && same && lse.dtype == DType::F32) {
            let ops = attention_ops::<Self>();
            return packed::attention_backward::<Self>(qkv, cos, sin, output, lse, grad, heads, kv_heads, scale, &ops);
        }
        let outputs = [TensorSpec::new(qkv.shape.clone(), qkv.dtype)];
        let settings = [heads as f64, kv_heads as f64, scale];
        let [grad_qkv] = fusion::custom_op(
            "packed_attention_backward",
            [qkv, cos, sin, output, lse, grad],
            outputs,
            &settings,
            move |[qkv, cos, sin, output, lse, grad]| {
                [attention_backward::packed_backward(qkv, cos, sin, output, lse, grad, heads, kv_heads, scale)]
            },
        );
        grad_qkv
    }

    fn pack_columns(parts: Vec<FloatTensor<Self>>, dtype: DType) -> FloatTensor<Self> {
        if !column_kernels_take(&parts.iter().collect::<Vec<_>>(), dtype) {
            return packed::pack_columns::<Self>(parts, dtype);
        }
        let rows = parts[0].shape[0];
        let width = parts.iter().map(|part| part.shape[1]).sum::<usize>();
        let output = vec![TensorSpec::new(Shape::from([rows, width]), dtype)];
        let mut packed = fusion::custom_op_of_many("pack_columns", parts, output, &[], move |parts| {
            columns::pack(parts, dtype).into()
        });
        packed.remove(0)
    }

    fn unpack_columns(packed: FloatTensor<Self>, widths: Vec<usize>, dtypes: Vec<DType>) -> Vec<FloatTensor<Self>> {
        let dtype = dtypes[0];
        let takes = (2..=3).contains(&widths.len())
            && dtypes.iter().all(|&d| d == dtype)
            && kernel_dtype(dtype)
            && kernel_dtype(packed.dtype)
            && packed.shape.num_dims() == 2
            && widths.iter().sum::<usize>() == packed.shape[1]
            && elementwise::countable(packed.shape.num_elements());
        if !takes {
            return packed::unpack_columns::<Self>(packed, widths, dtypes);
        }
        let rows = packed.shape[0];
        let outputs = widths.iter().map(|&width| TensorSpec::new(Shape::from([rows, width]), dtype)).collect();
        fusion::custom_op_of_many("unpack_columns", vec![packed], outputs, &[], move |inputs| {
            let [packed] = <[CubeTensor; 1]>::try_from(inputs).unwrap_or_else(|_| unreachable!("unpack: one input"));
            columns::unpack(packed, widths.clone(), dtype)
        })
    }
}
