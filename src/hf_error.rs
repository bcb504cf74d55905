//! Why a Hugging Face model directory cannot be loaded or written. A leaf of its own beside
//! `config_error.rs`, outside `hf/`, so that the crate's [`Error`](crate::error::Error), which wraps it,
//! does not depend on the interop module, which uses the model, which returns `Error`.

use crate::config_error::ConfigError;

/// An error of the Hugging Face interop, naming the file, field or tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    /// A file cannot be read or written, or is not what it should be.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A `config.json` field is missing or has a bad value.
    #[error("config.json: field `{field}` {message}")]
    Config {
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An architecture or feature this crate does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
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
    /// The model config built from `config.json` is invalid.
    #[error("{0}")]
    Model(#[from] ConfigError),
    /// A value of `config.json` the model cannot take, its key named as in `config.json`.
    #[error("config.json: {0}")]
    ConfigValue(String),
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

impl HfError {
    pub(crate) fn file(path: &std::path::Path, message: impl std::fmt::Display) -> Self {
        HfError::File { path: path.display().to_string(), message: message.to_string() }
    }

    pub(crate) fn config(field: &str, message: impl std::fmt::Display) -> Self {
        HfError::Config { field: field.to_string(), message: message.to_string() }
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
