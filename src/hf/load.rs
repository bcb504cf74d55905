//! Loading a Hugging Face model directory (`config.json`, safetensors weights, `tokenizer.json`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use burn_store::ModuleSnapshot;

use super::config::read_hf_config;
use super::layout::{hf_shapes, load_adapter, NameMap};
use super::weights::Checkpoint;
use super::{FieldProblem, HfError};
#[cfg(feature = "data")]
use crate::data::Tokenizer;
use crate::{model::Llama, model::LlamaConfig};

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
        let path = self.tokenizer.as_ref().ok_or(HfError::NoTokenizer)?;
        Tokenizer::from_spec(&path.display().to_string()).map_err(|e| HfError::Tokenizer(Box::new(e)))
    }
}

/// Checks the `config.json` fields that size the model against the checkpoint's tensor headers,
/// before anything is allocated: a config that is not the checkpoint's own (say `hidden_size`
/// 100000000) is an error naming the field and what the checkpoint holds, not an abort.
fn check_sizes(config: &LlamaConfig, checkpoint: &Checkpoint) -> Result<(), HfError> {
    let not_its_own = |field: &str, value: usize, found: String| {
        HfError::config(field, FieldProblem::ContradictsCheckpoint { value, found })
    };
    let layers = checkpoint.keys().into_iter().filter_map(layer_index).max().map_or(0, |last| last + 1);
    if layers != config.n_layers {
        return Err(not_its_own("num_hidden_layers", config.n_layers, format!("the checkpoint holds {layers} layers")));
    }
    let (d, head_dim) = (config.d_model, config.head_dim());
    // Each tensor's dimensions: the field that sizes it, the field's value, and the size of one unit.
    let tensors = [
        ("model.embed_tokens.weight".to_string(), [("vocab_size", config.vocab_size, 1), ("hidden_size", d, 1)]),
        (
            "model.layers.0.mlp.gate_proj.weight".to_string(),
            [("intermediate_size", config.d_ff, 1), ("hidden_size", d, 1)],
        ),
        (
            "model.layers.0.self_attn.k_proj.weight".to_string(),
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

/// Loads `dir` (or the model of the local Hugging Face cache it names, `org/name[@revision]`:
/// [`resolve_model_dir`](super::resolve_model_dir)) onto `device`: every tensor is checked against `config.json` (name, shape, type)
/// and converted to f32; tensors the architecture does not use, and weights holding NaN or
/// infinity, are errors.
///
/// The weights go in through burn-store: a name map renames them, its PyTorch adapter turns
/// `[out, in]` weights around, and the depth factors an exported LNS model holds are divided out.
pub fn load_hf_model(dir: impl AsRef<Path>, device: &Device) -> Result<HfModel, HfError> {
    let resolved = super::resolve_model_dir(dir.as_ref())?;
    let dir = resolved.as_path();
    if !dir.is_dir() {
        return Err(HfError::NoSuchFolder { dir: dir.to_path_buf() });
    }
    let config = read_hf_config(dir)?;
    let checkpoint = Checkpoint::open(dir)?;
    check_sizes(&config, &checkpoint)?;
    let mut model = config.init(device)?;
    let adapter = load_adapter(&model, device)?;

    // Every tensor the model has, by the name and shape export would give it: all of them are
    // checked before any is read.
    let names = NameMap::new();
    let mut tensors = Vec::new();
    for (key, shape) in hf_shapes(&model, &names) {
        tensors.push(checkpoint.checked(&key, &shape)?.clone());
    }
    // A tied model may still store the head; rotary buffers of old checkpoints are recomputed.
    let used: HashSet<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let unexpected: Vec<&str> = checkpoint
        .keys()
        .into_iter()
        .filter(|key| !used.contains(key) && !key.ends_with("rotary_emb.inv_freq"))
        .filter(|key| !(config.tie_embeddings && *key == "lm_head.weight"))
        .collect();
    if let Some(key) = unexpected.first() {
        return Err(HfError::UnusedTensors { count: unexpected.len(), example: key.to_string(), bert: false });
    }

    let (tensors, renamed) = names.to_burn.remap(tensors);
    let result = model.apply(tensors, None, Some(Box::new(adapter)), true);
    // Names and shapes were checked above: what is left is a tensor whose data cannot be read.
    if let Some(error) = result.errors.first() {
        return Err(HfError::Apply { dir: dir.to_path_buf(), error: error.to_string() });
    }
    if let Some((path, _)) = result.missing.first() {
        return Err(HfError::NotApplied { parameter: path.clone() });
    }
    // Generation, analysis or training from it would give NaN with exit 0. Named by its key in
    // the checkpoint, as the user's tools show it.
    let as_in_checkpoint =
        |path: String| renamed.iter().find(|(burn, _)| *burn == path).map_or(path, |(_, key)| key.clone());
    HfError::check_finite(crate::model::first_non_finite_parameter(&model).map(as_in_checkpoint))?;
    let tokenizer = Some(dir.join("tokenizer.json")).filter(|p| p.is_file());
    Ok(HfModel { model, config, tokenizer })
}
