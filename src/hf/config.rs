//! `config.json` of the LLaMA family (LLaMA, Mistral, Qwen2) to and from [`LlamaConfig`].
//!
//! Both layouts transformers writes are read: 4.x (`rope_theta`, `rope_scaling`) and 5.x
//! (`rope_parameters`). A model exported under a scheme other than Pre-LN records it in a
//! `layernorm_scaling` entry, which transformers ignores and [`parse_hf_config`] restores.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::HfError;
use crate::model::RopeScaling;
use crate::{LlamaConfig, NormKind, NormScheme};

/// The key under which an exported model records its normalisation scheme.
pub const SCHEME_KEY: &str = "layernorm_scaling";

/// Reads `dir/config.json`.
pub fn read_hf_config(dir: &Path) -> Result<LlamaConfig, HfError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| HfError::file(&path, e))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| HfError::file(&path, format!("not valid JSON: {e}")))?;
    parse_hf_config(&json)
}

fn usize_field(config: &Map<String, Value>, field: &str) -> Result<Option<usize>, HfError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(|v| Some(v as usize))
            .ok_or_else(|| HfError::config(field, format!("must be a whole number, got {value}"))),
    }
}

fn required(config: &Map<String, Value>, field: &str) -> Result<usize, HfError> {
    usize_field(config, field)?.ok_or_else(|| HfError::config(field, "is missing"))
}

fn f64_field(config: &Map<String, Value>, field: &str) -> Result<Option<f64>, HfError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            value.as_f64().map(Some).ok_or_else(|| HfError::config(field, format!("must be a number, got {value}")))
        }
    }
}

fn bool_field(config: &Map<String, Value>, field: &str) -> Result<Option<bool>, HfError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_bool()
            .map(Some)
            .ok_or_else(|| HfError::config(field, format!("must be true or false, got {value}"))),
    }
}

/// The rope scaling of a `rope_scaling` (4.x) or `rope_parameters` (5.x) object.
fn parse_rope_scaling(field: &str, params: &Map<String, Value>) -> Result<Option<RopeScaling>, HfError> {
    let kind = params.get("rope_type").or_else(|| params.get("type")).and_then(Value::as_str).unwrap_or("default");
    let number =
        |key: &str| f64_field(params, key)?.ok_or_else(|| HfError::config(&format!("{field}.{key}"), "is missing"));
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: number("factor")? })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: number("factor")?,
            low_freq_factor: number("low_freq_factor")?,
            high_freq_factor: number("high_freq_factor")?,
            original_max_position_embeddings: number("original_max_position_embeddings")? as usize,
        })),
        other => {
            Err(HfError::Unsupported(format!("rope type `{other}` in `{field}`; supported: default, linear, llama3")))
        }
    }
}

