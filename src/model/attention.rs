//! Causal multi-head self-attention with rotary positions, grouped-query heads and a KV cache.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Tensor};

use super::kv_cache::LayerKv;
use super::linear::{normal_linear, project};
use super::rope::RopeTables;
use crate::fused;
use crate::fused::mixed::in_compute_dtype;
use crate::fused::repeat_kv;

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
    ///
    /// Without a cache (training, scoring) the three projections are one matrix product
    /// ([`fused::linear_packed`]) read in place by [`fused::causal_attention_packed`], which applies
    /// RoPE as it loads. With one, the first chunk of decoding is [`fused::causal_attention`] and
    /// later ones Burn's attention over the cache's buffers with a mask.
    ///
    /// Under mixed precision the input is cast to the half type once; the projections, RoPE and
    /// attention run in it (the cache holds half keys and values), and the output comes back in
    /// `x`'s type.
    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables, cache: Option<&mut Option<LayerKv>>) -> Tensor<3> {
        in_compute_dtype(x, |x| self.attend(x, rope, cache))
    }

    /// [`forward`](Self::forward) in `x`'s own type.
    fn attend(&self, x: Tensor<3>, rope: &RopeTables, cache: Option<&mut Option<LayerKv>>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        if cache.is_none() && self.packs_projections() {
            let weights = [&self.q_proj, &self.k_proj, &self.v_proj].map(|layer| layer.weight.val());
            let qkv = fused::linear_packed(x, &weights); // [b, s, (h + 2 kv) hd]
            let (cos, sin) = rope.tables_in(qkv.dtype());
            let context = fused::causal_attention_packed(qkv, cos, sin, self.n_heads, self.n_kv_heads);
            return project(&self.o_proj, context.reshape([batch, seq, self.n_heads * self.head_dim]));
        }
        let split = |t: Tensor<3>, n: usize| t.reshape([batch, seq, n, self.head_dim]); // [b, s, n, hd]
        let query = rope.apply_seq_major(split(project(&self.q_proj, x.clone()), self.n_heads));
        let key = rope.apply_seq_major(split(project(&self.k_proj, x.clone()), self.n_kv_heads));
        let value = split(project(&self.v_proj, x), self.n_kv_heads);
        let context = match cache {
            Some(Some(cached)) => self.attend_after_cached(query, key, value, cached),
            Some(empty) => {
                *empty = Some(LayerKv::new(key.clone().swap_dims(1, 2), value.clone().swap_dims(1, 2)));
                fused::causal_attention(query, key, value)
            }
            None => fused::causal_attention(query, key, value),
        }; // [b, s, h, hd]
        project(&self.o_proj, context.reshape([batch, seq, self.n_heads * self.head_dim]))
    }

    /// Whether the queries, keys and values are made by one matrix product and read in place by
    /// [`fused::causal_attention_packed`]: without biases (a Qwen2 layer's take Burn's `Linear`).
    fn packs_projections(&self) -> bool {
        [&self.q_proj, &self.k_proj, &self.v_proj].iter().all(|layer| layer.bias.is_none())
    }

    /// Attention of new positions (`query: [b, s, h, hd]`, `key`, `value: [b, s, kv, hd]`) over
    /// the cached ones and themselves; the cache is extended. Returns `[b, s, h, hd]`.
    fn attend_after_cached(
        &self,
        query: Tensor<4>,
        key: Tensor<4>,
        value: Tensor<4>,
        cache: &mut LayerKv,
    ) -> Tensor<4> {
        let [batch, seq, _, _] = query.dims();
        // [b, kv, capacity, hd]
        cache.append(key.swap_dims(1, 2), value.swap_dims(1, 2));
        // Query i sees the positions up to its own; the buffer's unwritten ones are hidden too.
        let mask = cache.mask(seq).expand([batch, self.n_heads, seq, cache.capacity()]);
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: false };
        let (key, value) = (repeat_kv(cache.key.clone(), self.n_heads), repeat_kv(cache.value.clone(), self.n_heads));
        let context = attention(query.swap_dims(1, 2), key, value, Some(mask), None, options); // [b, h, s, hd]
        context.swap_dims(1, 2)
    }
}
