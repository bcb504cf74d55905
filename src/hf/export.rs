//! Writing a model as a Hugging Face directory that transformers loads.

use std::path::Path;

use burn_store::{ModuleSnapshot, SafetensorsStore};

use super::config::hf_config_json;
use super::layout::{export_adapter, NameMap};
use super::{HfError, Unsupported};
use crate::io::check_replaceable_dir;
use crate::{model::Llama, model::LlamaConfig};

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
    export_hf_from(model, config, dir, tokenizer, None)
}

/// The keys of a source `config.json` that [`export_hf_from`] keeps: its special tokens and
/// generation settings, which the model's own config does not hold.
const KEPT_FROM_SOURCE: [&str; 6] =
    ["bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache"];

/// [`export_hf`] of a model that came from the Hugging Face directory `source` (a retrofit):
/// the keys of its `config.json` that hold special tokens and generation settings
/// (`bos_token_id`, `eos_token_id`, `pad_token_id`, `use_cache`, ...) are kept, and its `generation_config.json`
/// is copied, so that transformers' `generate` still stops at the end-of-sequence token.
pub fn export_hf_from(
    model: &Llama,
    config: &LlamaConfig,
    dir: impl AsRef<Path>,
    tokenizer: Option<&Path>,
    source: Option<&Path>,
) -> Result<(), HfError> {
    let dir = dir.as_ref();
    if model.n_layers() != config.n_layers || model.lm_head.is_none() != config.tie_embeddings {
        return Err(Unsupported::NotThisConfig.into());
    }
    // An earlier export (it lists its files in `.contents`) is replaced; any other folder with
    // files, a downloaded model among them, is not.
    check_replaceable_dir(dir, "config.json")
        .map_err(|error| HfError::NotReplaceable { dir: dir.to_path_buf(), error })?;
    // Norm kinds and schemes transformers cannot express are refused here, before anything is
    // written; the error names the model's scheme.
    let mut json = hf_config_json(config)?;
    if let Some(source) = source {
        let original = super::json_file::read_json(&source.join("config.json"))?;
        if let (Some(ours), Some(theirs)) = (json.as_object_mut(), original.as_object()) {
            // Only the keys of tokens and generation: the architecture is the retrofitted model's.
            for key in KEPT_FROM_SOURCE {
                if let Some(value) = theirs.get(key).filter(|_| !ours.contains_key(key)) {
                    ours.insert(key.to_string(), value.clone());
                }
            }
        }
    }
    let generation_config = source.map(|source| source.join("generation_config.json")).filter(|p| p.is_file());
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
        let copies = tokenizer.map(|path| (path, "tokenizer.json")).into_iter();
        for (path, name) in copies.chain(generation_config.as_deref().map(|path| (path, "generation_config.json"))) {
            std::fs::copy(path, tmp.join(name))
                .map_err(|e| std::io::Error::other(format!("cannot copy {}: {e}", path.display())))?;
        }
        Ok(())
    })
    .map_err(|error| HfError::Io { path: dir.to_path_buf(), error })
}
