//! Writing a model as a Hugging Face directory that transformers loads.

use std::path::Path;

use serde_json::Value;

use super::config::hf_config_json;
use super::layout::{block_key, folded_factors, host, linear_values, norm_values};
use super::weights::write_safetensors;
use super::HfError;
use crate::{Llama, LlamaConfig};

/// Writes `config.json` and `model.safetensors` (f32) of `model`, plus a copy of `tokenizer`
/// when given, into the new directory `dir` (which appears whole or not at all).
///
/// The scheme's depth factors are multiplied into the weights (see
/// [`folded_factors`](super::folded_factors)), so transformers' `LlamaForCausalLM` computes what
/// the model computes, LNS included; `config.json` records the scheme for [`load_hf_model`](super::load_hf_model).
pub fn export_hf(model: &Llama, config: &LlamaConfig, dir: &Path, tokenizer: Option<&Path>) -> Result<(), HfError> {
    if model.n_layers() != config.n_layers || model.lm_head.is_none() != config.tie_embeddings {
        return Err(HfError::Unsupported("the model was not built from this config".into()));
    }
    if dir.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(HfError::file(dir, "already exists and is not empty; choose a new output directory"));
    }
    let json = hf_config_json(config)?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let [vocab, d] = model.embed_tokens.weight.shape().dims();
    tensors.push((
        "model.embed_tokens.weight".into(),
        vec![vocab, d],
        host(model.embed_tokens.weight.val().flatten(0, 1)),
    ));
    let push_linear = |tensors: &mut Vec<_>, name: String, linear: &burn::nn::Linear, factor: f64| {
        let (shape, weight, bias) = linear_values(linear, factor);
        tensors.push((format!("{name}.weight"), shape.clone(), weight));
        if let Some(bias) = bias {
            tensors.push((format!("{name}.bias"), vec![shape[0]], bias));
        }
    };
    for (i, block) in model.layers.iter().enumerate() {
        let [attn_norm, ffn_norm, attn_out, ffn_out] = folded_factors(block)?;
        tensors.push((block_key(i, "input_layernorm.weight"), vec![d], norm_values(&block.attn_norm, attn_norm)?));
        tensors.push((
            block_key(i, "post_attention_layernorm.weight"),
            vec![d],
            norm_values(&block.ffn_norm, ffn_norm)?,
        ));
        let attn = &block.self_attn;
        push_linear(&mut tensors, block_key(i, "self_attn.q_proj"), &attn.q_proj, 1.0);
        push_linear(&mut tensors, block_key(i, "self_attn.k_proj"), &attn.k_proj, 1.0);
        push_linear(&mut tensors, block_key(i, "self_attn.v_proj"), &attn.v_proj, 1.0);
        push_linear(&mut tensors, block_key(i, "self_attn.o_proj"), &attn.o_proj, attn_out);
        push_linear(&mut tensors, block_key(i, "mlp.gate_proj"), &block.mlp.gate_proj, 1.0);
        push_linear(&mut tensors, block_key(i, "mlp.up_proj"), &block.mlp.up_proj, 1.0);
        push_linear(&mut tensors, block_key(i, "mlp.down_proj"), &block.mlp.down_proj, ffn_out);
    }
    tensors.push(("model.norm.weight".into(), vec![d], norm_values(&model.norm, 1.0)?));
    if let Some(head) = &model.lm_head {
        push_linear(&mut tensors, "lm_head".into(), head, 1.0);
    }
    write_directory(dir, &json, &tensors, tokenizer)
}

fn write_directory(
    dir: &Path,
    json: &Value,
    tensors: &[(String, Vec<usize>, Vec<f32>)],
    tokenizer: Option<&Path>,
) -> Result<(), HfError> {
    crate::io::write_dir_atomically(dir, "config.json", |tmp| {
        let text = serde_json::to_string_pretty(json).map_err(std::io::Error::other)?;
        std::fs::write(tmp.join("config.json"), format!("{text}\n"))?;
        write_safetensors(&tmp.join("model.safetensors"), tensors).map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some(path) = tokenizer {
            std::fs::copy(path, tmp.join("tokenizer.json"))
                .map_err(|e| std::io::Error::other(format!("cannot copy {}: {e}", path.display())))?;
        }
        Ok(())
    })
    .map_err(|e| HfError::file(dir, e))
}
