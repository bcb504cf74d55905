//! The two traits behind the fused ops.
//!
//! - [`FusedOps`] is the Burn backend extension the tensor-level functions call through
//!   `Dispatch`: the forward of each op, one method each.
//! - [`FusedKernels`] holds, per backend, each op's forward with what its backward needs and the
//!   backward itself. Its default bodies are portable (Burn's backend ops); flex overrides them
//!   with its own kernels. The autodiff backend's [`FusedOps`] uses these to record one node per op.
// Burn deprecates ndarray for flex; the crate keeps it as a second CPU backend for the tests.
#![allow(deprecated)]

use burn::backend::backend_extension;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, DType, TensorMetadata};

use super::mixed::{self, CastOf};
use super::{packed, portable};

/// The fused ops as a Burn backend extension: what `Dispatch` routes to each backend.
/// Shapes as the tensor-level functions of [`fused`](super).
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(any(feature = "wgpu", feature = "cuda")),
    LibTorch: cfg(feature = "tch"),
    Autodiff: cfg(feature = "autodiff")
)]
pub trait FusedOps: Backend {
    /// `x / sqrt(mean(x^2) + epsilon) * gamma * scale` over the last dimension.
    fn fused_rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, epsilon: f64, scale: f64) -> FloatTensor<Self>;
    /// `(base + branch, rms_norm(base + branch))`: a residual add and the next RMSNorm, one pass;
    /// the branch is cast to the base's type, the norm's output made in `out_dtype`.
    fn fused_residual_rms_norm(
        base: FloatTensor<Self>,
        branch: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
        out_dtype: DType,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// `(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last dimension.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
    /// `silu(gate) * up`.
    fn fused_swiglu(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `silu(gate) * up` of the halves of `gate_up: [..., 2 d]` -> `[..., d]`.
    fn fused_swiglu_packed(gate_up: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `x * cos + rotate_half(x) * sin`, `x: [b, s, h, hd]`, tables `[s, hd]`.
    fn fused_rope(x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `x @ weight`, `x: [rows, d_in]`, `weight: [d_in, d_out]` -> `[rows, d_out]`: a linear
    /// layer without bias, its product one matrix product however many batch dimensions it had.
    fn fused_linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self>;
    /// The mean cross-entropy of `logits: [tokens, vocab]` against `targets: [tokens]` and its
    /// gradient, both constants: `(loss: [1], (softmax(logits) - onehot(targets)) / tokens)`.
    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// The LM head and the loss: the mean cross-entropy of `hidden @ weight` (`hidden: [tokens,
    /// d_model]`, `weight: [d_model, vocab]`) against `targets: [tokens]` and its gradients, all
    /// constants: `(loss: [1], grad_hidden: [tokens, d_model], grad_weight: [d_model, vocab])`.
    /// The logits are made a block of rows at a time.
    fn fused_lm_head_cross_entropy(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
    /// Causal attention, `q: [b, s, h, hd]`, `k, v: [b, s, kv, hd]` -> `[b, s, h, hd]`.
    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self>;
    /// Causal attention of a packed projection `qkv: [b, s, (h + 2 kv) hd]` (queries, keys,
    /// values side by side), queries and keys rotated by `cos, sin: [s, hd]` -> `[b, s, h, hd]`.
    fn fused_packed_attention(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        scale: f64,
    ) -> FloatTensor<Self>;
    /// `[first | second | third]` in `dtype`: the columns of three `[d_in, d_i]` matrices side by
    /// side (`third` may have no columns), as one weight for their common input.
    fn fused_pack_columns(
        first: FloatTensor<Self>,
        second: FloatTensor<Self>,
        third: FloatTensor<Self>,
        dtype: DType,
    ) -> FloatTensor<Self>;
}

/// Forward (with what the backward needs) and backward of each fused op on one backend.
/// Shapes: `rows` is the product of all dimensions but the last.
pub trait FusedKernels: Backend {
    /// Logits the LM head makes at once, a block of rows at a time: 32 MiB of f32 by default,
    /// what a CPU's caches favour.
    const LM_HEAD_BLOCK_VALUES: usize = 1 << 23;

    /// RMSNorm forward -> `(y: x's shape, inverse RMS: [..., 1] in f32)`.
    fn rms_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::rms_norm_forward::<Self>(x, gamma, epsilon, scale)
    }

    /// RMSNorm backward -> `(grad x, grad gamma: [d])`.
    fn rms_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        inv_rms: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::rms_norm_backward::<Self>(x, gamma, inv_rms, grad, scale)
    }

    /// RMSNorm of the residual sum `x = base + branch` (one shape; the branch cast to the base's
    /// type) -> `(x, y in out_dtype, inverse RMS)`, as [`rms_norm_forward`](Self::rms_norm_forward)
    /// of the sum.
    fn residual_rms_norm_forward(
        base: FloatTensor<Self>,
        branch: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
        out_dtype: DType,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        add_then_rms_norm::<Self>(base, branch, gamma, epsilon, scale, out_dtype)
    }

    /// [`rms_norm_backward`](Self::rms_norm_backward) with `grad_residual` (x's shape and type:
    /// the gradient of the residual sum from its other uses) added to grad x.
    fn rms_norm_backward_adding(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        inv_rms: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        grad_residual: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        rms_norm_backward_then_add::<Self>(x, gamma, inv_rms, grad, grad_residual, scale)
    }

    /// LayerNorm forward -> `(y: x's shape, mean, inverse standard deviation: [..., 1] in f32)`.
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        portable::layer_norm_forward::<Self>(x, gamma, beta, epsilon)
    }

    /// LayerNorm backward -> `(grad x, grad gamma: [d], grad beta: [d])`.
    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        portable::layer_norm_backward::<Self>(x, gamma, mean, inv_std, grad)
    }

    /// `silu(gate) * up`.
    fn swiglu_forward(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self> {
        portable::swiglu_forward::<Self>(gate, up)
    }

    /// SwiGLU backward -> `(grad gate, grad up)`.
    fn swiglu_backward(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::swiglu_backward::<Self>(gate, up, grad)
    }

    /// `silu(gate) * up` of the halves of `gate_up: [..., 2 d]` -> `[..., d]`.
    fn swiglu_packed_forward(gate_up: FloatTensor<Self>) -> FloatTensor<Self> {
        packed::swiglu_forward::<Self>(gate_up, Self::swiglu_forward)
    }

    /// The gradient of [`swiglu_packed_forward`](Self::swiglu_packed_forward)'s `gate_up`.
    fn swiglu_packed_backward(gate_up: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        packed::swiglu_backward::<Self>(gate_up, grad, Self::swiglu_backward)
    }

    /// RoPE on `x: [b, s, h, hd]`; its backward is `rope_forward(grad, cos, -sin)`.
    fn rope_forward(x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>) -> FloatTensor<Self> {
        portable::rope_forward::<Self>(x, cos, sin)
    }

    /// See [`FusedOps::fused_linear`].
    fn linear_forward(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(x, weight)
    }

    /// `(grad @ weight^T, x^T @ grad)`: the gradients of [`linear_forward`](Self::linear_forward)'s
    /// `x` and `weight`.
    fn linear_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let grad_x = Self::float_matmul(grad.clone(), Self::float_transpose(weight));
        (grad_x, Self::float_matmul(Self::float_transpose(x), grad))
    }

    /// See [`FusedOps::fused_cross_entropy`].
    fn cross_entropy(logits: FloatTensor<Self>, targets: IntTensor<Self>) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::cross_entropy::<Self>(logits, targets)
    }

    /// The cross-entropy of a block of the LM head's `logits: [rows, vocab]` (in the inputs'
    /// type) against `targets: [rows]`: `(mean loss: [1] in f32, softmax(logits) -
    /// onehot(targets))`, that gradient in the logits' type and not divided by the rows (within
    /// [-1, 1]: in f16 only probabilities below its least value, 6e-8, flush to 0).
    fn unit_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::unit_cross_entropy::<Self>(logits, targets, Self::cross_entropy)
    }

    /// See [`FusedOps::fused_lm_head_cross_entropy`].
    fn lm_head_cross_entropy(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        portable::lm_head_cross_entropy::<Self>(
            hidden,
            weight,
            targets,
            Self::LM_HEAD_BLOCK_VALUES,
            Self::unit_cross_entropy,
        )
    }

    /// Causal attention forward -> `(output: [b, s, h, hd], log-sum-exp of each row: [b, h, s, 1] in f32)`.
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        portable::attention_forward::<Self>(q, k, v, scale)
    }

    /// Causal attention backward -> `(grad q, grad k, grad v)`, the probabilities recomputed from
    /// the log-sum-exp.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        portable::attention_backward::<Self>(q, k, v, output, lse, grad, scale)
    }

    /// Packed causal attention forward ([`FusedOps::fused_packed_attention`]) -> `(output: [b, s,
    /// h, hd], log-sum-exp: [b, h, s, 1] in f32)`.
    fn packed_attention_forward(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        packed::attention_forward::<Self>(qkv, cos, sin, heads, kv_heads, scale, &attention_ops::<Self>())
    }

    /// Packed causal attention backward -> the gradient of `qkv`.
    #[allow(clippy::too_many_arguments)]
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
        packed::attention_backward::<Self>(
            qkv,
            cos,
            sin,
            output,
            lse,
            grad,
            heads,
            kv_heads,
            scale,
            &attention_ops::<Self>(),
        )
    }

    /// The columns of `parts` (`[d_in, d_i]` each, at least one column each) side by side, in `dtype`.
    fn pack_columns(parts: Vec<FloatTensor<Self>>, dtype: DType) -> FloatTensor<Self> {
        packed::pack_columns::<Self>(parts, dtype)
    }

    /// `packed: [d_in, sum widths]` cut back into `[d_in, widths[i]]` parts, each in `dtypes[i]`:
    /// the gradients of [`pack_columns`](Self::pack_columns)'s parts.
    fn unpack_columns(packed: FloatTensor<Self>, widths: Vec<usize>, dtypes: Vec<DType>) -> Vec<FloatTensor<Self>> {
        packed::unpack_columns::<Self>(packed, widths, dtypes)
    }
}

