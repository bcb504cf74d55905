//! What can go wrong reading a multiple-choice file (`--choices`), typed: where, and what.

use std::path::PathBuf;

use super::choice_format::ChoiceFormat;
use super::item_problem::ItemProblem;
use crate::data::Place;

/// A multiple-choice file that cannot be read as its format: `place` is the file, with the line or
/// row where the problem is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{place}: {problem}")]
pub struct ChoiceFileError {
    /// The file, and where in it.
    pub place: Place,
    /// What is wrong there.
    pub problem: ChoiceProblem,
}

/// What is wrong with a multiple-choice file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum ChoiceProblem {
    /// The file cannot be read: `0` says why.
    #[error("{0}")]
    Unreadable(String),
    /// A file starting with `[` that is not a JSON array of objects.
    #[error("not a JSON array of objects: {0}")]
    NotJsonArray(String),
    /// A JSON-lines line that is not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJsonObject(String),
    /// A `.csv` file that does not parse.
    #[error("not CSV: {0}")]
    NotCsv(String),
    /// A Parquet file, in a build without the `parquet` feature.
    #[error("reading Parquet needs the `parquet` feature of layernorm-scaling (or export the rows as JSON lines)")]
    NoParquetFeature,
    /// A Parquet file that does not decode.
    #[error("not a readable Parquet file: {0}")]
    DamagedParquet(String),
    /// A file without rows.
    #[error("no question")]
    NoQuestion,
    /// A CSV file asked to be read in another format than MMLU's.
    #[error("a CSV file is read in the mmlu format only (question, A, B, C, D, answer letter), not {0}")]
    CsvNotMmlu(ChoiceFormat),
    /// A first row whose fields (`found`) match no format.
    #[error(
        "{found} match no multiple-choice format; expected one of: {} (or name one with --choices-format)",
        ChoiceFormat::ALL.iter().map(|f| format!("{f}: {}", f.fields())).collect::<Vec<_>>().join("; ")
    )]
    NoFormat { found: String },
    /// A row that is not an item of its format: `0` says what it lacks.
    #[error("{0}")]
    NotAnItem(ItemProblem),
    /// PIQA rows without `label`, whose labels file (`labels`) cannot be read.
    #[error(
        "the PIQA rows have no `label`, so their labels come from {} (as the original valid.jsonl's from \
         valid-labels.lst), which cannot be read: {error}",
        labels.display()
    )]
    NoPiqaLabels { labels: PathBuf, error: String },
    /// A line of a PIQA labels file that is not 0 or 1.
    #[error("`{0}` is not a PIQA label (0 or 1)")]
    NotPiqaLabel(String),
    /// A PIQA labels file with another count of labels than the file's rows.
    #[error("{labels} label(s) for the {rows} row(s) of {}; they pair line by line", rows_file.display())]
    PiqaLabelCount { labels: usize, rows_file: PathBuf, rows: usize },
}

impl ChoiceFileError {
    /// `problem` at `place`.
    pub(crate) fn new(place: impl Into<Place>, problem: ChoiceProblem) -> Self {
        ChoiceFileError { place: place.into(), problem }
    }
}
