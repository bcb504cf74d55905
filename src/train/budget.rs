//! The data budget of a run: how many training sequences it reads against how many the corpus
//! holds, said before the first step (and warned of when the run would repeat data), and recorded
//! in the run's `train.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::TrainConfig;
use crate::data::{SequenceDataset, SequenceMode};

/// A run's `train.json` as the run writes it: its settings, then what it reads of its data
/// (`data_budget`, no setting: read back as a config, it changes nothing).
#[derive(Serialize)]
pub(crate) struct RecordedSettings<'a> {
    /// Every setting, as the run used it.
    #[serde(flatten)]
    pub settings: &'a TrainConfig,
    /// What the run reads of its training data.
    pub data_budget: DataBudget,
}

/// The name of the data budget's entry in a run's `train.json`: the one key there that is no
/// setting.
pub(crate) const RECORDED_BUDGET: &str = "data_budget";

impl DataBudget {
    /// The budget the run's `train.json` at `path` recorded; `None` when it recorded none (a run
    /// of version 0.1) or the file cannot be read.
    pub fn recorded_in(path: &Path) -> Option<DataBudget> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut recorded: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).ok()?;
        serde_json::from_value(recorded.remove(RECORDED_BUDGET)?).ok()
    }
}

/// What a run reads of its training data.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataBudget {
    /// Training sequences (windows of `seq_len + 1` tokens) in the corpus's training split.
    pub sequences: u64,
    /// Target tokens in those sequences (`sequences x seq_len` when packed; the real tokens
    /// predicted when truncated, padding left out).
    pub tokens: u64,
    /// Sequences the run reads: steps x micro-batches per step x batch size.
    pub read: u64,
    /// Tokens per sequence (`seq_len`).
    pub seq_len: usize,
    /// How documents became sequences.
    pub sequences_mode: SequenceMode,
    /// Tokens of the training documents past their sequence that truncation never reads (0 when packed).
    pub truncated: u64,
}

impl DataBudget {
    /// The budget of `steps` optimiser steps of `micro_batches` micro-batches of `batch_size`
    /// sequences of `train`.
    pub fn new(train: &SequenceDataset, steps: usize, micro_batches: usize, batch_size: usize) -> Self {
        use burn::data::dataset::Dataset;
        let read = (steps as u64).saturating_mul(micro_batches as u64).saturating_mul(batch_size as u64);
        Self {
            sequences: train.len() as u64,
            tokens: train.n_targets(),
            read,
            seq_len: train.seq_len(),
            sequences_mode: train.mode(),
            truncated: train.truncated_tokens(),
        }
    }

    /// Passes over the training split the run makes (above 1: it repeats data).
    pub fn passes(&self) -> f64 {
        self.read as f64 / self.sequences.max(1) as f64
    }

    /// Target tokens the run reads (when truncated, at the split's mean per sequence).
    pub fn tokens_read(&self) -> u64 {
        (self.passes() * self.tokens as f64).round() as u64
    }

    /// The line said before the first step (the [`TrainEvent::Data`](super::TrainEvent::Data) event's).
    pub fn note(&self) -> String {
        let shape = match self.sequences_mode {
            SequenceMode::Pack => format!("{} sequences of {}", self.sequences, self.seq_len),
            SequenceMode::Truncate => format!(
                "{} documents cut at {} + 1 tokens, padding not counted; {} tokens past the cut are not read",
                self.sequences,
                self.seq_len,
                format_count(self.truncated)
            ),
        };
        format!(
            "data: the training split holds {} tokens ({shape}); the run reads {} tokens, {:.2} passes",
            format_count(self.tokens),
            format_count(self.tokens_read()),
            self.passes()
        )
    }

    /// The warning of a truncated run whose documents are mostly left unread: more of their
    /// tokens lie past the cut than before it (long documents, or a token file with no
    /// end-of-text token, which is one document).
    pub fn truncation_warning(&self) -> Option<String> {
        let kept = self.tokens + self.sequences;
        (self.sequences_mode == SequenceMode::Truncate && self.truncated > kept).then(|| {
            format!(
                "--sequences truncate leaves {:.0}% of the training documents' tokens unread ({} of {}): the \
                 documents are much longer than --seq-len {} (a token file with no end-of-text token is a single \
                 document); use --sequences pack, or a longer --seq-len",
                100.0 * self.truncated as f64 / (self.truncated + kept) as f64,
                format_count(self.truncated),
                format_count(self.truncated + kept),
                self.seq_len
            )
        })
    }

    /// The warning of a run that reads more sequences than the training split holds.
    pub fn repeat_warning(&self) -> Option<String> {
        (self.read > self.sequences).then(|| {
            format!(
                "the run reads its training data {:.2} times ({} sequences of a split of {}): it repeats data; give \
                 more data (--data) or fewer --steps for at most one pass",
                self.passes(),
                self.read,
                self.sequences
            )
        })
    }
}

/// `1234567` as `1.2M`, `4321` as `4.3k`.
fn format_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.2}B", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(sequences: u64, steps: usize, micro_batches: usize, batch_size: usize, seq_len: usize) -> DataBudget {
        let read = (steps * micro_batches * batch_size) as u64;
        let tokens = sequences * seq_len as u64;
        DataBudget { sequences, tokens, read, seq_len, sequences_mode: SequenceMode::Pack, truncated: 0 }
    }

    #[test]
    fn the_repeat_warning_comes_exactly_when_the_run_reads_more_than_the_split() {
        // 100 sequences; 5 steps x 2 micro-batches x 10 sequences = 100: one pass, no warning.
        let exact = budget(100, 5, 2, 10, 64);
        assert_eq!((exact.read, exact.passes(), exact.repeat_warning()), (100, 1.0, None));
        let over = budget(99, 5, 2, 10, 64);
        let warning = over.repeat_warning().expect("100 sequences of a split of 99 repeat one");
        assert!(warning.contains("1.01 times (100 sequences of a split of 99)"), "{warning}");
        let mut truncated = DataBudget { sequences_mode: SequenceMode::Truncate, ..budget(10, 1, 1, 1, 4) };
        (truncated.tokens, truncated.truncated) = (30, 40);
        assert_eq!(truncated.truncation_warning(), None, "40 unread of 80: not most");
        truncated.truncated = 41;
        let warning = truncated.truncation_warning().expect("41 unread of 81");
        assert!(warning.contains("leaves 51% of the training documents' tokens unread (41 of 81)"), "{warning}");
        assert_eq!(budget(10, 1, 1, 1, 4).truncation_warning(), None, "packed runs read every token");
        assert_eq!(
            budget(20_000, 400, 1, 16, 128).note(),
            "data: the training split holds 2.6M tokens (20000 sequences of 128); the run reads 819.2k tokens, 0.32 passes"
        );
    }
}
