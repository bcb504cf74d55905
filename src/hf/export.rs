//! Writing a model as a Hugging Face directory that transformers loads.

use std::path::Path;

use burn_store::{ModuleSnapshot, SafetensorsStore};

use super::config::hf_config_json;
use super::layout::{export_adapter, NameMap};
use super::HfError;
use crate::io::check_replaceable_dir;
use crate::{Llama, LlamaConfig};

/// Writes `config.json` and `model.safetensors` (f32) of `model`, plus a copy of `tokenizer`
/// when given, into the new directory `dir` (which appears whole or not at all).
///
/// The scheme's depth factors are multiplied into the weights (see
/// [`folded_factors`](super::folded_factors)), so transformers' `LlamaForCausalLM` computes what
/// the model computes, LNS included; `config.json` records the scheme for [`load_hf_model`](super::load_hf_model).
/// A model a LLaMA checkpoint cannot express (a LayerNorm or DyT norm; Post-LN, DeepNorm, Mix-LN,
/// Sandwich-LN, Peri-LN, LayerScale, SkipInit, LNS before the norm) is refused with an error
/// naming its scheme; such a model is saved in the crate's own format instead.
pub fn export_hf(
    model: &Llama,
    config: &LlamaConfig,
    dir: impl AsRef<Path>,
    tokenizer: Option<&Path>,
) -> Result<(), HfError> {
    let dir = dir.as_ref();
    if model.n_layers() != config.n_layers || model.lm_head.is_none() != config.tie_embeddings {
        return Err(HfError::Unsupported("the model was not built from this config".into()));
    }
    // An earlier export (it lists its files in `.contents`) is replaced; any other folder with
    // files, a downloaded model among them, is not.
    check_replaceable_dir(dir, "config.json").map_err(|e| HfError::file(dir, e))?;
    // Norm kinds and schemes transformers cannot express are refused here, before anything is
    // written; the error names the model's scheme.
    let json = hf_config_json(config)?;
    let adapter = export_adapter(model)?;
    crate::io::write_dir_atomically(dir, "config.json", |tmp| {
        let text = serde_json::to_string_pretty(&json).map_err(std::io::Error::other)?;
        std::fs::write(tmp.join("config.json"), format!("{text}\n"))?;
        // Module paths renamed by the name map, enum variants (`Norm::RmsNorm`) left out of them,
        // and only the `format` entry transformers checks in the metadata.
        let mut store = SafetensorsStore::from_file(tmp.join("model.safetensors"))
            .clear_metadata()
            .metadata("format", "pt")
            .skip_enum_variants(true)
            .remap(NameMap::new().to_hf)
            .with_to_adapter(adapter);
        model.save_into(&mut store).map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some(path) = tokenizer {
            std::fs::copy(path, tmp.join("tokenizer.json"))
                .map_err(|e| std::io::Error::other(format!("cannot copy {}: {e}", path.display())))?;
        }
        Ok(())
    })
    .map_err(|e| HfError::file(dir, e))
}
