//! `Llama`: the decoder and its forward paths (logits, hidden-state trace, layer skipping, KV cache).

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig};
use burn::tensor::module::linear;
use burn::tensor::{Device, Int, Tensor};

use super::block::Block;
use super::block::BlockShape;
use super::config::LlamaConfig;
use super::kv_cache::KvCache;
use super::linear::normal_linear;
use super::loss::{cross_entropy_counting, lm_head_cross_entropy};
use super::residual::Residual;
use super::rope::RotaryEmbedding;
use crate::config_error::ConfigError;
use crate::memory::{float_bytes, host_memory_available};
use crate::norm::{Norm, NormKind};

/// A LLaMA decoder. Build it with [`LlamaConfig::init`].
#[derive(Module, Debug)]
pub struct Llama {
    /// Token embedding, `[vocab, d_model]`.
    pub embed_tokens: Embedding,
    /// Peri-LN's norm on the embedding output (never depth-scaled); `None` under other schemes.
    pub embed_norm: Option<Norm>,
    /// The blocks, bottom (layer 1) first.
    pub layers: Vec<Block>,
    /// The final norm before the LM head; never depth-scaled.
    pub norm: Norm,
    /// The LM head `d_model -> vocab`; `None` when tied to the embedding.
    pub lm_head: Option<Linear>,
    #[module(skip)]
    rope: RotaryEmbedding,
}

/// Logits plus the hidden states around every block, from [`Llama::forward_trace`].
#[derive(Clone, Debug)]
pub struct ForwardTrace {
    /// `[batch, seq, vocab]`.
    pub logits: Tensor<3>,
    /// `n_layers + 1` states `[batch, seq, d_model]`: `hidden[0]` is the embedding output (block 1's
    /// input, so after Peri-LN's embedding norm), `hidden[l]` the output of block `l`.
    pub hidden: Vec<Tensor<3>>,
    /// `n_layers` states: `after_attention[l - 1]` is block `l`'s state after its attention residual.
    pub after_attention: Vec<Tensor<3>>,
}

