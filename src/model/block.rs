//! One transformer block, executing the [`LayerPlan`] of its normalisation scheme.

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{DType, Device, Tensor};

use super::attention::{Attention, AttentionConfig};
use super::feed_forward::{FeedForward, FeedForwardConfig};
use super::kv_cache::LayerKv;
use super::residual::Residual;
use super::rope::RopeTables;
use crate::config_error::ConfigError;
use crate::fused::compute_dtype;
use crate::fused::mixed::{cast_counted, CastOf};
use crate::norm::{gpas, scale_unless_one, BranchGate, LayerPlan, Norm, NormKind, Placement};

/// The outputs of a block: `[batch, seq, d_model]` each.
#[derive(Clone, Debug)]
pub struct BlockOutput {
    /// The block's output (the next block's input).
    pub output: Tensor<3>,
    /// The hidden state after the attention sub-layer and its residual.
    pub after_attention: Tensor<3>,
}

/// The outputs of [`Block::forward_residual`]: the output with its last add maybe pending.
#[derive(Clone, Debug)]
pub struct BlockResidualOutput {
    /// The block's output (the next block's input).
    pub output: Residual,
    /// The hidden state after the attention sub-layer and its residual, `[batch, seq, d_model]`.
    pub after_attention: Tensor<3>,
}

/// A LLaMA block (attention then SwiGLU feed-forward) under any normalisation scheme:
///
/// ```text
/// Pre-LN:    h = x + g_a * s_a * Attn(s_o N_a(s_i x));   y = h + g_f * s_f * FFN(s_o N_f(s_i h))
/// Post-LN:   h = N_a(alpha x + Attn(x));             y = N_f(alpha h + FFN(h))
/// Sandwich:  h = x + N_a'(Attn(N_a(x)));             y = h + N_f'(FFN(N_f(h)))
/// Reordered: h = x + N_a(Attn(x));                   y = h + N_f(FFN(h))
/// ```
///
/// Sandwich-LN and Peri-LN share the Sandwich block; Peri-LN's embedding norm is the model's.
/// Under GPAS (Pre-LN blocks) each residual sum `r` becomes `r - SiLU(g) sg(r)`.
///
/// The `s` are the plan's factors: `s_o` its `norm_output_scale` (LNS after the norm, the paper's
/// `1/sqrt(l)`, which the norms `N_a` and `N_f` carry themselves), `s_i` its `norm_input_scale`,
/// `s_a` and `s_f` its sub-layer output scales.
#[derive(Module, Debug)]
pub struct Block {
    /// Causal self-attention.
    pub self_attn: Attention,
    /// SwiGLU feed-forward.
    pub mlp: FeedForward,
    /// The attention sub-layer's norm (before it in Pre-LN and Sandwich, after the residual in Post-LN).
    pub attn_norm: Norm,
    /// The feed-forward sub-layer's norm (placed likewise).
    pub ffn_norm: Norm,
    /// Sandwich-LN's and Peri-LN's norm on the attention output.
    pub attn_out_norm: Option<Norm>,
    /// Sandwich-LN's and Peri-LN's norm on the feed-forward output.
    pub ffn_out_norm: Option<Norm>,
    /// LayerScale (`[d_model]`) or SkipInit (`[1]`) gate on the attention output.
    pub attn_gate: Option<Param<Tensor<1>>>,
    /// LayerScale or SkipInit gate on the feed-forward output.
    pub ffn_gate: Option<Param<Tensor<1>>>,
    /// GPAS's gate `g`, `[1]`, starting at 0, shared by the block's two residual adds.
    pub gpas_gate: Option<Param<Tensor<1>>>,
    /// What the scheme does in this layer; derived from the config, never stored in checkpoints.
    #[module(skip)]
    plan: LayerPlan,
    /// The 1-based layer number this block was built for.
    layer: usize,
}

