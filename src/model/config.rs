//! `LlamaConfig`: the single source of truth for a model's shape, init and normalisation scheme.

use std::path::Path;

use burn::config::Config;
use burn::tensor::Device;

use super::rope::RopeScaling;
use crate::config_error::check_positive_f32;
use crate::memory::{float_bytes, host_memory_available};
use crate::memory_problem::{MemoryProblem, ModelSize};
use crate::norm::{check_alpha_init, BranchGate, InitScheme, NormKind, NormScheme, DYT_ALPHA_INIT};
use crate::{config_error::ConfigError, error::Error};

/// A LLaMA decoder: embeddings, `n_layers` blocks, a final norm (never depth-scaled) and an LM head.
///
/// Build one from a preset ([`LlamaConfig::preset`], [`LlamaConfig::llama_130m`], ...) or a JSON
/// file ([`LlamaConfig::from_file`]), adjust it with the `with_*` setters, then call
/// [`init`](LlamaConfig::init).
#[derive(Config, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Model width (hidden size).
    pub d_model: usize,
    /// Feed-forward width (intermediate size).
    pub d_ff: usize,
    /// Number of transformer blocks.
    pub n_layers: usize,
    /// Number of query heads; `d_model` must be a multiple.
    pub n_heads: usize,
    /// Number of key/value heads for grouped-query attention; `None` means `n_heads` (full MHA).
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Vocabulary size. Default 32000, the t5-base tokenizer of the paper.
    #[config(default = 32000)]
    pub vocab_size: usize,
    /// Base of the rotary embedding's frequencies.
    #[config(default = 10000.0)]
    pub rope_theta: f64,
    /// How the rotary frequencies are scaled for long contexts (Llama 3.1, linear); `None`: unscaled.
    #[config(default = "None")]
    pub rope_scaling: Option<RopeScaling>,
    /// Epsilon of every norm (LLaMA: 1e-6).
    #[config(default = 1e-6)]
    pub norm_eps: f64,
    /// Longest sequence the model is meant for (checked by the training pipeline).
    #[config(default = 1024)]
    pub max_seq_len: usize,
    /// Whether the LM head shares the embedding matrix. Default false (untied, as the paper).
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// Whether the query, key and value projections have biases (Qwen2). Default false.
    #[config(default = false)]
    pub qkv_bias: bool,
    /// Std of the normal init of every projection and of the LM head (0.02).
    #[config(default = 0.02)]
    pub init_std: f64,
    /// Std of the normal init of the token embedding (0.02).
    #[config(default = 0.02)]
    pub embed_init_std: f64,
    /// RMSNorm (default), LayerNorm, DyT, Derf or BHyT (`rms-norm`, `layer-norm`, `dyt`, `derf`, `bhyt`).
    #[config(default = "NormKind::RmsNorm")]
    pub norm_kind: NormKind,
    /// Initial value of every norm's learnable scalar: DyT's and Derf's `alpha`, BHyT's `lambda`;
    /// `None` means the kind's default (0.5, 0.5, 2; and lets config files written before DyT
    /// existed load). Unused by RMSNorm and LayerNorm.
    #[config(default = "None")]
    pub dyt_alpha_init: Option<f64>,
    /// The normalisation scheme; default LayerNorm Scaling.
    #[config(default = "NormScheme::default()")]
    pub norm_scheme: NormScheme,
    /// How the output and down projections are initialised (`normal`, `scaled`, `depth-scaled`);
    /// `None` means `normal` (and lets config files written before the init axis existed load).
    #[config(default = "None")]
    pub init: Option<InitScheme>,
}

impl LlamaConfig {
    /// Key/value heads (`n_heads` unless grouped-query attention is configured).
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// The initial value of the norms' learnable scalar (DyT's and Derf's `alpha`, BHyT's
    /// `lambda`): `dyt_alpha_init`, or the kind's default (0.5, 0.5, 2; 0.5, unused, for RMSNorm
    /// and LayerNorm).
    pub fn dyt_alpha(&self) -> f64 {
        self.dyt_alpha_init.or(self.norm_kind.default_alpha()).unwrap_or(DYT_ALPHA_INIT)
    }

    /// The init scheme: `init`, or `normal`.
    pub fn init_scheme(&self) -> InitScheme {
        self.init.unwrap_or_default()
    }

