//! The multiple-choice layouts a file can be read in (`--choices-format`), by name.

use std::fmt;
use std::str::FromStr;

use crate::config_error::ConfigError;

/// A multiple-choice layout, named as `--choices-format` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceFormat {
    /// ARC-style rows (also OpenBookQA, CommonsenseQA): the prompt `Question: {question}\nAnswer:`.
    Arc,
    /// HellaSwag, the Hub's export or the original JSON lines: lm-eval's preprocessed context and endings.
    Hellaswag,
    /// PIQA, the Hub's export or the original JSON lines with their labels file.
    Piqa,
    /// MMLU, the Hub's export or Hendrycks's CSV files: lm-eval's prompt, the letters as choices.
    Mmlu,
}

impl ChoiceFormat {
    /// Every format, in the order messages list them.
    pub const ALL: [ChoiceFormat; 4] =
        [ChoiceFormat::Arc, ChoiceFormat::Hellaswag, ChoiceFormat::Piqa, ChoiceFormat::Mmlu];

    /// The name `--choices-format` takes.
    pub fn name(self) -> &'static str {
        match self {
            ChoiceFormat::Arc => "arc",
            ChoiceFormat::Hellaswag => "hellaswag",
            ChoiceFormat::Piqa => "piqa",
            ChoiceFormat::Mmlu => "mmlu",
        }
    }

    /// The fields a row of this format has, for messages.
    pub fn fields(self) -> &'static str {
        match self {
            ChoiceFormat::Arc => "`question` (or `question.stem`), `choices`, and `answer` or `answerKey`",
            ChoiceFormat::Hellaswag => "`activity_label`, `ctx_a`, `ctx_b`, `endings`, `label`",
            ChoiceFormat::Piqa => "`goal`, `sol1`, `sol2`, and `label` or a labels file `<name>-labels.lst` beside `<name>.jsonl`",
            ChoiceFormat::Mmlu => {
                "`question`, `subject`, `choices` (4), `answer`; or a CSV file without a header: question, A, B, C, D, answer letter"
            }
        }
    }

    /// Whether `acc_norm` says anything beyond `acc`: not for MMLU, whose choices are one letter each
    /// (lm-eval reports `acc` alone for it).
    pub fn has_acc_norm(self) -> bool {
        self != ChoiceFormat::Mmlu
    }
}

impl fmt::Display for ChoiceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ChoiceFormat {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let name = text.trim().to_ascii_lowercase();
        ChoiceFormat::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| ConfigError::Unknown {
            what: "multiple-choice format",
            name: text.to_string(),
            expected: ChoiceFormat::ALL.map(ChoiceFormat::name).join(", "),
        })
    }
}
