//! What of a `config.json` this crate does not implement.

use std::path::PathBuf;

/// An architecture or feature of `config.json` this crate does not implement
/// ([`HfError::Unsupported`](super::HfError::Unsupported)).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc or message says what its fields are
pub enum Unsupported {
    /// A decoder other than LLaMA, Mistral and Qwen2; `architectures` is the JSON list, or empty.
    #[error("model_type `{model_type}` {architectures}; supported: llama, mistral, qwen2")]
    ModelType { model_type: String, architectures: String },
    /// A BERT folder given where a decoder is loaded.
    #[error(
        "a BERT encoder (model_type `bert`) cannot be trained or loaded as a decoder: training, generation and \
         export take llama, mistral and qwen2; give an encoder to `analyze --hf-dir`, which measures its layer \
         removal by pseudo-perplexity"
    )]
    BertAsDecoder,
    /// A config of another model type (`model_type` as written, `None` without one).
    #[error(
        "model_type {} {architectures} is not a BERT encoder (model_type `bert`); a LLaMA, Mistral or Qwen2 decoder \
         loads with `load_hf_model`",
        .model_type.as_ref().map_or("(none)".to_string(), |t| format!("\"{t}\""))
    )]
    NotBert { model_type: Option<String>, architectures: String },
    /// A rope scaling (`kind`, under the key `field`) this crate does not implement.
    #[error("rope type `{kind}` in `{field}`; supported: default, linear, llama3")]
    RopeType { field: String, kind: String },
    /// A decoder's activation other than SiLU.
    #[error("hidden_act `{0}`; only silu (SwiGLU) is implemented")]
    Activation(String),
    /// A BERT activation this crate does not implement.
    #[error(
        "hidden_act `{0}`; implemented: gelu, gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish"
    )]
    BertActivation(String),
    /// `attention_bias` or `mlp_bias` in a LLaMA or Mistral.
    #[error("`{0}: true`: this LLaMA variant has biases the model does not implement")]
    Bias(String),
    /// Qwen2's sliding-window attention.
    #[error("Qwen2 with `use_sliding_window: true` (sliding-window attention)")]
    SlidingWindow,
    /// A `head_dim` other than `hidden_size / num_attention_heads` (`implied`).
    #[error("head_dim {head_dim} differs from hidden_size / num_attention_heads = {implied}")]
    HeadDim { head_dim: usize, implied: usize },
    /// BERT position embeddings other than absolute ones.
    #[error("position_embedding_type `{0}`; only `absolute` position embeddings are implemented")]
    PositionEmbedding(String),
    /// `is_decoder` or `add_cross_attention` in a BERT config.
    #[error("`{0}: true`: a BERT decoder (causal or cross-attention) is not this bidirectional encoder")]
    BertDecoder(String),
    /// A BERT checkpoint (in `dir`) without its masked-LM head.
    #[error(
        "{} has no masked-language-model head (no `cls.predictions.*` tensor): a bare BertModel cannot score \
         tokens; give a BertForMaskedLM or BertForPreTraining checkpoint",
        .dir.display()
    )]
    NoMaskedLmHead { dir: PathBuf },
    /// Export was given a model that was not built from the config it was given with.
    #[error("the model was not built from this config")]
    NotThisConfig,
}
