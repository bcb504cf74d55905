//! When checkpoints are written and which are kept: every `save_every` steps and at the end, the
//! last `keep` of those plus the best by validation loss.

use burn::train::checkpoint::{CheckpointingAction, CheckpointingStrategy};
use burn::train::metric::store::{Aggregate, Direction, EventStoreClient, Split};
use burn::train::metric::MetricName;

/// The run's checkpointing strategy (epochs are validation intervals).
pub struct RunCheckpointing {
    every: usize,
    last: usize,
    keep: usize,
    saved: Vec<usize>,
    loss: MetricName,
}

impl RunCheckpointing {
    /// Saves every `every` epochs and at epoch `last`; keeps the last `keep` and the best.
    /// `existing` are the epochs already on disk (from before a resume).
    pub fn new(every: usize, last: usize, keep: usize, existing: Vec<usize>, loss: MetricName) -> Self {
        Self { every, last, keep: keep.max(1), saved: existing, loss }
    }
}

impl CheckpointingStrategy for RunCheckpointing {
    fn checkpointing(&mut self, epoch: usize, store: &EventStoreClient) -> Vec<CheckpointingAction> {
        let best = store.find_epoch(&self.loss, Aggregate::Mean, Direction::Lowest, &Split::Valid).unwrap_or(epoch);
        let scheduled = |e: usize| e % self.every == 0 || e == self.last;
        let mut actions = Vec::new();
        if scheduled(epoch) || best == epoch {
            actions.push(CheckpointingAction::Save);
            self.saved.push(epoch);
        }
        let mut recent: Vec<usize> = self.saved.iter().copied().filter(|&e| scheduled(e)).collect();
        recent.sort_unstable();
        let recent: Vec<usize> = recent.into_iter().rev().take(self.keep).collect();
        let (keep, delete): (Vec<usize>, Vec<usize>) =
            self.saved.iter().partition(|&&e| e == best || recent.contains(&e));
        actions.extend(delete.into_iter().map(CheckpointingAction::Delete));
        self.saved = keep;
        actions
    }
}
