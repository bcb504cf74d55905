//! The first phase of a run: every setting, the devices and the data checked and prepared
//! (the data tokenised into the cache, `init_from` loaded) before the run directory is touched.

use std::path::Path;
use std::sync::Arc;

use burn::tensor::Device;

use super::config::TrainConfig;
use super::events::{Events, TrainEvent};
use super::memory_estimate::{RunShape, TrainingMemory};
use crate::data::{
    corpus_files, tokenize_corpus_with_progress, train_valid_datasets, CorpusSource, DataError, SequenceDataset,
    SequenceMode, SplitProblem, TokenCache, TokenizeProgress, Tokenizer, WholeCorpusProblem,
};
use crate::memory::{format_bytes, memory_limit, uses_host_memory};
use crate::memory_problem::MemoryProblem;
use crate::model::Llama;
use crate::run::{load_model_dir, read_model_dir_config, read_model_info, resolve_dir, RunModelInfo};
use crate::run_dir_error::RunDirError;
use crate::{
    config_error::ConfigError, device::parse_devices, device::set_precision, error::Error, model::LlamaConfig,
};

/// The model config a training config asks for: the preset or file of `model`, with `layers`
/// and `norm` applied when set (or the shape of `init_from`, retrofitted to `norm`).
pub fn model_config(config: &TrainConfig) -> Result<LlamaConfig, Error> {
    model_config_from(config, None)
}

/// The model config of a training (`resumed` or not): [`model_config`], except that a resumed
/// run that started from `init_from` takes the shape its own `model.json` records (then
/// `norm`, when set): its weights are in its checkpoints, so the source is never read. It may be
/// gone since, or be the run itself (`--init-from X --out X --overwrite`).
pub(super) fn start_model_config(config: &TrainConfig, resumed: bool) -> Result<LlamaConfig, Error> {
    let recorded =
        (resumed && config.model.init_from.is_some()).then(|| read_model_info(&config.output.out).ok()).flatten();
    model_config_from(config, recorded.map(|info| info.model))
}

