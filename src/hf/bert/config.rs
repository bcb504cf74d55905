//! `config.json` of a BERT-style encoder (transformers' `BertConfig`) as [`BertConfig`].
//!
//! Missing entries take transformers' defaults, except the sizes: a `config.json` without
//! `hidden_size` is more likely not the checkpoint's own than a bert-base, so each size is
//! required. Every error names the field.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::hf::{FieldProblem, HfError, Unsupported};

/// The activation of the feed-forward layers and of the masked-LM head (`hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BertActivation {
    /// `gelu`, `gelu_python`: the exact GELU `x/2 (1 + erf(x/sqrt(2)))` (BERT's own).
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation of GELU.
    GeluTanh,
    /// `relu`.
    Relu,
    /// `silu`, `swish`: `x sigmoid(x)`.
    Silu,
}

impl BertActivation {
    /// The activation transformers' `ACT2FN` gives `name`, if this crate implements it.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        match name {
            "gelu" | "gelu_python" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Self::GeluTanh),
            "relu" => Some(Self::Relu),
            "silu" | "swish" => Some(Self::Silu),
            _ => None,
        }
    }
}

/// The sizes of a BERT encoder with its masked-language-model head, from `config.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BertConfig {
    /// Token ids (`vocab_size`).
    pub vocab_size: usize,
    /// Model width (`hidden_size`; bert-large 1024).
    pub hidden_size: usize,
    /// Post-LN encoder layers (`num_hidden_layers`; bert-large 24).
    pub num_hidden_layers: usize,
    /// Attention heads per layer (`num_attention_heads`); divides `hidden_size`.
    pub num_attention_heads: usize,
    /// Feed-forward width (`intermediate_size`; bert-large 4096).
    pub intermediate_size: usize,
    /// `hidden_act` (default `gelu`, the exact form).
    pub hidden_act: BertActivation,
    /// Positions the model has embeddings for (`max_position_embeddings`, default 512).
    pub max_position_embeddings: usize,
    /// Segment types (`type_vocab_size`, default 2); every token here has type 0.
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm (`layer_norm_eps`, default 1e-12).
    pub layer_norm_eps: f64,
    /// Whether the masked-LM decoder is the word-embedding matrix (`tie_word_embeddings`, default true).
    pub tie_word_embeddings: bool,
}

/// Whether `json` describes a BERT model: `model_type` `bert`, or, without a `model_type`, an
/// architecture whose name starts with `Bert` (`BertForMaskedLM`, `BertForPreTraining`, ...).
pub(crate) fn describes_bert(json: &Value) -> bool {
    match json.get("model_type").and_then(Value::as_str) {
        Some(model_type) => model_type == "bert",
        None => json
            .get("architectures")
            .and_then(Value::as_array)
            .is_some_and(|names| names.iter().filter_map(Value::as_str).any(|name| name.starts_with("Bert"))),
    }
}

/// Entry `field` of `config`: `None` when absent or `null`, an error naming it when it is not a
/// value `read` accepts (`what` says which).
fn entry<T>(
    config: &Value,
    field: &str,
    what: &'static str,
    read: impl FnOnce(&Value) -> Option<T>,
) -> Result<Option<T>, HfError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            let wrong = || HfError::config(field, FieldProblem::WrongKind { what, got: value.to_string() });
            read(value).map(Some).ok_or_else(wrong)
        }
    }
}

/// A size that must be there and be at least 1.
fn size(config: &Value, field: &str) -> Result<usize, HfError> {
    let value = size_or(config, field, None)?;
    value.ok_or_else(|| HfError::config(field, FieldProblem::Missing))
}

/// A size, at least 1, or `default` when absent.
fn size_or(config: &Value, field: &str, default: Option<usize>) -> Result<Option<usize>, HfError> {
    let value = entry(config, field, "a positive integer", |v| v.as_u64().and_then(|n| usize::try_from(n).ok()))?;
    match value.or(default) {
        Some(0) => Err(HfError::config(field, FieldProblem::Zero)),
        value => Ok(value),
    }
}

impl BertConfig {
    /// Reads `dir/config.json`.
    pub fn read(dir: impl AsRef<Path>) -> Result<Self, HfError> {
        Self::from_json(&crate::hf::json_file::read_json(&dir.as_ref().join("config.json"))?)
    }

