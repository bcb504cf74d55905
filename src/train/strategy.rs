//! When checkpoints are written and which are kept: every `save_every` steps and at the end, the
//! last `keep` of those plus the best by validation loss. A checkpoint is only written while the
//! run is sound: never after a non-finite gradient or with a non-finite validation loss, so every
//! checkpoint kept can be resumed from. Deleting the others is the [`CheckpointKeeper`]'s: only
//! once a newer checkpoint is complete on disk, so burn-train is never asked to delete.

use std::sync::Arc;

use burn::train::checkpoint::{CheckpointingAction, CheckpointingStrategy};
use burn::train::metric::store::{Aggregate, Direction, EventStoreClient, Split};
use burn::train::metric::MetricName;

use super::checkpoint::CheckpointKeeper;
use super::monitor::RunMonitor;

/// The run's checkpointing strategy (epochs are validation intervals).
pub struct RunCheckpointing {
    every: usize,
    last: usize,
    keep: usize,
    saved: Vec<usize>,
    keeper: CheckpointKeeper,
    loss: MetricName,
    /// Whether the run is sound enough to checkpoint.
    monitor: Arc<RunMonitor>,
}

impl RunCheckpointing {
    /// Saves every `every` epochs and at epoch `last`; keeps the last `keep` and the best.
    /// `existing` are the epochs already on disk (from before a resume), `keeper` deletes the
    /// others; `monitor` says whether the run is sound.
    pub fn new(
        every: usize,
        last: usize,
        keep: usize,
        existing: Vec<usize>,
        keeper: CheckpointKeeper,
        loss: MetricName,
        monitor: Arc<RunMonitor>,
    ) -> Self {
        Self { every, last, keep: keep.max(1), saved: existing, keeper, loss, monitor }
    }

    fn sound(&self, epoch: usize, store: &EventStoreClient) -> bool {
        self.monitor.may_checkpoint(store.find_metric(&self.loss, epoch, Aggregate::Mean, &Split::Valid))
    }
}

impl CheckpointingStrategy for RunCheckpointing {
    fn checkpointing(&mut self, epoch: usize, store: &EventStoreClient) -> Vec<CheckpointingAction> {
        crate::io::crash_point(&format!("checkpoint:{epoch}"));
        if !self.sound(epoch, store) {
            return Vec::new();
        }
        let best = store.find_epoch(&self.loss, Aggregate::Mean, Direction::Lowest, &Split::Valid).unwrap_or(epoch);
        let scheduled = |e: usize| e.is_multiple_of(self.every) || e == self.last;
        let save = scheduled(epoch) || best == epoch;
        if save {
            self.saved.push(epoch);
        }
        let mut recent: Vec<usize> = self.saved.iter().copied().filter(|&e| scheduled(e)).collect();
        recent.sort_unstable();
        let recent: Vec<usize> = recent.into_iter().rev().take(self.keep).collect();
        self.saved.retain(|&e| e == best || recent.contains(&e));
        self.keeper.want(self.saved.clone());
        self.keeper.prune();
        if save {
            vec![CheckpointingAction::Save]
        } else {
            Vec::new()
        }
    }
}
