//! What is wrong with a field of a model folder's `config.json`.

/// What is wrong with a field of `config.json` ([`HfError::Config`](super::HfError::Config)).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc or message says what its fields are
pub enum FieldProblem {
    /// The field is absent (or `null`).
    #[error("is missing")]
    Missing,
    /// The file holds something other than a JSON object.
    #[error("config.json must be a JSON object")]
    NotAnObject,
    /// A value of the wrong type or range, as the parser says.
    #[error("has a bad value: {0}")]
    BadValue(String),
    /// A value that is not of the kind the field takes (`what`).
    #[error("must be {what}, got {got}")]
    WrongKind { what: &'static str, got: String },
    /// A size of 0.
    #[error("must be at least 1, got 0")]
    Zero,
    /// A number that must be positive and finite, and is not.
    #[error("must be a positive number, got {0}")]
    NotPositive(f64),
    /// `num_attention_heads` (`heads`) does not divide `hidden_size` (`hidden`).
    #[error("{heads} does not divide hidden_size {hidden}")]
    HeadsDoNotDivide { heads: usize, hidden: usize },
    /// A size the checkpoint's tensors contradict: `found` says what they hold.
    #[error("is {value}, but {found}; is config.json the checkpoint's own?")]
    ContradictsCheckpoint { value: usize, found: String },
    /// The crate's scheme entry without its scheme's name.
    #[error("must hold a `norm_scheme` string")]
    NoSchemeName,
}
