//! [`ConfigError`]: a setting that is invalid on its own, with what was wrong and what to do; and
//! the checks and number formats its messages share.

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
    #[error("`{field}` = {} is out of range: {expected}", compact_number(.value))]
    OutOfRange {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is allowed.
        expected: &'static str,
    },
    /// A layer listed twice where each is removed (skipped, pruned) once.
    #[error("layer {layer} is listed twice (each is removed once)")]
    LayerTwice {
        /// The 1-based layer.
        layer: usize,
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
    /// A device this build has no backend for.
    #[error(
        "device `{device}` needs the `{feature}` cargo feature of layernorm-scaling, which this build does not \
         include (compiled in: {compiled}); rebuild with `--features {feature}`, or, in a project that depends on \
         this crate, add `features = [\"{feature}\"]` to its `layernorm-scaling` dependency (the feature on `burn` \
         alone does not reach this crate)"
    )]
    NotCompiled {
        /// The device string.
        device: String,
        /// The cargo feature that provides it.
        feature: &'static str,
        /// The backends this build has.
        compiled: String,
    },
    /// A device whose backend is compiled in but which this machine cannot run (no such GPU).
    #[error("device `{device}` cannot run on this machine: {message}")]
    Unavailable {
        /// The device string.
        device: String,
        /// What is missing, and what to use instead.
        message: String,
    },
    /// A build with no backend feature at all.
    #[error("no backend is compiled in: build with a backend feature, e.g. `--features flex`")]
    NoBackend,
    /// A float precision the device cannot compute in.
    #[error("{device} cannot compute in {precision}: {message}")]
    Precision {
        /// The device.
        device: String,
        /// The precision asked for.
        precision: String,
        /// Why, and what to do.
        message: String,
    },
    /// A model, a traced pass or a training step too large for the memory it would live in.
    #[error("{0}")]
    TooLarge(Box<crate::memory_problem::MemoryProblem>),
    /// A setting of one depth of a sweep's `--layers` that cannot work.
    #[error("the depth {depth} of --layers: {error}")]
    AtDepth {
        /// The depth.
        depth: usize,
        /// Why it cannot work.
        error: Box<ConfigError>,
    },
    /// More positions than a model attends over whole: its `max_seq_len`, the context it was made
    /// for (a Hugging Face model's `max_position_embeddings`, or a Mistral model's `sliding_window`
    /// when shorter: past it, transformers would attend to the window only).
    #[error(
        "{asked_by} asks for {positions} positions, longer than the model's `max_seq_len` ({max_seq_len}): it takes \
         at most {max_seq_len} (the context it was made for, or a Mistral sliding_window); {fix}"
    )]
    TooLong {
        /// The setting that asks for them (`--seq-len 16`, `9 tokens`).
        asked_by: String,
        /// The positions asked for.
        positions: usize,
        /// The model's `max_seq_len`.
        max_seq_len: usize,
        /// What to do, as the setting's program words it (`lower --seq-len`).
        fix: String,
    },
    /// Settings that contradict each other: the message names both values and the fix.
    #[error("{0}")]
    Conflict(String),
    /// Text that is not a valid config of its kind (JSON or TOML): what the parser found.
    #[error("not a valid {what}: {message}")]
    Invalid {
        /// The kind of config.
        what: &'static str,
        /// The parser's message.
        message: String,
    },
}

/// An error unless `value` is a number > 0 that f32 holds as such (not infinite, not rounded to
/// 0): a setting the model computes with in f32, where `1e40` is finite in f64 but infinite.
pub(crate) fn check_positive_f32(field: &'static str, value: f64) -> Result<(), ConfigError> {
    let single = value as f32;
    if value > 0.0 && single > 0.0 && single.is_finite() {
        return Ok(());
    }
    Err(ConfigError::OutOfRange { field, value, expected: POSITIVE_F32 })
}

/// What [`check_positive_f32`] expects.
pub(crate) const POSITIVE_F32: &str =
    "a number > 0 within f32's range (at most 3.4e38, and not below 1.4e-45, which f32 rounds to 0; the model computes in f32)";

/// serde_json's `error` in reading `text`, followed by the line it points at, so that a value
/// no field can hold (`1e400`: "number out of range at line 5 column 22") names its field.
pub(crate) fn json_error_in(text: &str, error: &serde_json::Error) -> String {
    let line = text.lines().nth(error.line().saturating_sub(1)).map(str::trim).filter(|line| !line.is_empty());
    match line {
        Some(line) if error.line() > 0 && line.chars().count() <= 200 => format!("{error} (`{line}`)"),
        _ => error.to_string(),
    }
}

/// `value` as a person reads it: `1e40` and `1e-50` in exponent form, `0.25` and `300` plainly
/// (Rust's `{}` writes every digit of `1e40`).
pub(crate) fn compact_number(value: &f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && magnitude.is_finite() && !(1e-4..1e15).contains(&magnitude) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}
