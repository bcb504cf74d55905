//! Why a Hugging Face model directory cannot be loaded or written. A leaf of its own beside
//! `config_error.rs`, outside `hf/`, so that the crate's [`Error`](crate::error::Error), which wraps it,
//! does not depend on the interop module, which uses the model, which returns `Error`.
//!
//! Each problem is a variant carrying its facts (the file, the field, the tensor, the values), so
//! a program matches it; the advice to the user is written once, in its message.

use std::path::PathBuf;

use crate::config_error::ConfigError;
use crate::norm::NormScheme;

mod cache_miss;
mod export_problem;
mod field_problem;
mod scoring_problem;
mod unsupported;

pub use cache_miss::CacheMiss;
pub use export_problem::{BlockPart, ExportProblem};
pub use field_problem::FieldProblem;
pub use scoring_problem::ScoringProblem;
pub use unsupported::Unsupported;

/// An error of the Hugging Face interop, naming the folder, file, field or tensor at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HfError {
    /// The model folder does not exist (and is not a model of the local Hugging Face cache).
    #[error(
        "{}: no such folder: give a Hugging Face model folder (config.json and safetensors), or a model of the local \
         Hugging Face cache by name (org/name, org/name@revision)",
        .dir.display()
    )]
    NoSuchFolder {
        /// The folder given.
        dir: PathBuf,
    },
    /// A model name ending in `@` with no revision after it.
    #[error("{name}@: no revision after `@`: give {name}@BRANCH, {name}@TAG or {name}@COMMIT, or {name} alone")]
    NoRevision {
        /// The model name (`org/name`).
        name: String,
    },
    /// A revision that would leave the cache's `refs/` folder (`org/name@../x`).
    #[error("{spec}: `{revision}` is not a revision: give a branch, a tag or a commit hash after `@`")]
    NotARevision {
        /// What was given (`org/name@revision`).
        spec: String,
        /// The revision.
        revision: String,
    },
    /// A model name with no folder of that name and no snapshot in the local Hugging Face cache.
    #[error(
        "{spec}: no such folder, and no snapshot of the model {name}{} in the local Hugging Face cache ({miss}); \
         download it first (`huggingface-cli download {name}{}`), or give the model's folder: nothing is downloaded \
         here",
        .revision.as_ref().map(|r| format!(" at revision {r}")).unwrap_or_default(),
        .revision.as_ref().map(|r| format!(" --revision {r}")).unwrap_or_default()
    )]
    NotInCache {
        /// What was given (`org/name` or `org/name@revision`).
        spec: String,
        /// The model name (`org/name`).
        name: String,
        /// The revision, when one was given.
        revision: Option<String>,
        /// Where the cache was looked in, and what was missing.
        miss: Box<CacheMiss>,
    },
    /// A file or folder that cannot be read or written.
    #[error("{}: {error}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        error: std::io::Error,
    },
    /// A JSON file (`config.json`, the shard index) that is not valid JSON.
    #[error("{}: not valid JSON: {error}", .path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        error: String,
    },
    /// A safetensors file that cannot be parsed: truncated, or not safetensors at all.
    #[error("{}: not a valid safetensors file (truncated or corrupt?): {error}", .path.display())]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        error: String,
    },
    /// A model folder with no weights file.
    #[error("{}: holds neither model.safetensors nor model.safetensors.index.json", .dir.display())]
    NoWeights {
        /// The folder.
        dir: PathBuf,
    },
    /// A weights file that is a link to nothing: a download of the Hugging Face cache left unfinished.
    #[error(
        "{}: is a link to a file that is not there ({error}): its download is missing or incomplete; download the \
         model again",
        .path.display()
    )]
    BrokenLink {
        /// The link.
        path: PathBuf,
        /// The system's error following it.
        error: std::io::Error,
    },
    /// A shard index whose `weight_map` is not a map of tensor names to file names.
    #[error("{}: {}", .path.display(), match .key { None => "has no `weight_map` object".to_string(), Some(key) => format!("`{key}` maps to a non-string") })]
    BadShardIndex {
        /// The index file.
        path: PathBuf,
        /// The entry that maps to something other than a file name; `None` without a `weight_map`.
        key: Option<String>,
    },
    /// A tensor whose data cannot be read or converted to f32.
    #[error("{}: tensor `{key}` cannot be read: {error}", .path.display())]
    BadTensorData {
        /// The model folder or weights file.
        path: PathBuf,
        /// The tensor name.
        key: String,
        /// What failed.
        error: String,
    },
    /// A safetensors file burn-store cannot read for another reason than its format (a tensor
    /// type it does not know, such as FP8).
    #[error("{}: {error}", .path.display())]
    CannotRead {
        /// The file.
        path: PathBuf,
        /// burn-store's message.
        error: String,
    },
    /// Tensors that cannot be serialized into a safetensors file (a shape that does not match
    /// the values given).
    #[error("{}: {error}", .path.display())]
    CannotWrite {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: String,
    },
    /// Checked tensors that burn-store still could not load into the model.
    #[error("{}: {error}", .dir.display())]
    Apply {
        /// The model folder.
        dir: PathBuf,
        /// burn-store's message.
        error: String,
    },
    /// A folder export would write into that holds files of someone else's.
    #[error("{}: {error}", .dir.display())]
    NotReplaceable {
        /// The folder.
        dir: PathBuf,
        /// Why it is not replaced, and what to do.
        error: std::io::Error,
    },
    /// A model folder with no `tokenizer.json`, where text must be encoded.
    #[error("unsupported: the model directory has no tokenizer.json; give token ids instead of text")]
    NoTokenizer,
    /// The model folder's `tokenizer.json` cannot be used.
    #[cfg(feature = "data")]
    #[error("{0}")]
    Tokenizer(Box<crate::data::DataError>),
    /// A `config.json` field that is missing or has a bad value.
    #[error("config.json: field `{field}` {problem}")]
    Config {
        /// The field (`(root)` for the whole file).
        field: String,
        /// What is wrong with it.
        problem: FieldProblem,
    },
    /// A value of `config.json` the model cannot take, found when the model config read from it is
    /// checked; shown with the keys of `config.json` (`rms_norm_eps`, not the model's `norm_eps`).
    #[error("config.json: {}", named_by_hf_keys(.0))]
    ConfigValue(ConfigError),
    /// An architecture or feature this crate does not implement.
    #[error("unsupported: {0}")]
    Unsupported(Unsupported),
    /// A model that no Hugging Face LLaMA checkpoint can express: export refuses it.
    #[error(
        "unsupported: {}{problem}; the model itself is sound: it stays usable in this crate's own format (a run \
         directory's model.bpk, which train --init-from, generate and analyze read)",
        .scheme.as_ref().map(|s| format!("exporting a `{s}` model: ")).unwrap_or_default()
    )]
    NotExportable {
        /// The model's scheme, when the whole config was checked.
        scheme: Option<NormScheme>,
        /// What the checkpoint cannot express.
        problem: ExportProblem,
    },
    /// A tensor the config needs is not in the checkpoint.
    #[error("tensor `{key}` is missing from the checkpoint in {dir}")]
    MissingTensor {
        /// The tensor name.
        key: String,
        /// The model directory.
        dir: String,
    },
    /// A tensor's shape disagrees with `config.json`.
    #[error("tensor `{key}` has shape {found:?}, but config.json implies {expected:?}")]
    Shape {
        /// The tensor name.
        key: String,
        /// The shape `config.json` implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor of a type that cannot be converted to f32.
    #[error("tensor `{key}` has dtype {dtype}; only F32, F16 and BF16 weights are supported")]
    DType {
        /// The tensor name.
        key: String,
        /// Its dtype.
        dtype: String,
    },
    /// Tensors of the checkpoint the architecture has no place for.
    #[error(
        "unsupported: the checkpoint has {count} tensor(s) {} does not use, e.g. `{example}`; is config.json the \
         checkpoint's own?",
        if *.bert { "a BERT masked LM" } else { "this architecture" }
    )]
    UnusedTensors {
        /// How many.
        count: usize,
        /// The first, by name.
        example: String,
        /// Whether the architecture is the BERT encoder (else the LLaMA decoder).
        bert: bool,
    },
    /// A parameter of the model that no tensor of the checkpoint was loaded into.
    #[error("unsupported: no tensor of the checkpoint was applied to `{parameter}`")]
    NotApplied {
        /// The model's parameter, by its path in the model.
        parameter: String,
    },
    /// Sequences the masked-LM scorer cannot score.
    #[error("pseudo-perplexity: {0}")]
    Scoring(ScoringProblem),
    /// A setting of the crate's own that the model refuses (a `norm_scheme` name recorded in
    /// `config.json`, a layer number given to the scorer), in the model's terms.
    #[error("{0}")]
    Model(#[from] ConfigError),
    /// A weight of the checkpoint holds NaN or infinity (a damaged download, or a model saved
    /// after it diverged).
    #[error(
        "the weight `{parameter}` holds NaN or infinite values: the weights are damaged; download the model again"
    )]
    NonFinite {
        /// The first such tensor, by its checkpoint key (`model.layers.3.mlp.down_proj.weight`)
        /// where the loader knows it, else by the model's path.
        parameter: String,
    },
}