/// [`FusedKernels::residual_rms_norm_forward`] as a separate add and `B`'s RMSNorm, with casts
/// (counted as activations' in [`mixed::cast_bytes`]) where the types differ.
pub(super) fn add_then_rms_norm<B: FusedKernels>(
    base: FloatTensor<B>,
    branch: FloatTensor<B>,
    gamma: FloatTensor<B>,
    epsilon: f64,
    scale: f64,
    out_dtype: DType,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let cast = |tensor: FloatTensor<B>, dtype: DType| {
        if tensor.dtype() != dtype {
            mixed::count_cast(tensor.shape().num_elements() * dtype.size(), CastOf::Activation);
        }
        portable::cast::<B>(tensor, dtype)
    };
    let dtype = base.dtype();
    let x = B::float_add(base, cast(branch, dtype));
    let (y, inv_rms) = B::rms_norm_forward(x.clone(), gamma, epsilon, scale);
    (x, cast(y, out_dtype), inv_rms)
}

/// [`FusedKernels::rms_norm_backward_adding`] as `B`'s RMSNorm backward and a separate add.
pub(super) fn rms_norm_backward_then_add<B: FusedKernels>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    inv_rms: FloatTensor<B>,
    grad: FloatTensor<B>,
    grad_residual: FloatTensor<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (grad_x, grad_gamma) = B::rms_norm_backward(x, gamma, inv_rms, grad, scale);
    (B::float_add(grad_x, grad_residual), grad_gamma)
}

