//! What a row of a multiple-choice file lacks to be an item of its format, typed.

use super::choice_format::ChoiceFormat;

/// What a row lacks to be an item of its format ([`ChoiceProblem::NotAnItem`](super::ChoiceProblem::NotAnItem)):
/// `key` is the row's field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum ItemProblem {
    /// No string `key`, which rows of `format` have.
    #[error("no string `{key}` ({format} rows have {})", format.fields())]
    NoText { key: String, format: ChoiceFormat },
    /// No list of strings `key`, which rows of `format` have.
    #[error("no list of strings `{key}` ({format} rows have {})", format.fields())]
    NoTexts { key: String, format: ChoiceFormat },
    /// An ARC row whose `question` is neither a string nor an object with a `stem`.
    #[error("no string `question` (or `question.stem`)")]
    NoArcQuestion,
    /// An ARC row without a list of choices.
    #[error("no `choices` list")]
    NoArcChoices,
    /// An ARC row whose answer is missing or names none of its choices.
    #[error("`answer` / `answerKey` is missing or names no choice")]
    NoArcAnswer,
    /// Fewer than 2 choices in the list `key`.
    #[error("fewer than 2 `{key}`")]
    FewerThanTwo { key: String },
    /// No answer field `key`.
    #[error("no `{key}`")]
    NoAnswer { key: String },
    /// An empty answer `key`: a test split, whose answers are not published.
    #[error("`{key}` is empty (a test split has no answers)")]
    EmptyAnswer { key: String },
    /// A negative answer `value` (a test split's placeholder) for `choices` choices, named by index
    /// or, with `letters`, also by letter.
    #[error("`{key}` is {value} (a test split has no answers); expected {}", answer_range(*.choices, *.letters))]
    NegativeAnswer { key: String, value: i64, choices: usize, letters: bool },
    /// An answer `value` (rendered as JSON: a string in quotes) that names none of the `choices`
    /// choices.
    #[error("`{key}` {value} names no choice; expected {}", answer_range(*.choices, *.letters))]
    NoSuchChoice { key: String, value: String, choices: usize, letters: bool },
    /// An MMLU CSV row with `found` fields instead of 6.
    #[error("{found} fields; MMLU's CSV rows have 6: question, A, B, C, D, answer letter")]
    CsvFields { found: usize },
    /// An MMLU row with `found` choices instead of 4.
    #[error("{found} `choices`; MMLU has 4 (A to D)")]
    MmluChoices { found: usize },
    /// An MMLU row without `subject`, in a file whose name does not give one.
    #[error("no `subject`, and the file name is not `<subject>_test.csv` (or _val, _dev) to take it from")]
    NoSubject,
}

/// The answers `choices` choices take: `0 to 3`, or with `letters` `0 to 3 or A to D`.
fn answer_range(choices: usize, letters: bool) -> String {
    let last = choices.saturating_sub(1);
    if letters {
        format!("0 to {last} or A to {}", (b'A' + last.min(25) as u8) as char)
    } else {
        format!("0 to {last}")
    }
}
