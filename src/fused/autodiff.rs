//! The fused ops under autodiff: each records one node whose backward is the backend's
//! [`FusedKernels`] backward, keeping only what that backward needs.
#![cfg(feature = "autodiff")]

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, DType, TensorMetadata};

use super::kernels::{FusedKernels, FusedOps};
use super::profile::{timed, OpKind};

/// Keeps x, gamma, the inverse RMS of each row and the scale.
#[derive(Debug)]
struct RmsNormBackward;

impl<B: FusedKernels> Backward<B, 2> for RmsNormBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_gamma] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, inv_rms, scale) = ops.state;
        let (grad_x, grad_gamma) = timed(OpKind::Norm, || B::rms_norm_backward(x, gamma, inv_rms, grad, scale));
        if let Some(node) = node_x {
            grads.register::<B>(node.id, grad_x);
        }
        if let Some(node) = node_gamma {
            grads.register::<B>(node.id, grad_gamma);
        }
    }
}

/// The residual sum `base + branch` of [`fused_residual_rms_norm`](FusedOps::fused_residual_rms_norm),
/// computed by its norm's kernel: the gradient passes to both terms as it is, cast to the
/// branch's type (kept) where that differs from the sum's.
#[derive(Debug)]
struct ResidualSumBackward;

impl<B: FusedKernels> Backward<B, 2> for ResidualSumBackward {
    type State = DType;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_base, node_branch] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node_branch {
            grads.register::<B>(node.id, super::portable::cast::<B>(grad.clone(), ops.state));
        }
        if let Some(node) = node_base {
            grads.register::<B>(node.id, grad);
        }
    }
}

/// The RMSNorm of a residual sum: keeps the sum, gamma, the inverse RMS of each row, the scale,
/// and inside [`with_backward_following`](super::with_backward_following) the sum's autodiff
/// tensor, to take the gradient its other uses gave it.
///
/// The sum's other uses (the next residual add) are deeper in the graph, so their backward has
/// run when this one does: their gradient is taken out and added in the norm's backward pass, in
/// place of a separate add when both are registered. Keeping the tensor keeps the sum's node
/// referenced until this step runs, so a graph dropped without a backward pass would not be freed:
/// hence only where a backward pass is promised.
#[derive(Debug)]
struct ResidualRmsNormBackward;

impl<B: FusedKernels> Backward<B, 2> for ResidualRmsNormBackward {
    type State = (Option<FloatTensor<Autodiff<B>>>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_gamma] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (sum, x, gamma, inv_rms, scale) = ops.state;
        let residual = node_x.as_ref().and(sum.as_ref()).and_then(|sum| sum.grad_remove(grads));
        let (grad_x, grad_gamma) = match residual {
            Some(grad_residual) => {
                timed(OpKind::Norm, || B::rms_norm_backward_adding(x, gamma, inv_rms, grad, grad_residual, scale))
            }
            None => timed(OpKind::Norm, || B::rms_norm_backward(x, gamma, inv_rms, grad, scale)),
        };
        if let Some(node) = node_x {
            grads.register::<B>(node.id, grad_x);
        }
        if let Some(node) = node_gamma {
            grads.register::<B>(node.id, grad_gamma);
        }
    }
}

/// Keeps x, gamma, and each row's mean and inverse standard deviation.
#[derive(Debug)]
struct LayerNormBackward;

impl<B: FusedKernels> Backward<B, 3> for LayerNormBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, mean, inv_std) = ops.state;
        let (grad_x, grad_gamma, grad_beta) =
            timed(OpKind::Norm, || B::layer_norm_backward(x, gamma, mean, inv_std, grad));
        for (node, grad) in [(node_x, grad_x), (node_gamma, grad_gamma), (node_beta, grad_beta)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// Keeps x and the weight.
#[derive(Debug)]
struct LinearBackward;

impl<B: FusedKernels> Backward<B, 2> for LinearBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_weight] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, weight) = ops.state;
        let (grad_x, grad_weight) = timed(OpKind::Linear, || B::linear_backward(x, weight, grad));
        if let Some(node) = node_x {
            grads.register::<B>(node.id, grad_x);
        }
        if let Some(node) = node_weight {
            grads.register::<B>(node.id, grad_weight);
        }
    }
}

/// Keeps gate and up.
#[derive(Debug)]
struct SwigluBackward;

impl<B: FusedKernels> Backward<B, 2> for SwigluBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_gate, node_up] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (gate, up) = ops.state;
        let (grad_gate, grad_up) = timed(OpKind::Swiglu, || B::swiglu_backward(gate, up, grad));
        if let Some(node) = node_gate {
            grads.register::<B>(node.id, grad_gate);
        }
        if let Some(node) = node_up {
            grads.register::<B>(node.id, grad_up);
        }
    }
}

/// Keeps the packed gate and up.
#[derive(Debug)]
struct SwigluPackedBackward;

impl<B: FusedKernels> Backward<B, 1> for SwigluPackedBackward {
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_gate_up] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node_gate_up {
            let grad_gate_up = timed(OpKind::Swiglu, || B::swiglu_packed_backward(ops.state, grad));
            grads.register::<B>(node.id, grad_gate_up);
        }
    }
}

