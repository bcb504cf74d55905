//! When checkpoints are written and which are kept: every `save_every` steps and at the end, the
//! last `keep` of those plus the best by validation loss. A checkpoint is only written while the
//! run is sound: never after a non-finite gradient or with a non-finite validation loss, so every
//! checkpoint kept can be resumed from. Deleting the others is the [`CheckpointKeeper`]'s: only
//! once a newer checkpoint is complete on disk, so burn-train is never asked to delete.
//!
//! burn-train's `KeepLastNCheckpoints` and `MetricCheckpointingStrategy` (composed) keep the last
//! and the best, but burn-train deletes what they drop beside the newer checkpoint's save, through
//! asynchronous writers (and panics when a deletion fails), and they save whatever the run's
//! state: here neither may happen.

use std::sync::Arc;

use burn::train::checkpoint::{CheckpointingAction, CheckpointingStrategy};
use burn::train::metric::store::{Aggregate, Direction, EventStoreClient, Split};
use burn::train::metric::MetricName;

use super::checkpoint::CheckpointKeeper;
use super::monitor::RunMonitor;
use crate::run::EpochSteps;

/// The run's checkpointing strategy (epochs are validation intervals).
pub(crate) struct RunCheckpointing {
    every: usize,
    last: usize,
    keep: usize,
    saved: Vec<usize>,
    /// The steps that name the epochs' checkpoints.
    steps: EpochSteps,
    keeper: CheckpointKeeper,
    loss: MetricName,
    /// Whether the run is sound enough to checkpoint.
    monitor: Arc<RunMonitor>,
}

impl RunCheckpointing {
    /// Saves every `every` epochs and at the last epoch of `steps`; keeps the last `keep` and the
    /// best. `existing` are the steps of the checkpoints already on disk (from before a resume),
    /// `keeper` deletes the others; `monitor` says whether the run is sound.
    pub fn new(
        every: usize,
        keep: usize,
        existing: &[usize],
        steps: EpochSteps,
        keeper: CheckpointKeeper,
        loss: MetricName,
        monitor: Arc<RunMonitor>,
    ) -> Self {
        let saved = existing.iter().map(|&step| steps.epoch(step)).collect();
        let last = steps.epoch(steps.steps);
        Self { every, last, keep: keep.max(1), saved, steps, keeper, loss, monitor }
    }

    fn sound(&self, epoch: usize, store: &EventStoreClient) -> bool {
        self.monitor.may_checkpoint(store.find_metric(&self.loss, epoch, Aggregate::Mean, &Split::Valid))
    }
}

impl CheckpointingStrategy for RunCheckpointing {
    fn checkpointing(&mut self, epoch: usize, store: &EventStoreClient) -> Vec<CheckpointingAction> {
        crate::io::crash_point(format_args!("checkpoint:{epoch}"));
        if !self.sound(epoch, store) {
            return Vec::new();
        }
        let best = store.find_epoch(&self.loss, Aggregate::Mean, Direction::Lowest, &Split::Valid).unwrap_or(epoch);
        let (save, kept) =
            checkpoints_after(&self.saved, epoch, best, |e| e.is_multiple_of(self.every) || e == self.last, self.keep);
        self.saved = kept;
        self.keeper.want(self.saved.iter().map(|&epoch| self.steps.step(epoch)).collect());
        self.keeper.prune();
        if save {
            vec![CheckpointingAction::Save]
        } else {
            Vec::new()
        }
    }
}

/// The policy at the end of a sound `epoch`, given the checkpoints `saved` so far, the `best`
/// epoch by validation loss and which epochs are `scheduled`: whether to save this one, and the
/// checkpoints kept afterwards (the last `keep` scheduled ones and the best).
fn checkpoints_after(
    saved: &[usize],
    epoch: usize,
    best: usize,
    scheduled: impl Fn(usize) -> bool,
    keep: usize,
) -> (bool, Vec<usize>) {
    let save = scheduled(epoch) || best == epoch;
    let mut saved = saved.to_vec();
    if save {
        saved.push(epoch);
    }
    let mut recent: Vec<usize> = saved.iter().copied().filter(|&e| scheduled(e)).collect();
    recent.sort_unstable();
    let recent: Vec<usize> = recent.into_iter().rev().take(keep).collect();
    saved.retain(|&e| e == best || recent.contains(&e));
    (save, saved)
}

#[cfg(test)]
mod tests {
    use super::checkpoints_after;

    /// Every 2 epochs and at epoch 7 (the last).
    fn scheduled(epoch: usize) -> bool {
        epoch.is_multiple_of(2) || epoch == 7
    }

    #[test]
    fn the_last_scheduled_checkpoints_are_kept() {
        assert_eq!(checkpoints_after(&[], 1, 0, scheduled, 2), (false, vec![]));
        assert_eq!(checkpoints_after(&[2], 3, 2, scheduled, 2), (false, vec![2]));
        assert_eq!(checkpoints_after(&[2, 4], 6, 6, scheduled, 2), (true, vec![4, 6]));
        // The run's last epoch is always saved, off the schedule too.
        assert_eq!(checkpoints_after(&[4, 6], 7, 6, scheduled, 2), (true, vec![6, 7]));
    }

    #[test]
    fn the_best_is_saved_off_schedule_and_kept_until_beaten() {
        // Epoch 3 is the best so far: saved though not scheduled.
        assert_eq!(checkpoints_after(&[2], 3, 3, scheduled, 1), (true, vec![2, 3]));
        // A newer scheduled one replaces 2; 3 stays while it is the best.
        assert_eq!(checkpoints_after(&[2, 3], 4, 3, scheduled, 1), (true, vec![3, 4]));
        // Beaten by 6: 3 goes, and so does 4 (only the last scheduled one is kept).
        assert_eq!(checkpoints_after(&[3, 4], 6, 6, scheduled, 1), (true, vec![6]));
    }

    #[test]
    fn a_resumed_run_keeps_its_checkpoints_from_before() {
        // Resumed from 4 with 2 and 4 on disk; keep 3.
        assert_eq!(checkpoints_after(&[2, 4], 6, 2, scheduled, 3), (true, vec![2, 4, 6]));
        assert_eq!(checkpoints_after(&[2, 4, 6], 7, 2, scheduled, 3), (true, vec![2, 4, 6, 7]));
    }
}