/// `config.json`'s key for each field of the model config that `parse_hf_config` fills from it.
const HF_KEYS: [(&str, &str); 11] = [
    ("d_model", "hidden_size"),
    ("d_ff", "intermediate_size"),
    ("n_layers", "num_hidden_layers"),
    ("n_heads", "num_attention_heads"),
    ("n_kv_heads", "num_key_value_heads"),
    ("vocab_size", "vocab_size"),
    ("max_seq_len", "max_position_embeddings"),
    ("rope_theta", "rope_theta"),
    ("norm_eps", "rms_norm_eps"),
    ("init_std", "initializer_range"),
    ("embed_init_std", "initializer_range"),
];

/// `error`'s message with each model field named by its key in `config.json`, so the user finds
/// what to fix.
fn named_by_hf_keys(error: &ConfigError) -> String {
    HF_KEYS.iter().fold(error.to_string(), |text, (ours, key)| text.replace(&format!("`{ours}`"), &format!("`{key}`")))
}

impl HfError {
    pub(crate) fn config(field: &str, problem: FieldProblem) -> Self {
        HfError::Config { field: field.to_string(), problem }
    }

    /// [`HfError::NonFinite`] for the first non-finite weight of a loaded model, if it has one
    /// ([`first_non_finite_parameter`](crate::model::first_non_finite_parameter)).
    pub(crate) fn check_finite(first_non_finite: Option<String>) -> Result<(), Self> {
        match first_non_finite {
            Some(parameter) => Err(HfError::NonFinite { parameter }),
            None => Ok(()),
        }
    }
}

impl From<Unsupported> for HfError {
    fn from(unsupported: Unsupported) -> Self {
        HfError::Unsupported(unsupported)
    }
}