/// [`model_config`], with the shape of `init_from` given as `source` (read from it when `None`).
fn model_config_from(config: &TrainConfig, source_shape: Option<LlamaConfig>) -> Result<LlamaConfig, Error> {
    let path = Path::new(&config.model.preset);
    let mut model = if let Some(source) = &config.model.init_from {
        if let Some(layers) = config.model.layers {
            return Err(ConfigError::Conflict(format!(
                "`layers` ({layers}) cannot change the depth of the model of `init_from` ({}); leave --layers unset",
                source.display()
            ))
            .into());
        }
        if let Some(init) = config.model.init {
            return Err(ConfigError::Conflict(format!(
                "`init` ({init}) cannot apply to the weights of `init_from` ({}), which are loaded, not drawn; \
                 leave --init unset",
                source.display()
            ))
            .into());
        }
        let loaded = match source_shape {
            Some(shape) => shape,
            None => read_model_dir_config(source)?,
        };
        match &config.model.norm {
            Some(norm) => crate::model::retrofit_config(&loaded, norm.clone()),
            None => loaded,
        }
    } else if config.model.preset.ends_with(".json") || (path.exists() && !path.is_dir()) {
        LlamaConfig::from_file(path)?
    } else {
        LlamaConfig::preset(&config.model.preset)?
    };
    if let Some(layers) = config.model.layers {
        model.n_layers = layers;
    }
    if let Some(norm) = &config.model.norm {
        model.norm_scheme = norm.clone();
    }
    if let Some(init) = config.model.init {
        // `normal` is what an unset init means: recorded as unset (unless it replaces a model
        // file's own init), so a run with `--init normal` is the run without it.
        let normal = init == crate::norm::InitScheme::Normal;
        model.init = (!normal || model.init.is_some()).then_some(init);
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
    pub train: Arc<SequenceDataset>,
    pub valid: Arc<SequenceDataset>,
    /// The data's content fingerprint.
    pub data: String,
    /// The weights of `init_from`, retrofitted to the run's scheme, on the main training device:
    /// read before the run directory is touched, so a run may replace the one it starts from.
    pub init: Option<Llama>,
    /// The folder `init_from` names (a model of the Hugging Face cache by name resolved to its
    /// snapshot), recorded in `train.json`.
    pub init_dir: Option<std::path::PathBuf>,
}

/// An error when training `model` as `config` says cannot fit in the memory left to the process
/// (checked when a device allocates in the machine's memory): a failed allocation would abort the
/// process, and the kernel's OOM killer would end it without a word. Made before the data is
/// tokenised; [`check_run_memory`] checks again with the data loader's index.
pub(crate) fn check_step_memory(
    config: &TrainConfig,
    model: &LlamaConfig,
    devices: &[Device],
) -> Result<(), ConfigError> {
    check_run_memory(config, model, devices, |memory| memory)
}

/// [`check_step_memory`], with the estimate completed by `complete` (the data's index added).
fn check_run_memory(
    config: &TrainConfig,
    model: &LlamaConfig,
    devices: &[Device],
    complete: impl Fn(TrainingMemory) -> TrainingMemory,
) -> Result<(), ConfigError> {
    let Some(limit) = memory_limit().filter(|_| devices.iter().any(uses_host_memory)) else {
        return Ok(());
    };
    let shape = RunShape {
        precision: config.training_precision(),
        batch_size: config.optim.batch_size,
        seq_len: config.data.seq_len,
        grad_accum: config.optim.grad_accum,
        devices: devices.len(),
    };
    let memory = complete(TrainingMemory::new(model, shape));
    if limit.admits(memory.peak()) {
        return Ok(());
    }
    let beyond = limit.describe();
    // The model is named first when no batch can make it fit: one sequence of one token.
    let least = complete(TrainingMemory::new(model, RunShape { batch_size: 1, seq_len: 1, ..shape }));
    if !limit.admits(least.peak()) {
        return Err(ConfigError::TooLarge(Box::new(MemoryProblem::Training {
            model: model.sizes(),
            precision: shape.precision.to_string(),
            needed: least.peak(),
            breakdown: least.breakdown(),
            limit: beyond,
        })));
    }
    Err(ConfigError::Conflict(format!(
        "`batch_size` ({}) x `seq_len` ({}){} does not fit in memory: training needs about {} at its peak ({}), \
         but {beyond}; lower --batch-size and raise --grad-accum to keep the tokens per step, or shorten --seq-len",
        config.optim.batch_size,
        config.data.seq_len,
        if devices.len() > 1 { format!(" on {} devices", devices.len()) } else { String::new() },
        format_bytes(memory.peak()),
        memory.breakdown(),
    )))
}

impl Prepared {
    /// What the run directory records about the model (`model.json`) after `steps` steps.
    pub fn model_info(&self, config: &TrainConfig, steps: usize) -> RunModelInfo {
        RunModelInfo {
            model: self.model.clone(),
            tokenizer: config.data.tokenizer.clone(),
            steps,
            data: Some(self.data.clone()),
            tokenizer_identity: Some(self.tokenizer.identity()),
        }
    }
}

/// An error unless the run's sequences fit the model's positions (`seq_len <= max_seq_len`): the
/// model's own check, with what to do.
pub fn check_seq_len(config: &TrainConfig, model: &LlamaConfig) -> Result<(), Error> {
    Ok(model.check_seq_len(config.data.seq_len, "`seq_len`", "lower --seq-len")?)
}

/// Checks every setting, the devices and the data (tokenising it into the cache) without
/// touching the run directory. How the data's cache was made is reported to `events`. A
/// `resumed` run loads no `init_from` weights (its checkpoints hold its own).
pub(super) fn prepare(config: &TrainConfig, resumed: bool, events: &Events) -> Result<Prepared, Error> {
    config.validate()?;
    let model = start_model_config(config, resumed)?;
    let tokenizer = Tokenizer::from_spec(&config.data.tokenizer)?;
    if let Err(error) = tokenizer.check_fits(model.vocab_size) {
        // The model of `init_from` has its vocabulary: its own tokenizer is the fix, not the model.
        return Err(match &config.model.init_from {
            Some(source) => ConfigError::Conflict(format!(
                "the tokenizer `{}` has {} tokens but the model of --init-from ({}) has a vocabulary of {}; give \
                 that model's tokenizer with --tokenizer{}",
                config.data.tokenizer,
                tokenizer.base_vocab_size(),
                source.display(),
                model.vocab_size,
                match resolve_dir(source).map(|dir| dir.join("tokenizer.json")) {
                    Ok(file) if file.is_file() => format!(" {}", file.display()),
                    _ => " PATH (the model directory has no tokenizer.json: give the one it was trained with)".into(),
                }
            ))
            .into(),
            None => error.into(),
        });
    }
    check_seq_len(config, &model)?;
    let mut devices = parse_devices(&config.device)?;
    for device in &mut devices {
        set_precision(device, config.training_precision())?;
        device.seed(config.seed);
    }
    check_step_memory(config, &model, &devices)?;
    let RunData { train, valid, warnings, fingerprint: data, documents } =
        datasets(config, &tokenizer, model.vocab_size, &mut |progress| events.send(TrainEvent::Tokenizing(progress)))?;
    // Again with the data loader's index, known now, before the model is allocated.
    let sequences = burn::data::dataset::Dataset::len(&train) as u64;
    check_run_memory(config, &model, &devices, |memory| memory.with_data(documents, sequences))?;
    for warning in warnings {
        events.warn(warning);
    }
    // A model of the Hugging Face cache by name: its snapshot folder, which train.json records.
    // A resumed run's weights come from its checkpoints: its source, as recorded, is not read.
    let init_dir = match &config.model.init_from {
        Some(source) if resumed => Some(source.clone()),
        source => source.as_deref().map(resolve_dir).transpose()?,
    };
    let init = match init_dir.as_ref().filter(|_| !resumed) {
        Some(source) => {
            // A run's checkpoints are for resuming it: --init-from reads its final model.
            if let Some(problem) =
                source.join(crate::run::MODEL_INFO).is_file().then(|| crate::run::missing_final_model(source)).flatten()
            {
                return Err(Error::run_dir(source, RunDirError::NoFinalModel { problem: Box::new(problem) }));
            }
            let loaded = load_model_dir(source, None, &devices[0].clone().autodiff())?;
            // Its weights come in the run's float type, whatever the source's: `--precision` holds.
            let trained_in = devices[0].settings().float_dtype;
            if let Some(saved) = loaded.saved_dtype.filter(|&saved| saved != trained_in.into()) {
                let name = |dtype: String| dtype.to_lowercase();
                events.send(TrainEvent::Note(format!(
                    "the weights of {} are stored in {}; they are cast to {}, the float type of --precision {}",
                    source.display(),
                    name(format!("{saved:?}")),
                    name(format!("{trained_in:?}")),
                    config.training_precision().name()
                )));
            }
            // NaN weights were refused by `load_model_dir`: training from them would only diverge.
            Some(crate::model::retrofit(loaded.model, &loaded.config, model.norm_scheme.clone())?.0)
        }
        None => None,
    };
    Ok(Prepared { model, tokenizer, devices, train: Arc::new(train), valid: Arc::new(valid), data, init, init_dir })
}

/// The validation sequences a run of `config` evaluates on (its held-out documents or its
/// `valid_data`, limited to `valid_tokens`), for measuring its model afterwards. The caches'
/// warnings are not repeated: the run gave them.
pub fn validation_data(config: &TrainConfig) -> Result<SequenceDataset, Error> {
    let tokenizer = Tokenizer::from_spec(&config.data.tokenizer)?;
    Ok(datasets(config, &tokenizer, model_config(config)?.vocab_size, &mut |_| {})?.valid)
}

/// A run's training and validation sequences, what their caches warned of, and the data's
/// content fingerprint.
struct RunData {
    train: SequenceDataset,
    valid: SequenceDataset,
    warnings: Vec<String>,
    fingerprint: String,
    /// Documents in the token caches read (the training corpus's, and the validation corpus's).
    documents: u64,
}

/// The training and validation sequences of `config`'s corpora, tokenised (through the token
/// cache): the validation documents are `valid_data`'s, or those the data seed holds out of
/// `data`. A token id of `vocab_size` or more is an error.
fn datasets(
    config: &TrainConfig,
    tokenizer: &Tokenizer,
    vocab_size: usize,
    progress: &mut dyn FnMut(TokenizeProgress),
) -> Result<RunData, Error> {
    let source = if config.data.files.is_empty() {
        CorpusSource::Builtin { n_docs: config.data.builtin_docs, seed: config.data.data_seed() }
    } else {
        CorpusSource::Files { paths: config.data.files.clone(), text_field: config.data.text_field.clone() }
    };
    if !config.eval.valid_data.is_empty() {
        check_disjoint(&config.data.files, &config.eval.valid_data)?;
    }
    let out = &config.output.out;
    // Beside the run directory (never inside it: `--out .` must stay a run of ours only).
    let cache_root = match &config.data.cache_dir {
        Some(dir) => dir.clone(),
        None => {
            let absolute = out.canonicalize().or_else(|_| std::path::absolute(out)).unwrap_or_else(|_| out.clone());
            absolute.parent().unwrap_or(Path::new("/")).join(".token-cache")
        }
    };
    let mut tokenize = |source: &CorpusSource| -> Result<Arc<TokenCache>, DataError> {
        let cache = tokenize_corpus_with_progress(source, tokenizer, &cache_root, progress)?;
        cache.check_vocabulary(tokenizer, vocab_size)?;
        Ok(Arc::new(cache))
    };
    let cache = tokenize(&source)?;
    let mut documents = cache.n_docs() as u64;
    let mut warnings = cache.warnings().to_vec();
    let mut fingerprint = cache.content_fingerprint();
    let (train, valid) = if config.eval.valid_data.is_empty() {
        train_valid_datasets(
            cache,
            config.data.seq_len,
            config.eval.valid_fraction,
            config.data.data_seed(),
            config.data.sequences,
        )?
    } else {
        let valid_source =
            CorpusSource::Files { paths: config.eval.valid_data.clone(), text_field: config.data.text_field.clone() };
        let valid_cache = tokenize(&valid_source).map_err(|e| DataError::Validation(Box::new(e)))?;
        warnings.extend(valid_cache.warnings().iter().map(|w| format!("validation data: {w}")));
        fingerprint = format!("{fingerprint}+valid={}", valid_cache.content_fingerprint());
        documents += valid_cache.n_docs() as u64;
        let every_document = |cache: Arc<TokenCache>| {
            let docs: Vec<usize> = (0..cache.n_docs()).collect();
            SequenceDataset::with_mode(cache, &docs, config.data.seq_len, config.data.sequences)
        };
        let (train, valid) = (every_document(cache), every_document(valid_cache));
        check_not_empty(&train, "the training corpus (--data)")?;
        check_not_empty(&valid, "the validation corpus (--valid-data)")?;
        (train, valid)
    };
    let valid = match config.eval.valid_tokens {
        Some(tokens) => valid.holding_targets(tokens)?,
        None => valid,
    };
    Ok(RunData { train, valid, warnings, fingerprint, documents })
}

/// An error when `dataset` (of the corpus `what` names) holds no sequence.
fn check_not_empty(dataset: &SequenceDataset, what: &'static str) -> Result<(), DataError> {
    use burn::data::dataset::Dataset;
    if dataset.is_empty() {
        let short = match dataset.mode() {
            SequenceMode::Pack => format!("fewer than one sequence of {} + 1", dataset.seq_len()),
            SequenceMode::Truncate => "no document of two tokens or more".into(),
        };
        return Err(DataError::Split(SplitProblem::CorpusTooShort { what, tokens: dataset.n_tokens(), short }));
    }
    Ok(())
}

/// An error when a validation corpus shares a file with the training corpus: by path (the same
/// file, however named) or by content (a copy: same size and CRC-32).
fn check_disjoint(data: &[std::path::PathBuf], valid_data: &[std::path::PathBuf]) -> Result<(), DataError> {
    // Each file with its canonical path and size, found once.
    let described = |paths: &[std::path::PathBuf]| -> Result<Vec<_>, DataError> {
        Ok(corpus_files(paths)?
            .files
            .into_iter()
            .map(|file| {
                let real = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
                let size = std::fs::metadata(&file).map(|m| m.len()).ok();
                (file, real, size)
            })
            .collect())
    };
    let train = described(data)?;
    for (v, v_real, v_size) in described(valid_data)? {
        for (t, t_real, t_size) in &train {
            let linked = v_real == *t_real;
            let copied = !linked
                && v_size == *t_size
                && crate::io::file_crc32(&v).ok().is_some_and(|sum| crate::io::file_crc32(t).ok() == Some(sum));
            if linked || copied {
                let overlap = WholeCorpusProblem::ValidationOverlaps { valid: v, train: t.clone(), copy: !linked };
                return Err(DataError::Whole(overlap));
            }
        }
    }
    Ok(())
}