/// Sizes shared by every block of a model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockShape {
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub qkv_bias: bool,
    pub d_ff: usize,
    pub norm_kind: NormKind,
    pub norm_eps: f64,
    pub dyt_alpha_init: f64,
}

impl Block {
    /// Builds block `layer` (1-based) following `plan`.
    pub(crate) fn init(shape: BlockShape, plan: LayerPlan, layer: usize, device: &Device) -> Result<Self, ConfigError> {
        let d_model = shape.d_model;
        let init = plan.init;
        let norm = |scale| shape.norm_kind.init(d_model, shape.norm_eps, shape.dyt_alpha_init, scale, device);
        let sandwich = plan.placement == Placement::Sandwich;
        let gate = || match plan.gate {
            BranchGate::None => None,
            BranchGate::PerChannel { init } => Some(Initializer::Constant { value: init }.init([d_model], device)),
            BranchGate::Scalar { init } => Some(Initializer::Constant { value: init }.init([1], device)),
        };
        Ok(Self {
            self_attn: AttentionConfig::new(d_model, shape.n_heads, shape.n_kv_heads)
                .with_qkv_bias(shape.qkv_bias)
                .with_q_k_std(init.q_k_std)
                .with_v_std(init.v_std)
                .with_o_std(init.o_std)
                .init(device),
            mlp: FeedForwardConfig::new(d_model, shape.d_ff)
                .with_gate_up_std(init.gate_up_std)
                .with_down_std(init.down_std)
                .init(device),
            attn_norm: norm(plan.norm_output_scale)?,
            ffn_norm: norm(plan.norm_output_scale)?,
            attn_out_norm: if sandwich { Some(norm(1.0)?) } else { None },
            ffn_out_norm: if sandwich { Some(norm(1.0)?) } else { None },
            attn_gate: gate(),
            ffn_gate: gate(),
            gpas_gate: plan.gpas.then(|| Initializer::Zeros.init([1], device)),
            plan,
            layer,
        })
    }

    /// The 1-based layer number this block was built for.
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// What the normalisation scheme does in this block.
    pub fn plan(&self) -> &LayerPlan {
        &self.plan
    }

