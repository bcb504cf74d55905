//! The first phase of a run: every setting, the devices and the data checked and prepared
//! (the data tokenised into the cache, `init_from` loaded) before the run directory is touched.

use std::path::Path;
use std::sync::Arc;

use burn::tensor::Device;

use super::config::TrainConfig;
use super::events::Events;
use crate::data::{tokenize_corpus, train_valid_datasets, CorpusSource, PackedDataset, TokenCache, Tokenizer};
use crate::memory::{available_memory_bytes, format_bytes, uses_host_memory};
use crate::model::Llama;
use crate::run::{load_model_dir, read_model_dir_config, RunModelInfo};
use crate::{parse_devices, set_precision, ConfigError, Error, LlamaConfig, Precision};

/// The model config a training config asks for: the preset or file of `model`, with `layers`
/// and `norm` applied when set (or the shape of `init_from`, retrofitted to `norm`).
pub fn model_config(config: &TrainConfig) -> Result<LlamaConfig, Error> {
    let path = Path::new(&config.model);
    let mut model = if let Some(source) = &config.init_from {
        if let Some(layers) = config.layers {
            return Err(ConfigError::Conflict(format!(
                "`layers` ({layers}) cannot change the depth of the model of `init_from` ({}); leave --layers unset",
                source.display()
            ))
            .into());
        }
        read_model_dir_config(source)?
    } else if config.model.ends_with(".json") || path.is_file() {
        LlamaConfig::from_file(path)?
    } else {
        LlamaConfig::preset(&config.model)?
    };
    if let Some(layers) = config.layers {
        model.n_layers = layers;
    }
    if let Some(norm) = &config.norm {
        model.norm_scheme = norm.clone();
    }
    model.validate()?;
    Ok(model)
}

/// Everything checked and prepared before the run directory is touched.
pub(super) struct Prepared {
    pub model: LlamaConfig,
    pub tokenizer: Tokenizer,
    /// The training devices; the first is the main one.
    pub devices: Vec<Device>,
    pub train: Arc<PackedDataset>,
    pub valid: Arc<PackedDataset>,
    /// The data's content fingerprint.
    pub data: String,
    /// The weights of `init_from`, retrofitted to the run's scheme, on the main training device:
    /// read before the run directory is touched, so a run may replace the one it starts from.
    pub init: Option<Llama>,
}

/// Bytes a training step needs at least, activations only: the logits with their softmax and
/// gradient (`3 B T V`), and per layer the saved activations (`~16 B T d`) and attention scores
/// (`2 B h T^2`), all f32.
fn step_bytes_lower_bound(model: &LlamaConfig, batch: usize, seq: usize) -> f64 {
    let (b, t) = (batch as f64, seq as f64);
    let per_layer = 16.0 * b * t * model.d_model as f64 + 2.0 * b * model.n_heads as f64 * t * t;
    4.0 * (3.0 * b * t * model.vocab_size as f64 + model.n_layers as f64 * per_layer)
}

/// An error when the model's training state or a step of `batch_size` sequences cannot fit in the
/// machine's memory (checked on devices that use it): a failed allocation would abort the process.
pub(crate) fn check_step_memory(
    config: &TrainConfig,
    model: &LlamaConfig,
    devices: &[Device],
) -> Result<(), ConfigError> {
    let Some(available) = available_memory_bytes().filter(|_| devices.iter().any(uses_host_memory)) else {
        return Ok(());
    };
    // The weights, their gradients and Adam's two moments: the model is named first, since no
    // batch size can make a model that does not fit.
    model.check_fits(16, available)?;
    let batch = config.batch_size.max(config.batch_size * devices.len());
    let needed = step_bytes_lower_bound(model, batch, config.seq_len);
    if needed > available as f64 {
        return Err(ConfigError::Conflict(format!(
            "`batch_size` ({}) x `seq_len` ({}) needs at least {} for one training step's activations, but the \
             machine has {} available; lower --batch-size and raise --grad-accum to keep the tokens per step",
            config.batch_size,
            config.seq_len,
            format_bytes(needed.min(u64::MAX as f64) as u64),
            format_bytes(available)
        )));
    }
    Ok(())
}

