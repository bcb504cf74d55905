//! The crate's error type: every bad configuration is reported here, never as a panic.

use thiserror::Error;

/// A configuration that cannot be built, with what was wrong and what to do about it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// LayerNorm Scaling numbers layers from 1; layer 0 has no factor.
    #[error("layer number 0 is invalid: layers are numbered from 1 (the factor is 1/sqrt(l)); use `index + 1` for a 0-based index")]
    LayerZero,
    /// A field that must be positive is zero.
    #[error("`{field}` must be at least 1, got 0")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// `a` must be a multiple of `b`.
    #[error("`{a}` ({a_value}) must be divisible by `{b}` ({b_value})")]
    NotDivisible {
        /// The dividend's field name.
        a: &'static str,
        /// The dividend.
        a_value: usize,
        /// The divisor's field name.
        b: &'static str,
        /// The divisor.
        b_value: usize,
    },
    /// A numeric field is outside its allowed range.
    #[error("`{field}` = {value} is out of range: {expected}")]
    OutOfRange {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is allowed.
        expected: &'static str,
    },
    /// A layer number beyond the model's depth.
    #[error("layer {layer} does not exist: the model has layers 1..={n_layers}")]
    NoSuchLayer {
        /// The requested 1-based layer.
        layer: usize,
        /// The number of layers in the model.
        n_layers: usize,
    },
    /// A name (preset, scheme, device) that is not known.
    #[error("unknown {what} `{name}`; expected one of: {expected}")]
    Unknown {
        /// What kind of name it was.
        what: &'static str,
        /// The name given.
        name: String,
        /// The accepted names.
        expected: String,
    },
    /// A backend or feature that this build does not include or the device does not support.
    #[error("{0}")]
    Unsupported(String),
    /// Settings that contradict each other: the message names both values and the fix.
    #[error("{0}")]
    Conflict(String),
    /// A model or checkpoint file (`model.bpk`, `model.json`, `checkpoint/*.bpk`) that is missing,
    /// cut short, corrupt or of another model; the message says what to do.
    #[error("{path}: {message}")]
    ModelFile {
        /// The file's (or run directory's) path.
        path: String,
        /// What went wrong and what to do.
        message: String,
    },
    /// A configuration file that could not be read or parsed.
    #[error("config file {path}: {message}")]
    File {
        /// The file's path.
        path: String,
        /// What went wrong.
        message: String,
    },
}
