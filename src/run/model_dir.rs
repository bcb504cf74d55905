//! A model from a directory of either kind: a run directory of the train example, or a Hugging
//! Face model directory (`config.json`, safetensors).

use std::path::{Path, PathBuf};

use burn::tensor::Device;

use super::load_diagnosis::found_instead;
use super::model_info::{invalid_model_info, read_model_info, ModelInfoError};
use super::run_model::load_run_model_as_saved;
use crate::load_problem::{ModelDirProblem, TokenizerChoice};
use crate::model::{cast_weights_to_device, Llama};
use crate::{error::Error, model::LlamaConfig};

/// A model loaded from a directory of either kind, with its config and tokenizer spec.
#[derive(Debug)]
pub struct LoadedModel {
    /// The model.
    pub model: Llama,
    /// Its config.
    pub config: LlamaConfig,
    /// The tokenizer spec (`byte` or a `tokenizer.json` path); `None` for a Hugging Face
    /// directory without a `tokenizer.json`.
    pub tokenizer: Option<String>,
    /// The identity of the tokenizer a run trained with
    /// ([`RunModelInfo::tokenizer_identity`](super::RunModelInfo::tokenizer_identity)).
    pub tokenizer_identity: Option<String>,
    /// The float type a run's model file holds its weights in (bf16 for a pure-bf16 run), before
    /// they were cast to the device's float type; `None` for a Hugging Face directory, whose
    /// tensors are converted as they are read.
    pub saved_dtype: Option<burn::tensor::DType>,
}

impl LoadedModel {
    /// The model's tokenizer, or the one at `given` (a `--tokenizer` option) instead; an error
    /// when there is none ([`tokenizer_spec`]) or it has more tokens than the model.
    #[cfg(feature = "data")]
    pub fn tokenizer(&self, given: Option<&Path>) -> Result<crate::data::Tokenizer, Error> {
        let byte_fits = crate::data::Tokenizer::Byte.base_vocab_size() <= self.config.vocab_size;
        if self.tokenizer.is_none() && given.is_none() && !byte_fits {
            // The byte tokenizer would be refused next: not advised.
            return Err(TokenizerChoice::NoneRecorded { vocab_size: Some(self.config.vocab_size) }.into());
        }
        let spec = tokenizer_spec(self.tokenizer.as_deref(), given)?;
        let tokenizer = crate::data::Tokenizer::from_spec(&spec)?;
        check_tokenizer_identity(&tokenizer, &spec, self.tokenizer_identity.as_deref())?;
        // The model's vocabulary is fixed: the fix is its own tokenizer, not another model config.
        if tokenizer.base_vocab_size() > self.config.vocab_size {
            let (tokens, vocab_size, own) =
                (tokenizer.base_vocab_size(), self.config.vocab_size, self.tokenizer.is_some());
            return Err(TokenizerChoice::TooLarge { spec, tokens, vocab_size, own }.into());
        }
        Ok(tokenizer)
    }
}

/// An error unless `tokenizer` (loaded from `spec`) is the one a run `recorded` it trained with
/// (by content; runs that recorded none are not checked).
#[cfg(feature = "data")]
pub fn check_tokenizer_identity(
    tokenizer: &crate::data::Tokenizer,
    spec: &str,
    recorded: Option<&str>,
) -> Result<(), Error> {
    match recorded {
        Some(recorded) if recorded != tokenizer.identity() => Err(TokenizerChoice::NotTheRunsOwn {
            spec: spec.to_string(),
            found: tokenizer.identity(),
            recorded: recorded.to_string(),
        }
        .into()),
        _ => Ok(()),
    }
}

/// The tokenizer spec to load: `given` (a `--tokenizer` option), else the `recorded` one (`byte`
/// or a `tokenizer.json` path). A recorded path is relative to the folder its training ran in:
/// when it is not found from here, or nothing is recorded, the error names `--tokenizer`.
pub fn tokenizer_spec(recorded: Option<&str>, given: Option<&Path>) -> Result<String, Error> {
    if let Some(path) = given {
        return Ok(path.display().to_string());
    }
    let Some(spec) = recorded else {
        return Err(TokenizerChoice::NoneRecorded { vocab_size: None }.into());
    };
    if spec == "byte" || Path::new(spec).is_file() {
        return Ok(spec.to_string());
    }
    let relative = Path::new(spec).is_relative();
    let from = if relative { std::env::current_dir().ok() } else { None };
    Err(TokenizerChoice::NotFound { spec: spec.to_string(), from, relative }.into())
}

/// `dir`, or, when no such path exists and it reads `org/name[@revision]`, the snapshot of that
/// model in the local Hugging Face cache ([`crate::hf::resolve_model_dir`]; offline).
pub fn resolve_dir(dir: &Path) -> Result<PathBuf, Error> {
    #[cfg(feature = "hf")]
    return Ok(crate::hf::resolve_model_dir(dir)?);
    #[cfg(not(feature = "hf"))]
    Ok(dir.to_path_buf())
}