impl Prepared {
    /// What the run directory records about the model (`model.json`) after `steps` steps.
    pub fn model_info(&self, config: &TrainConfig, steps: usize) -> RunModelInfo {
        RunModelInfo {
            model: self.model.clone(),
            tokenizer: config.tokenizer.clone(),
            steps,
            data: Some(self.data.clone()),
            tokenizer_identity: Some(self.tokenizer.identity()),
        }
    }
}

/// An error unless the run's sequences fit the model's positions (`seq_len <= max_seq_len`).
pub fn check_seq_len(config: &TrainConfig, model: &LlamaConfig) -> Result<(), Error> {
    if config.seq_len > model.max_seq_len {
        return Err(ConfigError::Conflict(format!(
            "`seq_len` ({}) is longer than the model's `max_seq_len` ({}); lower --seq-len",
            config.seq_len, model.max_seq_len
        ))
        .into());
    }
    Ok(())
}

/// Checks every setting, the devices and the data (tokenising it into the cache) without
/// touching the run directory. How the data's cache was made is reported to `events`.
pub(super) fn prepare(config: &TrainConfig, events: &Events) -> Result<Prepared, Error> {
    config.validate()?;
    let model = model_config(config)?;
    let tokenizer = Tokenizer::from_spec(&config.tokenizer)?;
    tokenizer.check_fits(model.vocab_size)?;
    check_seq_len(config, &model)?;
    let mut devices = parse_devices(&config.device)?;
    for device in &mut devices {
        if config.bf16 {
            set_precision(device, Precision::Bf16)?;
        }
        device.seed(config.seed);
    }
    check_step_memory(config, &model, &devices)?;
    let (train, valid, cache) = datasets(config, &tokenizer, model.vocab_size)?;
    for warning in cache.warnings() {
        events.warn(warning.clone());
    }
    let data = cache.content_fingerprint();
    let init = match &config.init_from {
        Some(source) => {
            let loaded = load_model_dir(source, None, &devices[0].clone().autodiff())?;
            Some(crate::model::retrofit(loaded.model, &loaded.config, model.norm_scheme.clone())?.0)
        }
        None => None,
    };
    Ok(Prepared { model, tokenizer, devices, train: Arc::new(train), valid: Arc::new(valid), data, init })
}

/// The validation windows a run of `config` evaluates on (its held-out documents), for measuring
/// its model afterwards. The cache's warnings are not repeated: the run gave them.
pub fn validation_data(config: &TrainConfig) -> Result<PackedDataset, Error> {
    let tokenizer = Tokenizer::from_spec(&config.tokenizer)?;
    Ok(datasets(config, &tokenizer, model_config(config)?.vocab_size)?.1)
}

/// The training and validation windows of `config`'s corpus, tokenised (through the token cache),
/// and the cache they are read from. A token id of `vocab_size` or more is an error.
fn datasets(
    config: &TrainConfig,
    tokenizer: &Tokenizer,
    vocab_size: usize,
) -> Result<(PackedDataset, PackedDataset, Arc<TokenCache>), Error> {
    let source = if config.data.is_empty() {
        CorpusSource::Builtin { n_docs: config.builtin_docs, seed: config.data_seed() }
    } else {
        CorpusSource::Files { paths: config.data.clone(), text_field: config.text_field.clone() }
    };
    let out = &config.out;
    // Beside the run directory (never inside it: `--out .` must stay a run of ours only).
    let cache_root = match &config.cache_dir {
        Some(dir) => dir.clone(),
        None => {
            let absolute = out.canonicalize().or_else(|_| std::path::absolute(out)).unwrap_or_else(|_| out.clone());
            absolute.parent().unwrap_or(Path::new("/")).join(".token-cache")
        }
    };
    let cache = Arc::new(tokenize_corpus(&source, tokenizer, &cache_root)?);
    cache.check_vocabulary(tokenizer, vocab_size)?;
    let (train, valid) =
        train_valid_datasets(cache.clone(), config.seq_len, config.valid_fraction, config.data_seed())?;
    Ok((train, valid, cache))
}