    /// Size of one attention head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Checks every field; the error says which field is wrong and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("d_model", self.d_model),
            ("d_ff", self.d_ff),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.kv_heads()),
            ("vocab_size", self.vocab_size),
            ("max_seq_len", self.max_seq_len),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        let divisible = |a: &'static str, a_value: usize, b: &'static str, b_value: usize| {
            if a_value.is_multiple_of(b_value) {
                Ok(())
            } else {
                Err(ConfigError::NotDivisible { a, a_value, b, b_value })
            }
        };
        divisible("d_model", self.d_model, "n_heads", self.n_heads)?;
        divisible("n_heads", self.n_heads, "n_kv_heads", self.kv_heads())?;
        divisible("head_dim (d_model / n_heads)", self.head_dim(), "2 (rotary pairs)", 2)?;
        let positive = |field: &'static str, value: f64| {
            if value > 0.0 && value.is_finite() {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange { field, value, expected: "a finite number > 0" })
            }
        };
        positive("rope_theta", self.rope_theta)?;
        if let Some(scaling) = &self.rope_scaling {
            scaling.validate()?;
        }
        check_positive_f32("norm_eps", self.norm_eps)?;
        check_positive_f32("init_std", self.init_std)?;
        check_positive_f32("embed_init_std", self.embed_init_std)?;
        check_alpha_init(self.dyt_alpha())?;
        self.norm_scheme.validate()?;
        self.norm_scheme.check_init(self.init_scheme())
    }

    /// The number of parameters [`init`](LlamaConfig::init) creates, computed without building the
    /// model; `usize::MAX` for a config too large to count.
    pub fn num_params(&self) -> usize {
        // Counted in f64 (exact below 2^53) so that an absurd config saturates instead of overflowing.
        let [d, d_ff, vocab, n_layers] = [self.d_model, self.d_ff, self.vocab_size, self.n_layers].map(|n| n as f64);
        let kv_dim = self.kv_heads() as f64 * self.head_dim() as f64;
        let bias = |n: f64| if self.qkv_bias { n } else { 0.0 };
        let attention = d * d + bias(d) + 2.0 * (d * kv_dim + bias(kv_dim)) + d * d;
        let feed_forward = 3.0 * d * d_ff;
        let norm = self.norm_kind.num_params(self.d_model) as f64;
        let norms_per_block = self.norm_scheme.norms_per_block() as f64;
        // The final norm (RMSNorm under BHyT), and Peri-LN's embedding norm.
        let final_norm = self.norm_kind.final_kind().num_params(self.d_model) as f64;
        let embedding_norm = if self.norm_scheme.embedding_norm() { norm } else { 0.0 };
        // Two gates a block (attention, feed-forward), as the layer plan says; the same in every layer.
        let plan = self.norm_scheme.plan(1, self.n_layers.max(1), self.init_std);
        let gates = match plan.as_ref().map(|plan| plan.gate) {
            Ok(BranchGate::PerChannel { .. }) => 2.0 * d,
            Ok(BranchGate::Scalar { .. }) => 2.0,
            _ => 0.0,
        };
        // GPAS's one gate a block.
        let gates = gates + if plan.is_ok_and(|plan| plan.gpas) { 1.0 } else { 0.0 };
        let block = attention + feed_forward + norms_per_block * norm + gates;
        let embeddings = vocab * d;
        let head = if self.tie_embeddings { 0.0 } else { vocab * d };
        // `as` saturates at usize::MAX.
        (embeddings + n_layers * block + final_norm + embedding_norm + head) as usize
    }

    /// An error ([`ConfigError::TooLong`]) unless `tokens` positions fit in
    /// [`max_seq_len`](LlamaConfig::max_seq_len), the longest sequence the model attends over whole
    /// (a Hugging Face model's `max_position_embeddings`, or a Mistral model's `sliding_window`
    /// when shorter: past it, transformers would attend to the window only). `asked_by` names the
    /// setting that asks for them, `fix` what to do.
    pub fn check_seq_len(&self, tokens: usize, asked_by: &str, fix: &str) -> Result<(), ConfigError> {
        if tokens <= self.max_seq_len {
            return Ok(());
        }
        Err(ConfigError::TooLong {
            asked_by: asked_by.to_string(),
            positions: tokens,
            max_seq_len: self.max_seq_len,
            fix: fix.to_string(),
        })
    }

    /// The sizes its memory refusals name.
    pub fn sizes(&self) -> ModelSize {
        let (d_model, d_ff, n_layers, vocab_size) = (self.d_model, self.d_ff, self.n_layers, self.vocab_size);
        ModelSize { params: self.num_params(), d_model, d_ff, n_layers, vocab_size }
    }

    /// An error unless the parameters, `float_bytes` bytes each, fit in `available` bytes of
    /// memory; it names the fields that size the model and what to do. [`init`](LlamaConfig::init)
    /// asks for two floats a parameter (the weights, and as much again for drawing them); training
    /// needs far more (`train::TrainingMemory` counts it: about 24 bytes a parameter in f32 at its
    /// peak, before activations), and checks that instead.
    pub fn check_fits(&self, float_bytes: usize, available: u64) -> Result<(), ConfigError> {
        let params = self.num_params();
        let bytes = (params as u64).saturating_mul(float_bytes as u64);
        if bytes <= available {
            return Ok(());
        }
        Err(ConfigError::TooLarge(Box::new(MemoryProblem::Weights {
            model: self.sizes(),
            float_bytes,
            needed: bytes,
            available,
        })))
    }

    /// An error unless a forward pass of `batch` x `seq` tokens that keeps the hidden state around
    /// every block (a trace, as the diagnostics take it: `n_layers + 1` tensors `[batch, seq,
    /// d_model]`) fits beside the weights, on a device that allocates in the machine's memory; it
    /// names the sizes to lower. Counted besides: the logits `[batch, seq, vocab_size]` twice (they
    /// and their log-softmax), and one block's intermediates (the feed-forward's three `[batch,
    /// seq, d_ff]`, four `[batch, seq, d_model]`, the attention scores `[batch, heads, seq, seq]`).
    pub fn check_trace_fits(&self, batch: usize, seq: usize, device: &Device) -> Result<(), ConfigError> {
        let Some(available) = host_memory_available(device) else { return Ok(()) };
        self.check_fits(2 * float_bytes(device), available)?;
        let tokens = batch as f64 * seq as f64;
        let (d, d_ff, vocab) = (self.d_model as f64, self.d_ff as f64, self.vocab_size as f64);
        let block = tokens * (3.0 * d_ff + 4.0 * d) + batch as f64 * self.n_heads as f64 * seq as f64 * seq as f64;
        let values = self.num_params() as f64 + tokens * ((self.n_layers as f64 + 1.0) * d + 2.0 * vocab) + block;
        let needed = values * float_bytes(device) as f64;
        if needed <= available as f64 {
            return Ok(());
        }
        Err(ConfigError::TooLarge(Box::new(MemoryProblem::Trace {
            n_layers: self.n_layers,
            batch,
            seq,
            needed: needed.min(u64::MAX as f64) as u64,
            available,
        })))
    }

    /// Reads a JSON config file (the format of `configs/models/*.json`) and validates it.
    ///
    /// Only `d_model`, `d_ff`, `n_layers` and `n_heads` are required; missing fields take their
    /// defaults, and an unknown field is an error (so a typo is not silently ignored).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
        Self::from_json(&text).map_err(|e| Error::file(path, e))
    }

    /// Parses a JSON config as [`from_file`](LlamaConfig::from_file) does.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { what: "model config", message };
        let given: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| invalid(crate::config_error::json_error_in(text, &e)))?;
        let required = |field: &'static str| -> Result<usize, ConfigError> {
            let value = given.get(field).ok_or_else(|| invalid(format!("missing required field `{field}`")))?;
            value
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| invalid(format!("`{field}` must be a whole number, got {value}")))
        };
        let defaults = Self::new(required("d_model")?, required("d_ff")?, required("n_layers")?, required("n_heads")?);
        let serde_json::Value::Object(mut merged) =
            serde_json::to_value(&defaults).map_err(|e| invalid(e.to_string()))?
        else {
            unreachable!("a struct serialises to a JSON object")
        };
        for (key, value) in given {
            if !merged.contains_key(&key) {
                let known: Vec<&str> = merged.keys().map(String::as_str).collect();
                return Err(invalid(format!("unknown field `{key}`; known fields: {}", known.join(", "))));
            }
            merged.insert(key, value);
        }
        let config: Self =
            serde_json::from_value(serde_json::Value::Object(merged)).map_err(|e| invalid(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Writes the config as pretty JSON, atomically (a temporary file renamed into place).
    pub fn to_file(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        let json = serde_json::to_string_pretty(self).map_err(|e| Error::file(path, e))?;
        crate::io::write_atomically(path, format!("{json}\n").as_bytes()).map_err(|e| Error::file(path, e))
    }
}