/// `B`'s RoPE and attention, for the packed attention's portable body.
pub(super) fn attention_ops<B: FusedKernels>() -> packed::AttentionOps<B> {
    packed::AttentionOps { rope: B::rope_forward, forward: B::attention_forward, backward: B::attention_backward }
}

/// [`FusedOps`] of a backend without autodiff: each kernel's forward, its saved values dropped.
macro_rules! fused_ops_from_kernels {
    ($backend:ty) => {
        impl FusedOps for $backend {
            fn fused_rms_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                epsilon: f64,
                scale: f64,
            ) -> FloatTensor<Self> {
                Self::rms_norm_forward(x, gamma, epsilon, scale).0
            }
            fn fused_residual_rms_norm(
                base: FloatTensor<Self>,
                branch: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                epsilon: f64,
                scale: f64,
                out_dtype: DType,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                let (x, y, _) = Self::residual_rms_norm_forward(base, branch, gamma, epsilon, scale, out_dtype);
                (x, y)
            }
            fn fused_layer_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                beta: FloatTensor<Self>,
                epsilon: f64,
            ) -> FloatTensor<Self> {
                Self::layer_norm_forward(x, gamma, beta, epsilon).0
            }
            fn fused_swiglu(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self> {
                Self::swiglu_forward(gate, up)
            }
            fn fused_swiglu_packed(gate_up: FloatTensor<Self>) -> FloatTensor<Self> {
                Self::swiglu_packed_forward(gate_up)
            }
            fn fused_rope(x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>) -> FloatTensor<Self> {
                Self::rope_forward(x, cos, sin)
            }
            fn fused_linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
                Self::linear_forward(x, weight)
            }
            fn fused_cross_entropy(
                logits: FloatTensor<Self>,
                targets: IntTensor<Self>,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                Self::cross_entropy(logits, targets)
            }
            fn fused_lm_head_cross_entropy(
                hidden: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                targets: IntTensor<Self>,
            ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
                Self::lm_head_cross_entropy(hidden, weight, targets)
            }
            fn fused_causal_attention(
                q: FloatTensor<Self>,
                k: FloatTensor<Self>,
                v: FloatTensor<Self>,
                scale: f64,
            ) -> FloatTensor<Self> {
                Self::attention_forward(q, k, v, scale).0
            }
            fn fused_packed_attention(
                qkv: FloatTensor<Self>,
                cos: FloatTensor<Self>,
                sin: FloatTensor<Self>,
                heads: usize,
                kv_heads: usize,
                scale: f64,
            ) -> FloatTensor<Self> {
                Self::packed_attention_forward(qkv, cos, sin, heads, kv_heads, scale).0
            }
            fn fused_pack_columns(
                first: FloatTensor<Self>,
                second: FloatTensor<Self>,
                third: FloatTensor<Self>,
                dtype: burn::backend::DType,
            ) -> FloatTensor<Self> {
                Self::pack_columns(super::packed::nonempty_columns::<Self>([first, second, third]), dtype)
            }
        }
    };
}

#[cfg(feature = "flex")]
fused_ops_from_kernels!(burn::backend::Flex);

#[cfg(feature = "ndarray")]
impl FusedKernels for burn::backend::NdArray {}
#[cfg(feature = "ndarray")]
fused_ops_from_kernels!(burn::backend::NdArray);

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fused_ops_from_kernels!(burn::backend::Cube);

#[cfg(feature = "tch")]
fused_ops_from_kernels!(burn::backend::LibTorch);
