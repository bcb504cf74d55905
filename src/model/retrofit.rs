//! Retrofitting: switch a model (e.g. a pretrained Pre-LN checkpoint) to another normalisation
//! scheme, LayerNorm Scaling above all, keeping every weight. The counterpart of the PyTorch
//! reference's `apply_cod_mitigation_to_llama(model)`.

use super::{Llama, LlamaConfig};
use crate::norm::Norm;
use crate::{config_error::ConfigError, norm::NormScheme};

/// `model` (built from `config`) under `scheme`: every weight is kept; only what the scheme
/// derives from the layer number changes (LNS's `1/sqrt(l)` factors, DeepNorm's residual scale,
/// Post-LN placement). Parameters the new scheme adds (LayerScale/SkipInit/GPAS gates,
/// Sandwich-LN's and Peri-LN's output norms, Peri-LN's embedding norm) start at the scheme's init;
/// those it drops are discarded.
///
/// Returns the model and its new config.
pub fn retrofit(model: Llama, config: &LlamaConfig, scheme: NormScheme) -> Result<(Llama, LlamaConfig), ConfigError> {
    if model.n_layers() != config.n_layers {
        return Err(ConfigError::Conflict(format!(
            "the model has {} layers but its config says {}; pass the config the model was built from",
            model.n_layers(),
            config.n_layers
        )));
    }
    let device = model.embed_tokens.weight.device();
    let new_config = retrofit_config(config, scheme);
    let mut new = new_config.init(&device)?;
    new.embed_tokens = model.embed_tokens;
    new.lm_head = model.lm_head;
    new.norm = new.norm.with_weights_of(&model.norm)?;
    new.embed_norm = keep_weights(new.embed_norm, &model.embed_norm)?;
    let blocks = std::mem::take(&mut new.layers);
    new.layers = blocks
        .into_iter()
        .zip(model.layers)
        .map(|(mut block, old)| {
            block.self_attn = old.self_attn;
            block.mlp = old.mlp;
            block.attn_norm = block.attn_norm.with_weights_of(&old.attn_norm)?;
            block.ffn_norm = block.ffn_norm.with_weights_of(&old.ffn_norm)?;
            block.attn_out_norm = keep_weights(block.attn_out_norm.take(), &old.attn_out_norm)?;
            block.ffn_out_norm = keep_weights(block.ffn_out_norm.take(), &old.ffn_out_norm)?;
            if block.attn_gate.is_some() && old.attn_gate.is_some() {
                block.attn_gate = old.attn_gate;
            }
            if block.ffn_gate.is_some() && old.ffn_gate.is_some() {
                block.ffn_gate = old.ffn_gate;
            }
            if block.gpas_gate.is_some() && old.gpas_gate.is_some() {
                block.gpas_gate = old.gpas_gate;
            }
            Ok(block)
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    Ok((new, new_config))
}

/// An optional norm of the new model with the weights of the old model's, where both have it.
fn keep_weights(norm: Option<Norm>, old: &Option<Norm>) -> Result<Option<Norm>, ConfigError> {
    match (norm, old) {
        (Some(norm), Some(old)) => Ok(Some(norm.with_weights_of(old)?)),
        (norm, _) => Ok(norm),
    }
}

/// The config of a model of `config` moved to `scheme` with its weights kept: the scheme replaced,
/// and an init the new scheme refuses (DeepNorm, CompleteP and the init-only schemes set their
/// own) dropped, since no weight is drawn.
pub fn retrofit_config(config: &LlamaConfig, scheme: NormScheme) -> LlamaConfig {
    let init = if scheme.sets_init() { None } else { config.init };
    LlamaConfig { norm_scheme: scheme, init, ..config.clone() }
}