/// Keeps the tables; the gradient is the rotation by minus the angle.
#[derive(Debug)]
struct RopeBackward;

impl<B: FusedKernels> Backward<B, 1> for RopeBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (cos, sin) = ops.state;
        if let Some(node) = node_x {
            grads.register::<B>(node.id, timed(OpKind::Attention, || B::rope_forward(grad, cos, B::float_neg(sin))));
        }
    }
}

/// Keeps q, k, v, the output and each row's log-sum-exp: never the `S x S` probabilities.
#[derive(Debug)]
struct AttentionBackward;

impl<B: FusedKernels> Backward<B, 3> for AttentionBackward {
    #[allow(clippy::type_complexity)]
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (q, k, v, output, lse, scale) = ops.state;
        let (grad_q, grad_k, grad_v) =
            timed(OpKind::Attention, || B::attention_backward(q, k, v, output, lse, grad, scale));
        for (node, grad) in [(node_q, grad_q), (node_k, grad_k), (node_v, grad_v)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// Keeps the packed `qkv`, the tables, the output and each row's log-sum-exp.
#[derive(Debug)]
struct PackedAttentionBackward;

/// What [`PackedAttentionBackward`] keeps: `qkv`, `cos`, `sin`, the output, the log-sum-exp.
#[derive(Debug, Clone)]
struct PackedAttentionState<B: FusedKernels> {
    tensors: [FloatTensor<B>; 5],
    heads: usize,
    kv_heads: usize,
    scale: f64,
}

impl<B: FusedKernels> Backward<B, 1> for PackedAttentionBackward {
    type State = PackedAttentionState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_qkv] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let PackedAttentionState { tensors: [qkv, cos, sin, output, lse], heads, kv_heads, scale } = ops.state;
        if let Some(node) = node_qkv {
            let grad_qkv = timed(OpKind::Attention, || {
                B::packed_attention_backward(qkv, cos, sin, output, lse, grad, heads, kv_heads, scale)
            });
            grads.register::<B>(node.id, grad_qkv);
        }
    }
}

/// Keeps each part's width and dtype: the gradient of a part is its columns of the gradient.
#[derive(Debug)]
struct PackColumnsBackward;

impl<B: FusedKernels> Backward<B, 3> for PackColumnsBackward {
    type State = [(usize, DType); 3];

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        // The parts without columns took no part in the pack.
        let parts: Vec<_> = ops.parents.into_iter().zip(ops.state).filter(|(_, (width, _))| *width > 0).collect();
        let widths = parts.iter().map(|(_, (width, _))| *width).collect();
        let dtypes = parts.iter().map(|(_, (_, dtype))| *dtype).collect();
        let part_grads = timed(OpKind::Linear, || B::unpack_columns(grad, widths, dtypes));
        for ((node, _), part_grad) in parts.into_iter().zip(part_grads) {
            if let Some(node) = node {
                grads.register::<B>(node.id, part_grad);
            }
        }
    }
}

/// A node without parents: what a constant is under autodiff.
#[derive(Debug)]
struct Constant;

impl<B: FusedKernels> Backward<B, 0> for Constant {
    type State = ();

    fn backward(self, _ops: Ops<(), 0>, _grads: &mut Gradients, _checkpointer: &mut Checkpointer) {}
}

/// `tensor` as an autodiff constant.
fn constant<B: FusedKernels, C: CheckpointStrategy>(tensor: FloatTensor<B>) -> FloatTensor<Autodiff<B, C>> {
    match Constant.prepare::<C>([]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((), tensor),
        OpsKind::UnTracked(prep) => prep.finish(tensor),
    }
}