/// Whether `dir` is a Hugging Face model directory (`config.json`) rather than a run directory.
pub fn is_hf_dir(dir: &Path) -> bool {
    dir.join("config.json").is_file()
}

/// `dir` resolved ([`resolve_dir`]: a folder, or a model of the local Hugging Face cache by
/// name), or an error unless it is a Hugging Face model directory: what a program's `--hf-dir`
/// checks before loading, so that a wrong folder is not taken for a run directory.
pub fn require_hf_dir(dir: &Path) -> Result<PathBuf, Error> {
    let resolved = resolve_dir(dir)?;
    if is_hf_dir(&resolved) {
        return Ok(resolved);
    }
    Err(refused(dir, ModelDirProblem::NotHfDir { hides: hidden_cached_model(dir) }))
}

/// The model of the Hugging Face cache (`org/name`) that the local folder `dir` hides by its name
/// (a local folder comes first), if it does.
fn hidden_cached_model(dir: &Path) -> Option<String> {
    #[cfg(feature = "hf")]
    if let Some((name, _)) = dir.to_str().and_then(crate::hf::repo_name).filter(|_| dir.is_dir()) {
        return Some(name.to_string());
    }
    let _ = dir;
    None
}

#[cfg(feature = "hf")]
fn hf_error(dir: &Path, error: crate::hf::HfError) -> Error {
    Error::HfDir { dir: dir.to_path_buf(), error }
}

/// An [`Error::ModelDir`] about `dir`.
fn refused(dir: &Path, problem: ModelDirProblem) -> Error {
    Error::ModelDir { dir: dir.to_path_buf(), problem }
}

#[cfg(feature = "hf")]
fn load_hf_dir(dir: &Path, device: &Device) -> Result<LoadedModel, Error> {
    let hf = crate::hf::load_hf_model(dir, device).map_err(|e| hf_error(dir, e))?;
    let tokenizer = hf.tokenizer.map(|path| path.display().to_string());
    Ok(LoadedModel { model: hf.model, config: hf.config, tokenizer, tokenizer_identity: None, saved_dtype: None })
}

#[cfg(not(feature = "hf"))]
fn load_hf_dir(dir: &Path, _device: &Device) -> Result<LoadedModel, Error> {
    Err(refused(dir, ModelDirProblem::NeedsHfFeature))
}

/// The config of the model in `dir`, a run directory or a Hugging Face directory (or a model of
/// the local Hugging Face cache by name, [`resolve_dir`]), without its weights.
pub fn read_model_dir_config(dir: impl AsRef<Path>) -> Result<LlamaConfig, Error> {
    let resolved = resolve_dir(dir.as_ref())?;
    let dir = resolved.as_path();
    if is_hf_dir(dir) {
        #[cfg(feature = "hf")]
        return crate::hf::read_hf_config(dir).map_err(|e| hf_error(dir, e));
        #[cfg(not(feature = "hf"))]
        return Err(refused(dir, ModelDirProblem::NeedsHfFeature));
    }
    let info = read_model_info(dir).map_err(|e| match e {
        ModelInfoError::Unreadable(e) => {
            // A missing model.json is the message itself; another failure (no permission) is said.
            let (kind, error) = (e.kind(), e.to_string());
            refused(dir, ModelDirProblem::NeitherKind { kind, error, what: found_instead(dir) })
        }
        ModelInfoError::Invalid(e) => invalid_model_info(dir, &e),
    })?;
    Ok(info.model)
}

/// Loads the model of a run directory (the final model, or its checkpoint at optimiser step
/// `step`) or of a Hugging Face model directory (or a model of the local Hugging Face cache by
/// name, [`resolve_dir`]) onto `device`, its weights in the device's float type; a model with
/// non-finite weights is an error.
pub fn load_model_dir(dir: impl AsRef<Path>, step: Option<usize>, device: &Device) -> Result<LoadedModel, Error> {
    let resolved = resolve_dir(dir.as_ref())?;
    let dir = resolved.as_path();
    if !dir.is_dir() {
        let problem = if dir.exists() { ModelDirProblem::NotAFolder } else { ModelDirProblem::NoSuchFolder };
        return Err(refused(dir, problem));
    }
    if is_hf_dir(dir) {
        if step.is_some() {
            return Err(refused(dir, ModelDirProblem::NoHfCheckpoints));
        }
        return load_hf_dir(dir, device);
    }
    let (model, info) = load_run_model_as_saved(dir, step, device)?;
    let saved_dtype = Some(model.embed_tokens.weight.dtype());
    Ok(LoadedModel {
        model: cast_weights_to_device(model, device),
        config: info.model,
        tokenizer: Some(info.tokenizer),
        tokenizer_identity: info.tokenizer_identity,
        saved_dtype,
    })
}
