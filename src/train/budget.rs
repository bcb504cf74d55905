//! The data budget of a run: how many training sequences it reads against how many the corpus
//! holds, said before the first step (and warned of when the run would repeat data).

/// What a run reads of its training data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DataBudget {
    /// Training sequences (windows of `seq_len + 1` tokens) in the corpus's training split.
    pub sequences: u64,
    /// Sequences the run reads: steps x micro-batches per step x batch size.
    pub read: u64,
    /// Tokens per sequence (`seq_len`).
    pub seq_len: usize,
}

impl DataBudget {
    /// The budget of `steps` optimiser steps of `micro_batches` micro-batches of `batch_size`
    /// sequences, over a training split of `sequences` sequences.
    pub fn new(sequences: usize, steps: usize, micro_batches: usize, batch_size: usize, seq_len: usize) -> Self {
        let read = (steps as u64).saturating_mul(micro_batches as u64).saturating_mul(batch_size as u64);
        Self { sequences: sequences as u64, read, seq_len }
    }

    /// Passes over the training split the run makes (above 1: it repeats data).
    pub fn passes(&self) -> f64 {
        self.read as f64 / self.sequences.max(1) as f64
    }

    /// The line said before the first step (the [`TrainEvent::Data`](super::TrainEvent::Data) event's).
    pub fn note(&self) -> String {
        let tokens = |sequences: u64| format_count(sequences.saturating_mul(self.seq_len as u64));
        format!(
            "data: the training split holds {} tokens ({} sequences of {}); the run reads {} tokens, {:.2} passes",
            tokens(self.sequences),
            self.sequences,
            self.seq_len,
            tokens(self.read),
            self.passes()
        )
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

    #[test]
    fn the_repeat_warning_comes_exactly_when_the_run_reads_more_than_the_split() {
        // 100 sequences; 5 steps x 2 micro-batches x 10 sequences = 100: one pass, no warning.
        let exact = DataBudget::new(100, 5, 2, 10, 64);
        assert_eq!((exact.read, exact.passes(), exact.repeat_warning()), (100, 1.0, None));
        let over = DataBudget::new(99, 5, 2, 10, 64);
        let warning = over.repeat_warning().expect("100 sequences of a split of 99 repeat one");
        assert!(warning.contains("1.01 times (100 sequences of a split of 99)"), "{warning}");
        assert_eq!(
            DataBudget::new(20_000, 400, 1, 16, 128).note(),
            "data: the training split holds 2.6M tokens (20000 sequences of 128); the run reads 819.2k tokens, 0.32 passes"
        );
    }
}