    /// Applies the block to `x: [batch, seq, d_model]`; `rope` holds the angles of `x`'s positions
    /// and `cache`, when given, the keys and values of earlier positions.
    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables, cache: Option<&mut Option<LayerKv>>) -> BlockOutput {
        let out = self.forward_residual(Residual::new(x), rope, cache);
        BlockOutput { output: out.output.sum(), after_attention: out.after_attention }
    }

    /// [`forward`](Self::forward) on the residual stream: a pending input sum is added by the
    /// block's first norm, and a Pre-LN block with RMSNorm leaves its own last add pending, for the
    /// next norm (the next block's or the model's final one) to add in its pass. Each residual add
    /// of such a block is then made inside a norm's kernel, forward and backward.
    pub fn forward_residual(
        &self,
        x: Residual,
        rope: &RopeTables,
        cache: Option<&mut Option<LayerKv>>,
    ) -> BlockResidualOutput {
        let plan = &self.plan;
        if plan.placement == Placement::Pre && self.gpas_gate.is_none() && plan.norm_input_scale == 1.0 {
            // Pre-LN as below, each `x + branch` added by the norm that follows it. Under mixed
            // precision the norms answer in the half type the sub-layers compute in, and their
            // outputs join the stream in that type: the casts happen in the norms' kernels.
            let half = compute_dtype(x.dtype(), &x.device());
            let (x, attn_in) = x.normed_in(&self.attn_norm, half);
            let attn = self.self_attn.forward(attn_in, rope, cache);
            let branch = self.branch(attn, plan.attn_output_scale, &self.attn_gate, x.dtype());
            let (h, ffn_in) = Residual::pending(x, branch).normed_in(&self.ffn_norm, half);
            let ffn = self.mlp.forward(ffn_in);
            let branch = self.branch(ffn, plan.ffn_output_scale, &self.ffn_gate, h.dtype());
            return BlockResidualOutput { output: Residual::pending(h.clone(), branch), after_attention: h };
        }
        let out = self.forward_sum(x.sum(), rope, cache);
        BlockResidualOutput { output: Residual::new(out.output), after_attention: out.after_attention }
    }

    /// [`forward`](Self::forward) with every residual add made here.
    fn forward_sum(&self, x: Tensor<3>, rope: &RopeTables, cache: Option<&mut Option<LayerKv>>) -> BlockOutput {
        let plan = &self.plan;
        match plan.placement {
            Placement::Pre => {
                let attn_in = self.attn_norm.forward(scale_unless_one(x.clone(), plan.norm_input_scale));
                let attn = self.self_attn.forward(attn_in, rope, cache);
                let h = self.gpas(x + gated(scale_unless_one(attn, plan.attn_output_scale), &self.attn_gate));
                let ffn_in = self.ffn_norm.forward(scale_unless_one(h.clone(), plan.norm_input_scale));
                let ffn = self.mlp.forward(ffn_in);
                let output = self.gpas(h.clone() + gated(scale_unless_one(ffn, plan.ffn_output_scale), &self.ffn_gate));
                BlockOutput { output, after_attention: h }
            }
            Placement::Post => {
                let attn = self.self_attn.forward(x.clone(), rope, cache);
                let h = self.attn_norm.forward(scale_unless_one(x, plan.residual_scale) + attn);
                let ffn = self.mlp.forward(h.clone());
                let output = self.ffn_norm.forward(scale_unless_one(h.clone(), plan.residual_scale) + ffn);
                BlockOutput { output, after_attention: h }
            }
            Placement::Sandwich => {
                let attn = self.self_attn.forward(self.attn_norm.forward(x.clone()), rope, cache);
                let h = x + post_norm(&self.attn_out_norm, attn);
                let ffn = self.mlp.forward(self.ffn_norm.forward(h.clone()));
                let output = h.clone() + post_norm(&self.ffn_out_norm, ffn);
                BlockOutput { output, after_attention: h }
            }
            Placement::Reordered => {
                let h = x.clone() + self.attn_norm.forward(self.self_attn.forward(x, rope, cache));
                let output = h.clone() + self.ffn_norm.forward(self.mlp.forward(h.clone()));
                BlockOutput { output, after_attention: h }
            }
        }
    }

    /// A sub-layer's output as it joins the stream (of type `stream`): scaled, and gated where
    /// the scheme gates, both in the stream's type (a half-precision output is cast first); an
    /// output joining as it is stays in its type, for the next norm to add.
    fn branch(&self, output: Tensor<3>, scale: f64, gate: &Option<Param<Tensor<1>>>, stream: DType) -> Tensor<3> {
        let output = match gate.is_some() || scale != 1.0 {
            true => cast_counted(output, stream, CastOf::Activation),
            false => output,
        };
        gated(scale_unless_one(output, scale), gate)
    }

    /// [`gpas`] on a residual sum `r: [batch, seq, d_model]` with this block's gate; `r` itself
    /// without GPAS.
    fn gpas(&self, r: Tensor<3>) -> Tensor<3> {
        match &self.gpas_gate {
            Some(gate) => gpas(r, gate.val()),
            None => r,
        }
    }
}

/// `branch * gate`, the gate (`[d_model]` or `[1]`) broadcast over batch and sequence.
fn gated(branch: Tensor<3>, gate: &Option<Param<Tensor<1>>>) -> Tensor<3> {
    match gate {
        Some(gate) => branch * gate.val().unsqueeze::<3>(),
        None => branch,
    }
}

fn post_norm(norm: &Option<Norm>, x: Tensor<3>) -> Tensor<3> {
    match norm {
        Some(norm) => norm.forward(x),
        None => x,
    }
}
