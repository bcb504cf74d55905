//! Causal multi-head self-attention with rotary positions, grouped-query heads and a KV cache.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Tensor};

use super::init::normal_linear;
use super::kv_cache::LayerKv;
use super::rope::RopeTables;

/// Sizes and init of an [`Attention`] layer: projections `N(0, std)`, q and k with `q_k_std`,
/// v with `v_std`, o with `o_std`.
#[derive(Config, Debug)]
pub struct AttentionConfig {
    /// Model width.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (`n_heads` for full multi-head attention).
    pub n_kv_heads: usize,
    /// Whether q, k and v have biases (Qwen2).
    #[config(default = false)]
    pub qkv_bias: bool,
    /// Init std of the query and key projections.
    #[config(default = 0.02)]
    pub q_k_std: f64,
    /// Init std of the value projection.
    #[config(default = 0.02)]
    pub v_std: f64,
    /// Init std of the output projection.
    #[config(default = 0.02)]
    pub o_std: f64,
}

/// Causal self-attention. Shapes: `[batch, seq, d_model] -> [batch, seq, d_model]`.
#[derive(Module, Debug)]
pub struct Attention {
    /// `d_model -> n_heads * head_dim`.
    pub q_proj: Linear,
    /// `d_model -> n_kv_heads * head_dim`.
    pub k_proj: Linear,
    /// `d_model -> n_kv_heads * head_dim`.
    pub v_proj: Linear,
    /// `n_heads * head_dim -> d_model`.
    pub o_proj: Linear,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl AttentionConfig {
    /// Builds the projections on `device`.
    pub fn init(&self, device: &Device) -> Attention {
        let AttentionConfig { d_model, n_heads, n_kv_heads, qkv_bias, q_k_std, v_std, o_std } = *self;
        let head_dim = d_model / n_heads;
        let projection = |d_out: usize, bias: bool, std: f64| {
            normal_linear(LinearConfig::new(d_model, d_out).with_bias(bias), std, device)
        };
        Attention {
            q_proj: projection(n_heads * head_dim, qkv_bias, q_k_std),
            k_proj: projection(n_kv_heads * head_dim, qkv_bias, q_k_std),
            v_proj: projection(n_kv_heads * head_dim, qkv_bias, v_std),
            o_proj: normal_linear(LinearConfig::new(n_heads * head_dim, d_model).with_bias(false), o_std, device),
            n_heads,
            n_kv_heads,
            head_dim,
        }
    }
}

impl Attention {
    /// Attends over the positions in `x` and, if given, those already in `cache` (which is then
    /// extended with `x`'s keys and values). `rope` holds the angles of `x`'s positions.
    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables, cache: Option<&mut Option<LayerKv>>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let heads = |t: Tensor<3>, n: usize| t.reshape([batch, seq, n, self.head_dim]).swap_dims(1, 2);
        let query = rope.apply(heads(self.q_proj.forward(x.clone()), self.n_heads)); // [b, h, s, hd]
        let mut key = rope.apply(heads(self.k_proj.forward(x.clone()), self.n_kv_heads)); // [b, kv, s, hd]
        let mut value = heads(self.v_proj.forward(x), self.n_kv_heads);

        let mut past = 0;
        if let Some(cache) = cache {
            if let Some(previous) = cache.take() {
                past = previous.key.dims()[2];
                key = Tensor::cat(vec![previous.key, key], 2);
                value = Tensor::cat(vec![previous.value, value], 2);
            }
            *cache = Some(LayerKv { key: key.clone(), value: value.clone() });
        }

        let key = self.repeat_kv(key);
        let value = self.repeat_kv(value);
        let device = query.device();
        let total = past + seq;
        // Query i (absolute position past + i) may see keys 0..=past + i.
        let (mask, is_causal) = match (past, seq) {
            (0, _) => (None, true),
            (_, 1) => (None, false),
            _ => {
                let future = Tensor::<2, Bool>::tril_mask([seq, total], past as i64, &device);
                (Some(future.unsqueeze::<4>().expand([batch, self.n_heads, seq, total])), false)
            }
        };
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal };
        let context = attention(query, key, value, mask, None, options); // [b, h, s, hd]
        let context = context.swap_dims(1, 2).reshape([batch, seq, self.n_heads * self.head_dim]);
        self.o_proj.forward(context)
    }

    /// Repeats each key/value head for the query heads of its group:
    /// `[b, n_kv_heads, s, hd] -> [b, n_heads, s, hd]`.
    fn repeat_kv(&self, x: Tensor<4>) -> Tensor<4> {
        let groups = self.n_heads / self.n_kv_heads;
        if groups == 1 {
            return x;
        }
        let [batch, kv_heads, seq, head_dim] = x.dims();
        x.unsqueeze_dim::<5>(2).expand([batch, kv_heads, groups, seq, head_dim]).reshape([
            batch,
            kv_heads * groups,
            seq,
            head_dim,
        ])
    }
}
