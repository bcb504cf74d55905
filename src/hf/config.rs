//! `config.json` of the LLaMA family (LLaMA, Mistral, Qwen2) to and from [`LlamaConfig`].
//!
//! Both layouts transformers writes are read: 4.x (`rope_theta`, `rope_scaling`) and 5.x
//! (`rope_parameters`). A model exported under a scheme other than Pre-LN records it in a
//! `layernorm_scaling` entry, which transformers ignores and [`parse_hf_config`] restores.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::json_file::read_json;
use super::layout::plan_problem;
use super::{ExportProblem, FieldProblem, HfError, Unsupported};
use crate::model::RopeScaling;
use crate::{model::LlamaConfig, norm::NormKind, norm::NormScheme};

/// The key under which an exported model records its normalisation scheme.
pub const SCHEME_KEY: &str = "layernorm_scaling";

/// The entries of `config.json` this crate reads or writes; any other entry is ignored. On read
/// an absent or `null` entry is `None`; on write `None` is left out, except `rope_scaling`
/// (written `null`, as transformers does).
#[derive(Debug, Default, Serialize, Deserialize)]
struct HfConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    vocab_size: Option<usize>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    /// transformers 4.x; 5.x moves it into `rope_parameters`.
    rope_theta: Option<f64>,
    /// transformers 4.x.
    rope_scaling: Option<RopeParams>,
    /// transformers 5.x: `rope_theta` and the scaling.
    #[serde(skip_serializing_if = "Option::is_none")]
    rope_parameters: Option<RopeParams>,
    tie_word_embeddings: Option<bool>,
    hidden_act: Option<String>,
    initializer_range: Option<f64>,
    torch_dtype: Option<String>,
    /// LLaMA and Mistral only.
    #[serde(skip_serializing_if = "Option::is_none")]
    attention_bias: Option<bool>,
    /// LLaMA and Mistral only.
    #[serde(skip_serializing_if = "Option::is_none")]
    mlp_bias: Option<bool>,
    /// Qwen2 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    use_sliding_window: Option<bool>,
    /// Mistral: attention reaches this far back.
    #[serde(skip_serializing_if = "Option::is_none")]
    sliding_window: Option<usize>,
    /// [`SCHEME_KEY`]: the scheme of a model exported by this crate.
    #[serde(skip_serializing_if = "Option::is_none")]
    layernorm_scaling: Option<SchemeEntry>,
}

/// A `rope_scaling` (4.x) or `rope_parameters` (5.x) object.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RopeParams {
    rope_type: Option<String>,
    /// The older name of `rope_type`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    legacy_type: Option<String>,
    /// 5.x only.
    #[serde(skip_serializing_if = "Option::is_none")]
    rope_theta: Option<f64>,
    factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    low_freq_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    high_freq_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_max_position_embeddings: Option<usize>,
}

/// The [`SCHEME_KEY`] entry.
#[derive(Debug, Serialize, Deserialize)]
struct SchemeEntry {
    norm_scheme: Option<String>,
    folded_into_weights: Option<bool>,
    note: Option<String>,
}

/// `value`, or an error naming `field` as missing.
fn required<T>(field: &str, value: Option<T>) -> Result<T, HfError> {
    value.ok_or_else(|| HfError::config(field, FieldProblem::Missing))
}

impl HfConfig {
    fn from_json(json: &Value) -> Result<Self, HfError> {
        let config = json.as_object().ok_or_else(|| HfError::config("(root)", FieldProblem::NotAnObject))?;
        Self::deserialize(json).map_err(|error| {
            // serde says what is wrong but not where: the field is the entry that fails on its own.
            let fails_alone = |(key, value): &(&String, &Value)| {
                Self::deserialize(&Value::Object(Map::from_iter([((*key).clone(), (*value).clone())]))).is_err()
            };
            let field = config.iter().find(fails_alone).map_or("(root)", |(key, _)| key.as_str());
            HfError::config(field, FieldProblem::BadValue(error.to_string()))
        })
    }
}