/// A [`LlamaConfig`] from a parsed `config.json`.
pub fn parse_hf_config(json: &Value) -> Result<LlamaConfig, HfError> {
    let config = json.as_object().ok_or_else(|| HfError::config("(root)", "config.json must be a JSON object"))?;
    let model_type = config.get("model_type").and_then(Value::as_str).unwrap_or("");
    if !["llama", "mistral", "qwen2"].contains(&model_type) {
        let architectures = config.get("architectures").map(Value::to_string).unwrap_or_default();
        return Err(HfError::Unsupported(format!(
            "model_type `{model_type}` {architectures}; supported: llama, mistral, qwen2"
        )));
    }
    if let Some(act) = config.get("hidden_act").and_then(Value::as_str) {
        if act != "silu" {
            return Err(HfError::Unsupported(format!("hidden_act `{act}`; only silu (SwiGLU) is implemented")));
        }
    }
    for field in ["attention_bias", "mlp_bias"] {
        if model_type != "qwen2" && bool_field(config, field)? == Some(true) {
            return Err(HfError::Unsupported(format!(
                "`{field}: true`: this LLaMA variant has biases the model does not implement"
            )));
        }
    }
    if model_type == "qwen2" && bool_field(config, "use_sliding_window")? == Some(true) {
        return Err(HfError::Unsupported("Qwen2 with `use_sliding_window: true` (sliding-window attention)".into()));
    }

    let d_model = required(config, "hidden_size")?;
    let n_heads = required(config, "num_attention_heads")?;
    if n_heads == 0 || d_model % n_heads != 0 {
        return Err(HfError::config("num_attention_heads", format!("{n_heads} does not divide hidden_size {d_model}")));
    }
    if let Some(head_dim) = usize_field(config, "head_dim")? {
        if head_dim != d_model / n_heads {
            return Err(HfError::Unsupported(format!(
                "head_dim {head_dim} differs from hidden_size / num_attention_heads = {}",
                d_model / n_heads
            )));
        }
    }
    // transformers 5 moves rope_theta and the scaling into `rope_parameters`.
    let (rope_theta, rope_scaling) = match config.get("rope_parameters").and_then(Value::as_object) {
        Some(params) => (f64_field(params, "rope_theta")?, parse_rope_scaling("rope_parameters", params)?),
        None => {
            let scaling = match config.get("rope_scaling") {
                None | Some(Value::Null) => None,
                Some(Value::Object(params)) => parse_rope_scaling("rope_scaling", params)?,
                Some(other) => {
                    return Err(HfError::config("rope_scaling", format!("must be an object or null, got {other}")))
                }
            };
            (f64_field(config, "rope_theta")?, scaling)
        }
    };
    let mut max_seq_len = usize_field(config, "max_position_embeddings")?.unwrap_or(2048);
    // Mistral's sliding window equals full attention up to the window: sequences are limited to it.
    if model_type == "mistral" {
        if let Some(window) = usize_field(config, "sliding_window")? {
            max_seq_len = max_seq_len.min(window);
        }
    }
    let norm_scheme = match config.get(SCHEME_KEY) {
        None | Some(Value::Null) => NormScheme::PreLn,
        Some(entry) => entry
            .get("norm_scheme")
            .and_then(Value::as_str)
            .ok_or_else(|| HfError::config(SCHEME_KEY, "must hold a `norm_scheme` string"))?
            .parse::<NormScheme>()?,
    };
    let mut model = LlamaConfig::new(
        d_model,
        required(config, "intermediate_size")?,
        required(config, "num_hidden_layers")?,
        n_heads,
    )
    .with_n_kv_heads(Some(usize_field(config, "num_key_value_heads")?.unwrap_or(n_heads)))
    .with_vocab_size(required(config, "vocab_size")?)
    .with_rope_theta(rope_theta.unwrap_or(10_000.0))
    .with_rope_scaling(rope_scaling)
    .with_norm_eps(f64_field(config, "rms_norm_eps")?.unwrap_or(1e-6))
    .with_max_seq_len(max_seq_len)
    .with_tie_embeddings(bool_field(config, "tie_word_embeddings")?.unwrap_or(false))
    .with_qkv_bias(model_type == "qwen2")
    .with_norm_kind(NormKind::RmsNorm)
    .with_norm_scheme(norm_scheme);
    if let Some(std) = f64_field(config, "initializer_range")? {
        model = model.with_init_std(std).with_embed_init_std(std);
    }
    model.validate()?;
    Ok(model)
}

/// The `config.json` of `config` for transformers (`LlamaForCausalLM`, or `Qwen2ForCausalLM` when
/// the model has q/k/v biases); a scheme other than Pre-LN is recorded under [`SCHEME_KEY`].
pub fn hf_config_json(config: &LlamaConfig) -> Result<Value, HfError> {
    if config.norm_kind != NormKind::RmsNorm {
        return Err(HfError::Unsupported(
            "exporting a LayerNorm model: the LLaMA family in transformers uses RMSNorm".into(),
        ));
    }
    let (model_type, architecture) =
        if config.qkv_bias { ("qwen2", "Qwen2ForCausalLM") } else { ("llama", "LlamaForCausalLM") };
    let rope_scaling = match &config.rope_scaling {
        None => Value::Null,
        Some(RopeScaling::Linear { factor }) => json!({"rope_type": "linear", "factor": factor}),
        Some(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }) => {
            json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            })
        }
    };
    let mut json = json!({
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.kv_heads(),
        "head_dim": config.head_dim(),
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": rope_scaling,
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": "silu",
        "initializer_range": config.init_std,
        "torch_dtype": "float32",
    });
    if model_type == "llama" {
        json["attention_bias"] = json!(false);
        json["mlp_bias"] = json!(false);
    } else {
        json["use_sliding_window"] = json!(false);
    }
    if config.norm_scheme != NormScheme::PreLn {
        json[SCHEME_KEY] = json!({
            "norm_scheme": config.norm_scheme.to_string(),
            "folded_into_weights": true,
            "note": "the scheme's depth factors are multiplied into the norm and output-projection weights, so transformers computes the same function; the layernorm-scaling crate divides them out on load",
        });
    }
    Ok(json)
}
