//! Loading a Hugging Face model directory (`config.json`, safetensors weights, `tokenizer.json`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::tensor::{Device, Tensor, TensorData};

use super::config::read_hf_config;
use super::layout::{block_key, folded_factors, set_linear, set_norm};
use super::weights::Checkpoint;
use super::HfError;
#[cfg(feature = "data")]
use crate::data::Tokenizer;
use crate::{Llama, LlamaConfig};

/// A model loaded from a Hugging Face directory.
#[derive(Debug)]
pub struct HfModel {
    /// The model, with the weights of the checkpoint.
    pub model: Llama,
    /// Its config, from `config.json` (Pre-LN unless the directory records another scheme).
    pub config: LlamaConfig,
    /// The directory's `tokenizer.json`, when it has one.
    pub tokenizer: Option<PathBuf>,
}

impl HfModel {
    /// The directory's tokenizer; an error naming the directory when it has none.
    #[cfg(feature = "data")]
    pub fn tokenizer(&self) -> Result<Tokenizer, HfError> {
        let path = self.tokenizer.as_ref().ok_or_else(|| {
            HfError::Unsupported("the model directory has no tokenizer.json; give token ids instead of text".into())
        })?;
        Tokenizer::from_spec(&path.display().to_string()).map_err(|e| HfError::file(path, e))
    }
}

/// Checks the `config.json` fields that size the model against the checkpoint's tensor headers,
/// before anything is allocated: a config that is not the checkpoint's own (say `hidden_size`
/// 100000000) is an error naming the field and what the checkpoint holds, not an abort.
fn check_sizes(config: &LlamaConfig, checkpoint: &Checkpoint) -> Result<(), HfError> {
    let not_its_own = |field: &str, value: usize, found: String| {
        HfError::config(field, format!("is {value}, but {found}; is config.json the checkpoint's own?"))
    };
    let layers = checkpoint.keys().into_iter().filter_map(layer_index).max().map_or(0, |last| last + 1);
    if layers != config.n_layers {
        return Err(not_its_own("num_hidden_layers", config.n_layers, format!("the checkpoint holds {layers} layers")));
    }
    let (d, head_dim) = (config.d_model, config.head_dim());
    // Each tensor's dimensions: the field that sizes it, the field's value, and the size of one unit.
    let tensors = [
        ("model.embed_tokens.weight".to_string(), [("vocab_size", config.vocab_size, 1), ("hidden_size", d, 1)]),
        (block_key(0, "mlp.gate_proj.weight"), [("intermediate_size", config.d_ff, 1), ("hidden_size", d, 1)]),
        (
            block_key(0, "self_attn.k_proj.weight"),
            [("num_key_value_heads", config.kv_heads(), head_dim), ("hidden_size", d, 1)],
        ),
    ];
    for (key, dims) in tensors {
        let found = checkpoint.shape(&key)?;
        let expected: Vec<usize> = dims.iter().map(|&(_, value, unit)| value * unit).collect();
        if found.len() != expected.len() {
            return Err(HfError::Shape { key, expected, found });
        }
        for ((&(field, value, unit), want), &size) in dims.iter().zip(&expected).zip(&found) {
            if *want != size {
                let what = format!("tensor `{key}` has shape {found:?}, not {expected:?} ({field} {})", size / unit);
                return Err(not_its_own(field, value, what));
            }
        }
    }
    Ok(())
}

/// The block index of a tensor name `model.layers.<index>.…`.
fn layer_index(key: &str) -> Option<usize> {
    key.strip_prefix("model.layers.")?.split('.').next()?.parse().ok()
}

/// Loads `dir` onto `device`: every tensor is checked against `config.json` (name, shape) and
/// converted to f32; tensors the architecture does not use are an error.
pub fn load_hf_model(dir: &Path, device: &Device) -> Result<HfModel, HfError> {
    let config = read_hf_config(dir)?;
    let checkpoint = Checkpoint::open(dir)?;
    check_sizes(&config, &checkpoint)?;
    let mut model = config.init(device)?;
    let (d, d_ff, vocab) = (config.d_model, config.d_ff, config.vocab_size);
    let kv = config.kv_heads() * config.head_dim();
    let mut used: HashSet<String> = HashSet::new();
    let mut take = |key: String, shape: &[usize]| {
        let values = checkpoint.tensor(&key, shape);
        used.insert(key);
        values
    };

    let embed = take("model.embed_tokens.weight".into(), &[vocab, d])?;
    model.embed_tokens.weight = Param::from_tensor(Tensor::from_data(TensorData::new(embed, [vocab, d]), device));
    for (i, block) in model.layers.iter_mut().enumerate() {
        // An exported LNS model holds the factors multiplied in; dividing restores the weights.
        let [attn_norm, ffn_norm, attn_out, ffn_out] = folded_factors(block)?.map(|f| 1.0 / f);
        let key = |name: &str| block_key(i, name);
        set_norm(&mut block.attn_norm, take(key("input_layernorm.weight"), &[d])?, attn_norm, device)?;
        set_norm(&mut block.ffn_norm, take(key("post_attention_layernorm.weight"), &[d])?, ffn_norm, device)?;
        let attn = &mut block.self_attn;
        for (name, linear, out) in
            [("q_proj", &mut attn.q_proj, d), ("k_proj", &mut attn.k_proj, kv), ("v_proj", &mut attn.v_proj, kv)]
        {
            let weight = take(key(&format!("self_attn.{name}.weight")), &[out, d])?;
            let bias = if config.qkv_bias { Some(take(key(&format!("self_attn.{name}.bias")), &[out])?) } else { None };
            set_linear(linear, weight, bias, 1.0, device);
        }
        set_linear(&mut attn.o_proj, take(key("self_attn.o_proj.weight"), &[d, d])?, None, attn_out, device);
        let mlp = &mut block.mlp;
        set_linear(&mut mlp.gate_proj, take(key("mlp.gate_proj.weight"), &[d_ff, d])?, None, 1.0, device);
        set_linear(&mut mlp.up_proj, take(key("mlp.up_proj.weight"), &[d_ff, d])?, None, 1.0, device);
        set_linear(&mut mlp.down_proj, take(key("mlp.down_proj.weight"), &[d, d_ff])?, None, ffn_out, device);
    }
    set_norm(&mut model.norm, take("model.norm.weight".into(), &[d])?, 1.0, device)?;
    if let Some(head) = &mut model.lm_head {
        set_linear(head, take("lm_head.weight".into(), &[vocab, d])?, None, 1.0, device);
    }
    // A tied model may still store the head; rotary buffers of old checkpoints are recomputed.
    let unexpected: Vec<&str> = checkpoint
        .keys()
        .into_iter()
        .filter(|key| !used.contains(*key) && !key.ends_with("rotary_emb.inv_freq"))
        .filter(|key| !(config.tie_embeddings && *key == "lm_head.weight"))
        .collect();
    if let Some(key) = unexpected.first() {
        return Err(HfError::Unsupported(format!(
            "the checkpoint has {} tensor(s) this architecture does not use, e.g. `{key}`; is config.json the checkpoint's own?",
            unexpected.len()
        )));
    }
    let tokenizer = Some(dir.join("tokenizer.json")).filter(|p| p.is_file());
    Ok(HfModel { model, config, tokenizer })
}