    /// The config a parsed `config.json` describes; an error naming the field for anything this
    /// encoder cannot compute (another `model_type`, relative positions, a decoder, an unknown
    /// activation) or a value that is missing or invalid.
    pub fn from_json(json: &Value) -> Result<Self, HfError> {
        if !json.is_object() {
            return Err(HfError::config("(root)", FieldProblem::NotAnObject));
        }
        if !describes_bert(json) {
            let model_type = json.get("model_type").map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_string));
            let architectures = json.get("architectures").map(Value::to_string).unwrap_or_default();
            return Err(Unsupported::NotBert { model_type, architectures }.into());
        }
        let text = |field: &str| entry(json, field, "a string", |v| v.as_str().map(str::to_string));
        let flag = |field: &str| entry(json, field, "true or false", Value::as_bool);
        if let Some(kind) = text("position_embedding_type")?.filter(|kind| kind != "absolute") {
            return Err(Unsupported::PositionEmbedding(kind).into());
        }
        for field in ["is_decoder", "add_cross_attention"] {
            if flag(field)? == Some(true) {
                return Err(Unsupported::BertDecoder(field.to_string()).into());
            }
        }
        let hidden_act = match text("hidden_act")? {
            None => BertActivation::Gelu,
            Some(name) => {
                BertActivation::from_hf_name(&name).ok_or_else(|| HfError::from(Unsupported::BertActivation(name)))?
            }
        };
        let layer_norm_eps = entry(json, "layer_norm_eps", "a positive number", Value::as_f64)?.unwrap_or(1e-12);
        if !(layer_norm_eps > 0.0 && layer_norm_eps.is_finite()) {
            return Err(HfError::config("layer_norm_eps", FieldProblem::NotPositive(layer_norm_eps)));
        }
        let config = Self {
            vocab_size: size(json, "vocab_size")?,
            hidden_size: size(json, "hidden_size")?,
            num_hidden_layers: size(json, "num_hidden_layers")?,
            num_attention_heads: size(json, "num_attention_heads")?,
            intermediate_size: size(json, "intermediate_size")?,
            hidden_act,
            max_position_embeddings: size_or(json, "max_position_embeddings", Some(512))?.unwrap_or(512),
            type_vocab_size: size_or(json, "type_vocab_size", Some(2))?.unwrap_or(2),
            layer_norm_eps,
            tie_word_embeddings: flag("tie_word_embeddings")?.unwrap_or(true),
        };
        if !config.hidden_size.is_multiple_of(config.num_attention_heads) {
            let (heads, hidden) = (config.num_attention_heads, config.hidden_size);
            return Err(HfError::config("num_attention_heads", FieldProblem::HeadsDoNotDivide { heads, hidden }));
        }
        Ok(config)
    }

    /// Width of one attention head: `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// Whether `dir` holds a BERT-style encoder: its `config.json` is readable JSON and
/// [describes BERT](BertConfig::from_json) by `model_type` or `architectures`.
pub fn is_bert_dir(dir: impl AsRef<Path>) -> bool {
    let text = std::fs::read_to_string(dir.as_ref().join("config.json"));
    text.ok().and_then(|text| serde_json::from_str::<Value>(&text).ok()).is_some_and(|json| describes_bert(&json))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bert(extra: Value) -> Value {
        let mut config = json!({"model_type": "bert", "vocab_size": 60, "hidden_size": 16, "num_hidden_layers": 3,
            "num_attention_heads": 2, "intermediate_size": 28});
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        config
    }

    #[test]
    fn missing_entries_take_transformers_defaults() {
        let config = BertConfig::from_json(&bert(json!({}))).unwrap();
        assert_eq!(config.hidden_act, BertActivation::Gelu);
        assert_eq!((config.max_position_embeddings, config.type_vocab_size), (512, 2));
        assert_eq!(config.layer_norm_eps, 1e-12);
        assert!(config.tie_word_embeddings);
        assert_eq!(config.head_dim(), 8);
    }

    #[test]
    fn each_bad_entry_is_named() {
        let message = |extra: Value| BertConfig::from_json(&bert(extra)).unwrap_err().to_string();
        assert!(message(json!({"hidden_size": "16"})).contains("`hidden_size` must be a positive integer"));
        assert!(message(json!({"num_attention_heads": 3})).contains("`num_attention_heads` 3 does not divide"));
        assert!(message(json!({"intermediate_size": 0})).contains("`intermediate_size` must be at least 1"));
        assert!(message(json!({"hidden_act": "mish"})).contains("hidden_act `mish`"));
        assert!(message(json!({"position_embedding_type": "relative_key"})).contains("relative_key"));
        assert!(message(json!({"is_decoder": true})).contains("is_decoder"));
        assert!(message(json!({"layer_norm_eps": -1.0})).contains("layer_norm_eps"));
        let mut no_vocab = bert(json!({}));
        no_vocab.as_object_mut().unwrap().remove("vocab_size");
        assert!(BertConfig::from_json(&no_vocab).unwrap_err().to_string().contains("`vocab_size` is missing"));
    }

    #[test]
    fn bert_is_told_by_model_type_or_architecture() {
        assert!(describes_bert(&json!({"model_type": "bert"})));
        assert!(describes_bert(&json!({"architectures": ["BertForPreTraining"]})));
        assert!(!describes_bert(&json!({"model_type": "llama", "architectures": ["BertForMaskedLM"]})));
        let llama = json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16});
        let error = BertConfig::from_json(&llama).unwrap_err().to_string();
        assert!(error.contains("\"llama\"") && error.contains("not a BERT encoder"), "{error}");
    }
}