impl RopeParams {
    /// The scaling these parameters describe (`field` names them in errors).
    fn scaling(&self, field: &str) -> Result<Option<RopeScaling>, HfError> {
        let kind = self.rope_type.as_deref().or(self.legacy_type.as_deref()).unwrap_or("default");
        let number = |key: &str, value: Option<f64>| required(&format!("{field}.{key}"), value);
        match kind {
            "default" => Ok(None),
            "linear" => Ok(Some(RopeScaling::Linear { factor: number("factor", self.factor)? })),
            "llama3" => Ok(Some(RopeScaling::Llama3 {
                factor: number("factor", self.factor)?,
                low_freq_factor: number("low_freq_factor", self.low_freq_factor)?,
                high_freq_factor: number("high_freq_factor", self.high_freq_factor)?,
                original_max_position_embeddings: required(
                    &format!("{field}.original_max_position_embeddings"),
                    self.original_max_position_embeddings,
                )?,
            })),
            other => Err(Unsupported::RopeType { field: field.to_string(), kind: other.to_string() }.into()),
        }
    }

    fn of(scaling: &RopeScaling) -> Self {
        match *scaling {
            RopeScaling::Linear { factor } => {
                RopeParams { rope_type: Some("linear".into()), factor: Some(factor), ..Default::default() }
            }
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                RopeParams {
                    rope_type: Some("llama3".into()),
                    factor: Some(factor),
                    low_freq_factor: Some(low_freq_factor),
                    high_freq_factor: Some(high_freq_factor),
                    original_max_position_embeddings: Some(original_max_position_embeddings),
                    ..Default::default()
                }
            }
        }
    }
}

/// Reads `dir/config.json`.
pub fn read_hf_config(dir: impl AsRef<Path>) -> Result<LlamaConfig, HfError> {
    parse_hf_config(&read_json(&dir.as_ref().join("config.json"))?)
}

/// A [`LlamaConfig`] from a parsed `config.json`.
pub fn parse_hf_config(json: &Value) -> Result<LlamaConfig, HfError> {
    if super::bert::describes_bert(json) {
        return Err(Unsupported::BertAsDecoder.into());
    }
    let config = HfConfig::from_json(json)?;
    let model_type = config.model_type.as_deref().unwrap_or("");
    if !["llama", "mistral", "qwen2"].contains(&model_type) {
        let architectures =
            config.architectures.as_ref().map(|a| Value::from(a.clone()).to_string()).unwrap_or_default();
        return Err(Unsupported::ModelType { model_type: model_type.to_string(), architectures }.into());
    }
    if let Some(act) = config.hidden_act.as_deref().filter(|act| *act != "silu") {
        return Err(Unsupported::Activation(act.to_string()).into());
    }
    for (field, value) in [("attention_bias", config.attention_bias), ("mlp_bias", config.mlp_bias)] {
        if model_type != "qwen2" && value == Some(true) {
            return Err(Unsupported::Bias(field.to_string()).into());
        }
    }
    if model_type == "qwen2" && config.use_sliding_window == Some(true) {
        return Err(Unsupported::SlidingWindow.into());
    }

    let d_model = required("hidden_size", config.hidden_size)?;
    let n_heads = required("num_attention_heads", config.num_attention_heads)?;
    if n_heads == 0 || d_model % n_heads != 0 {
        return Err(HfError::config(
            "num_attention_heads",
            FieldProblem::HeadsDoNotDivide { heads: n_heads, hidden: d_model },
        ));
    }
    if let Some(head_dim) = config.head_dim.filter(|&head_dim| head_dim != d_model / n_heads) {
        return Err(Unsupported::HeadDim { head_dim, implied: d_model / n_heads }.into());
    }
    // transformers 5 moves rope_theta and the scaling into `rope_parameters`.
    let (rope_theta, rope_scaling) = match &config.rope_parameters {
        Some(params) => (params.rope_theta, params.scaling("rope_parameters")?),
        None => {
            let scaling = config.rope_scaling.as_ref().map(|params| params.scaling("rope_scaling")).transpose()?;
            (config.rope_theta, scaling.flatten())
        }
    };
    let mut max_seq_len = config.max_position_embeddings.unwrap_or(2048);
    // Mistral's sliding window equals full attention up to the window: sequences are limited to it.
    if model_type == "mistral" {
        if let Some(window) = config.sliding_window {
            max_seq_len = max_seq_len.min(window);
        }
    }
    let norm_scheme = match &config.layernorm_scaling {
        None => NormScheme::PreLn,
        Some(entry) => entry
            .norm_scheme
            .as_deref()
            .ok_or_else(|| HfError::config(SCHEME_KEY, FieldProblem::NoSchemeName))?
            .parse::<NormScheme>()?,
    };
    let mut model = LlamaConfig::new(
        d_model,
        required("intermediate_size", config.intermediate_size)?,
        required("num_hidden_layers", config.num_hidden_layers)?,
        n_heads,
    )
    .with_n_kv_heads(Some(config.num_key_value_heads.unwrap_or(n_heads)))
    .with_vocab_size(required("vocab_size", config.vocab_size)?)
    .with_rope_theta(rope_theta.unwrap_or(10_000.0))
    .with_rope_scaling(rope_scaling)
    .with_norm_eps(config.rms_norm_eps.unwrap_or(1e-6))
    .with_max_seq_len(max_seq_len)
    .with_tie_embeddings(config.tie_word_embeddings.unwrap_or(false))
    .with_qkv_bias(model_type == "qwen2")
    .with_norm_kind(NormKind::RmsNorm)
    .with_norm_scheme(norm_scheme);
    if let Some(std) = config.initializer_range {
        model = model.with_init_std(std).with_embed_init_std(std);
    }
    model.validate().map_err(HfError::ConfigValue)?;
    Ok(model)
}