impl<B: FusedKernels, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {
    fn fused_rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, epsilon: f64, scale: f64) -> FloatTensor<Self> {
        match RmsNormBackward.prepare::<C>([x.node(), gamma.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x, gamma) = (x.into_primitive(), gamma.into_primitive());
                let (y, inv_rms) =
                    timed(OpKind::Norm, || B::rms_norm_forward(x.clone(), gamma.clone(), epsilon, scale));
                prep.finish((x, gamma, inv_rms, scale), y)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::rms_norm_forward(x.into_primitive(), gamma.into_primitive(), epsilon, scale).0)
            }
        }
    }

    fn fused_residual_rms_norm(
        base: FloatTensor<Self>,
        branch: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
        scale: f64,
        out_dtype: DType,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let sum_parents = [base.node(), branch.node()];
        let (gamma_node, branch_dtype) = (gamma.node(), branch.dtype());
        let gamma = gamma.into_primitive();
        let (base, branch) = (base.into_primitive(), branch.into_primitive());
        let (x, y, inv_rms) = timed(OpKind::Norm, || {
            B::residual_rms_norm_forward(base, branch, gamma.clone(), epsilon, scale, out_dtype)
        });
        let sum = match ResidualSumBackward.prepare::<C>(sum_parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(branch_dtype, x.clone()),
            OpsKind::UnTracked(prep) => prep.finish(x.clone()),
        };
        let y = match ResidualRmsNormBackward.prepare::<C>([sum.node(), gamma_node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let kept = super::backward_follows().then(|| sum.clone());
                prep.finish((kept, x, gamma, inv_rms, scale), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        (sum, y)
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        match LayerNormBackward.prepare::<C>([x.node(), gamma.node(), beta.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x, gamma, beta) = (x.into_primitive(), gamma.into_primitive(), beta.into_primitive());
                let (y, mean, inv_std) =
                    timed(OpKind::Norm, || B::layer_norm_forward(x.clone(), gamma.clone(), beta, epsilon));
                prep.finish((x, gamma, mean, inv_std), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(
                B::layer_norm_forward(x.into_primitive(), gamma.into_primitive(), beta.into_primitive(), epsilon).0,
            ),
        }
    }

    fn fused_linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        match LinearBackward.prepare::<C>([x.node(), weight.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x, weight) = (x.into_primitive(), weight.into_primitive());
                let output = timed(OpKind::Linear, || B::linear_forward(x.clone(), weight.clone()));
                prep.finish((x, weight), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::linear_forward(x.into_primitive(), weight.into_primitive())),
        }
    }

    fn fused_swiglu(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self> {
        match SwigluBackward.prepare::<C>([gate.node(), up.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (gate, up) = (gate.into_primitive(), up.into_primitive());
                let output = timed(OpKind::Swiglu, || B::swiglu_forward(gate.clone(), up.clone()));
                prep.finish((gate, up), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::swiglu_forward(gate.into_primitive(), up.into_primitive())),
        }
    }

    fn fused_swiglu_packed(gate_up: FloatTensor<Self>) -> FloatTensor<Self> {
        match SwigluPackedBackward.prepare::<C>([gate_up.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let gate_up = gate_up.into_primitive();
                let output = timed(OpKind::Swiglu, || B::swiglu_packed_forward(gate_up.clone()));
                prep.finish(gate_up, output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::swiglu_packed_forward(gate_up.into_primitive())),
        }
    }

    fn fused_rope(x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>) -> FloatTensor<Self> {
        let (cos, sin) = (cos.into_primitive(), sin.into_primitive());
        match RopeBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let output = timed(OpKind::Attention, || B::rope_forward(x.into_primitive(), cos.clone(), sin.clone()));
                prep.finish((cos, sin), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::rope_forward(x.into_primitive(), cos, sin)),
        }
    }

    /// Constants: the loss's gradient is taken apart ([`lm_head_cross_entropy`](crate::model::lm_head_cross_entropy)).
    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (value, grad) = B::cross_entropy(logits.into_primitive(), targets);
        (constant::<B, C>(value), constant::<B, C>(grad))
    }

    /// Constants, as [`fused_cross_entropy`](FusedOps::fused_cross_entropy).
    fn fused_lm_head_cross_entropy(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (value, grad_hidden, grad_weight) =
            B::lm_head_cross_entropy(hidden.into_primitive(), weight.into_primitive(), targets);
        (constant::<B, C>(value), constant::<B, C>(grad_hidden), constant::<B, C>(grad_weight))
    }

    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        match AttentionBackward.prepare::<C>([q.node(), k.node(), v.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
                let (output, lse) =
                    timed(OpKind::Attention, || B::attention_forward(q.clone(), k.clone(), v.clone(), scale));
                prep.finish((q, k, v, output.clone(), lse, scale), output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::attention_forward(q.into_primitive(), k.into_primitive(), v.into_primitive(), scale).0)
            }
        }
    }

    fn fused_packed_attention(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        scale: f64,
    ) -> FloatTensor<Self> {
        let (cos, sin) = (cos.into_primitive(), sin.into_primitive());
        match PackedAttentionBackward.prepare::<C>([qkv.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let qkv = qkv.into_primitive();
                let (output, lse) = timed(OpKind::Attention, || {
                    B::packed_attention_forward(qkv.clone(), cos.clone(), sin.clone(), heads, kv_heads, scale)
                });
                let tensors = [qkv, cos, sin, output.clone(), lse];
                prep.finish(PackedAttentionState { tensors, heads, kv_heads, scale }, output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::packed_attention_forward(qkv.into_primitive(), cos, sin, heads, kv_heads, scale).0)
            }
        }
    }

    fn fused_pack_columns(
        first: FloatTensor<Self>,
        second: FloatTensor<Self>,
        third: FloatTensor<Self>,
        dtype: DType,
    ) -> FloatTensor<Self> {
        let parents = [first.node(), second.node(), third.node()];
        let parts = [first, second, third].map(|part| part.into_primitive());
        let state = parts.each_ref().map(|part| (part.shape()[1], part.dtype()));
        let packed = timed(OpKind::Linear, || B::pack_columns(super::packed::nonempty_columns::<B>(parts), dtype));
        match PackColumnsBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state, packed),
            OpsKind::UnTracked(prep) => prep.finish(packed),
        }
    }
}