impl LlamaConfig {
    /// Builds the model with the paper's init on `device` (add `.autodiff()` to the device to train).
    ///
    /// On a device that allocates in the machine's memory (CPU backends), a model whose parameters
    /// do not fit twice in the memory available (the weights, and as much again for drawing them
    /// and a first forward pass) is refused before anything is allocated
    /// ([`check_fits`](LlamaConfig::check_fits)).
    pub fn init(&self, device: &Device) -> Result<Llama, ConfigError> {
        self.validate()?;
        if let Some(available) = host_memory_available(device) {
            self.check_fits(2 * float_bytes(device), available)?;
        }
        let shape = BlockShape {
            d_model: self.d_model,
            n_heads: self.n_heads,
            n_kv_heads: self.kv_heads(),
            qkv_bias: self.qkv_bias,
            d_ff: self.d_ff,
            norm_kind: self.norm_kind,
            norm_eps: self.norm_eps,
            dyt_alpha_init: self.dyt_alpha(),
        };
        let layers = (1..=self.n_layers)
            .map(|layer| {
                let mut plan = self.norm_scheme.plan(layer, self.n_layers, self.init_std)?;
                plan.init = self.init_scheme().apply(plan.init, self.init_std, layer, self.n_layers);
                Block::init(shape, plan, layer, device)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rope = RotaryEmbedding::scaled(self.head_dim(), self.rope_theta, self.rope_scaling.as_ref());
        Llama::new(self, layers, rope, device)
    }
}

impl Llama {
    fn new(
        config: &LlamaConfig,
        layers: Vec<Block>,
        rope: RotaryEmbedding,
        device: &Device,
    ) -> Result<Self, ConfigError> {
        let embed_tokens = EmbeddingConfig::new(config.vocab_size, config.d_model)
            .with_initializer(Initializer::Normal { mean: 0.0, std: config.embed_init_std })
            .init(device);
        let lm_head = (!config.tie_embeddings).then(|| {
            normal_linear(
                LinearConfig::new(config.d_model, config.vocab_size).with_bias(false),
                config.init_std,
                device,
            )
        });
        let norm = |kind: NormKind| kind.init(config.d_model, config.norm_eps, config.dyt_alpha(), 1.0, device);
        let embed_norm = config.norm_scheme.embedding_norm().then(|| norm(config.norm_kind)).transpose()?;
        let final_norm = norm(config.norm_kind.final_kind())?;
        Ok(Self { embed_tokens, embed_norm, layers, norm: final_norm, lm_head, rope })
    }

    /// The number of blocks.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Logits of every position. Shapes: `[batch, seq] -> [batch, seq, vocab]`.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.run(tokens, &[], None, None)
    }

    /// Mean next-token cross-entropy of `tokens: [batch, seq]` against `targets: [batch, seq]`
    /// -> `[1]`: [`forward`](Llama::forward) then [`cross_entropy`](super::cross_entropy), with the LM head and the loss
    /// fused ([`lm_head_cross_entropy`]), so training never keeps the logits for the backward pass.
    pub fn next_token_loss(&self, tokens: Tensor<2, Int>, targets: Tensor<2, Int>) -> Tensor<1> {
        self.next_token_loss_counting(tokens, targets, None)
    }

    /// [`next_token_loss`](Llama::next_token_loss) over the targets at `counted: [n]` only
    /// (positions `row * seq + column`; `None`: all of them), the mean taken over those: padding
    /// is neither predicted nor averaged in. Positions after a sequence's real tokens may hold
    /// anything: attention is causal, so no counted position sees them.
    pub fn next_token_loss_counting(
        &self,
        tokens: Tensor<2, Int>,
        targets: Tensor<2, Int>,
        counted: Option<Tensor<1, Int>>,
    ) -> Tensor<1> {
        let [batch, seq] = tokens.dims();
        let hidden = self.hidden(tokens, &[], None, None); // [batch, seq, d_model]
        let (weight, bias) = match &self.lm_head {
            Some(head) => (head.weight.val(), head.bias.as_ref()), // [d_model, vocab]
            None => (self.embed_tokens.weight.val().transpose(), None),
        };
        if bias.is_some() {
            // A head with a bias (no LLaMA has one) takes the plain path.
            return cross_entropy_counting(self.head(hidden), targets, counted);
        }
        let hidden = hidden.reshape([batch * seq, self.d_model()]);
        let targets = targets.reshape([batch * seq]);
        match counted {
            Some(rows) => lm_head_cross_entropy(hidden.select(0, rows.clone()), weight, targets.select(0, rows)),
            None => lm_head_cross_entropy(hidden, weight, targets),
        }
    }

    /// Logits plus the hidden state entering and leaving every block (for the diagnostics).
    pub fn forward_trace(&self, tokens: Tensor<2, Int>) -> ForwardTrace {
        let mut trace = Trace::default();
        let logits = self.run(tokens, &[], None, Some(&mut trace));
        ForwardTrace { logits, hidden: trace.hidden, after_attention: trace.after_attention }
    }

    /// The logit lens of a hidden state: the final norm and the LM head applied to it, as if the
    /// blocks after it were removed. Shapes: `[batch, seq, d_model] -> [batch, seq, vocab]`. Of the
    /// last block's output it is [`forward`](Llama::forward)'s logits.
    pub fn logit_lens(&self, hidden: Tensor<3>) -> Tensor<3> {
        self.head(self.norm.forward(hidden))
    }

    /// Logits with the given blocks (1-based layer numbers) skipped: their input passes straight
    /// to the next block, as if they were removed (layer pruning).
    pub fn forward_skipping(&self, tokens: Tensor<2, Int>, skip: &[usize]) -> Result<Tensor<3>, ConfigError> {
        self.check_layers(skip)?;
        Ok(self.run(tokens, skip, None, None))
    }

    /// An empty cache for [`forward_cached`](Llama::forward_cached).
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.layers.len())
    }

    /// Incremental decoding: logits of `tokens` (`[batch, new] -> [batch, new, vocab]`), which follow
    /// the positions already in `cache`; the cache is extended with them.
    pub fn forward_cached(&self, tokens: Tensor<2, Int>, cache: &mut KvCache) -> Tensor<3> {
        self.run(tokens, &[], Some(cache), None)
    }

    /// The model without the given blocks (1-based layer numbers). The remaining blocks keep their
    /// weights and their own layer numbers (so their LNS factors), as in the paper's pruning study.
    pub fn remove_layers(mut self, remove: &[usize]) -> Result<Self, ConfigError> {
        self.check_layers(remove)?;
        self.layers = self
            .layers
            .into_iter()
            .enumerate()
            .filter(|(index, _)| !remove.contains(&(index + 1)))
            .map(|(_, block)| block)
            .collect();
        Ok(self)
    }

    /// Checks that every 1-based layer number names a block of this model, each once.
    pub fn check_layers(&self, layers: &[usize]) -> Result<(), ConfigError> {
        check_layer_numbers(layers, self.layers.len())
    }

    /// Logits of every position: [`hidden`](Self::hidden), then the head.
    fn run(
        &self,
        tokens: Tensor<2, Int>,
        skip: &[usize],
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
    ) -> Tensor<3> {
        self.head(self.hidden(tokens, skip, cache, trace))
    }

    /// The final normed hidden state of every position: `[batch, seq] -> [batch, seq, d_model]`.
    fn hidden(
        &self,
        tokens: Tensor<2, Int>,
        skip: &[usize],
        mut cache: Option<&mut KvCache>,
        mut trace: Option<&mut Trace>,
    ) -> Tensor<3> {
        let [_, seq] = tokens.dims();
        let device = tokens.device();
        let offset = cache.as_ref().map_or(0, |cache| cache.len());
        let rope = self.rope.tables(offset, seq, &device);
        let mut x = self.embed_tokens.forward(tokens); // [batch, seq, d_model]
        if let Some(norm) = &self.embed_norm {
            x = norm.forward(x);
        }
        if let Some(trace) = trace.as_mut() {
            trace.hidden.push(x.clone());
        }
        // Each block's last residual add is left to the next norm, which makes it in its pass.
        let mut x = Residual::new(x);
        for (index, block) in self.layers.iter().enumerate() {
            if skip.contains(&(index + 1)) {
                continue;
            }
            let layer_cache = cache.as_mut().map(|cache| &mut cache.layers[index]);
            let out = block.forward_residual(x, &rope, layer_cache);
            if let Some(trace) = trace.as_mut() {
                trace.after_attention.push(out.after_attention);
                trace.hidden.push(out.output.clone().sum());
            }
            x = out.output;
        }
        let dtype = x.dtype();
        x.normed_in(&self.norm, dtype).1
    }

    /// The LM head: `[batch, seq, d_model] -> [batch, seq, vocab]`.
    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.lm_head {
            Some(head) => head.forward(x),
            None => linear(x, self.embed_tokens.weight.val().transpose(), None),
        }
    }

    /// The model width.
    fn d_model(&self) -> usize {
        self.embed_tokens.weight.dims()[1]
    }
}

#[derive(Default)]
struct Trace {
    hidden: Vec<Tensor<3>>,
    after_attention: Vec<Tensor<3>>,
}

/// An error unless every layer of `layers` (1-based) is one of `1..=n_layers`, each listed once.
pub(crate) fn check_layer_numbers(layers: &[usize], n_layers: usize) -> Result<(), ConfigError> {
    match layers.iter().find(|&&layer| layer == 0 || layer > n_layers) {
        Some(&0) => Err(ConfigError::LayerZero),
        Some(&layer) => Err(ConfigError::NoSuchLayer { layer, n_layers }),
        None => check_distinct_layers(layers),
    }
}

/// An error naming the first layer that `layers` lists a second time.
pub(crate) fn check_distinct_layers(layers: &[usize]) -> Result<(), ConfigError> {
    match layers.iter().enumerate().find(|&(i, layer)| layers[..i].contains(layer)) {
        Some((_, &layer)) => Err(ConfigError::LayerTwice { layer }),
        None => Ok(()),
    }
}