/// The `config.json` of `config` for transformers (`LlamaForCausalLM`, or `Qwen2ForCausalLM` when
/// the model has q/k/v biases); a scheme other than Pre-LN is recorded under [`SCHEME_KEY`]. A
/// norm kind or scheme a LLaMA checkpoint cannot express is an error naming the scheme.
pub fn hf_config_json(config: &LlamaConfig) -> Result<Value, HfError> {
    if let Some(problem) = llama_checkpoint_problem(config)? {
        return Err(HfError::NotExportable { scheme: Some(config.norm_scheme.clone()), problem });
    }
    let (model_type, architecture) =
        if config.qkv_bias { ("qwen2", "Qwen2ForCausalLM") } else { ("llama", "LlamaForCausalLM") };
    let llama = model_type == "llama";
    let scheme = (config.norm_scheme != NormScheme::PreLn).then(|| SchemeEntry {
        norm_scheme: Some(config.norm_scheme.to_string()),
        folded_into_weights: Some(true),
        note: Some("the scheme's depth factors are multiplied into the norm and output-projection weights, so transformers computes the same function; the layernorm-scaling crate divides them out on load".into()),
    });
    let hf = HfConfig {
        architectures: Some(vec![architecture.into()]),
        model_type: Some(model_type.into()),
        hidden_size: Some(config.d_model),
        intermediate_size: Some(config.d_ff),
        num_hidden_layers: Some(config.n_layers),
        num_attention_heads: Some(config.n_heads),
        num_key_value_heads: Some(config.kv_heads()),
        head_dim: Some(config.head_dim()),
        vocab_size: Some(config.vocab_size),
        max_position_embeddings: Some(config.max_seq_len),
        rms_norm_eps: Some(config.norm_eps),
        rope_theta: Some(config.rope_theta),
        rope_scaling: config.rope_scaling.as_ref().map(RopeParams::of),
        rope_parameters: None,
        tie_word_embeddings: Some(config.tie_embeddings),
        hidden_act: Some("silu".into()),
        initializer_range: Some(config.init_std),
        torch_dtype: Some("float32".into()),
        attention_bias: llama.then_some(false),
        mlp_bias: llama.then_some(false),
        use_sliding_window: (!llama).then_some(false),
        sliding_window: None,
        layernorm_scaling: scheme,
    };
    serde_json::to_value(hf).map_err(|e| HfError::CannotWrite { path: "config.json".into(), error: e.to_string() })
}

/// Why a Hugging Face LLaMA checkpoint cannot express a model of `config`, `None` when it can:
/// its norm kind must be RMSNorm and every layer's plan foldable into the weights.
pub fn llama_checkpoint_problem(config: &LlamaConfig) -> Result<Option<ExportProblem>, HfError> {
    if config.norm_kind != NormKind::RmsNorm {
        return Ok(Some(ExportProblem::NormKind(config.norm_kind)));
    }
    for layer in 1..=config.n_layers {
        if let Some(problem) = plan_problem(&config.norm_scheme.plan(layer, config.n_layers, config.init_std)?) {
            return Ok(Some(problem));
        }
    }
    Ok(None)
}
