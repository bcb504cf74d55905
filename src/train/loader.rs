//! The training data loader: each epoch is a fixed number of micro-batches, and which windows a
//! micro-batch holds is a pure function of `(seed, global micro-batch number)`, so a resumed run
//! sees exactly the data an uninterrupted one would.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::Device;

use crate::data::{LmBatch, LmBatcher, SequenceDataset};
use crate::seed::splitmix64;

/// Shuffled passes over a dataset: pass `p` visits every window once in an order seeded by `(seed, p)`.
#[derive(Debug)]
struct ShuffledPasses {
    dataset: Arc<SequenceDataset>,
    seed: u64,
    current: Mutex<Option<(u64, Arc<Vec<u32>>)>>,
}

impl ShuffledPasses {
    /// The window at position `position` of the endless shuffled stream.
    fn window_index(&self, position: u64) -> usize {
        let n = self.dataset.len() as u64;
        let (pass, offset) = (position / n, position % n);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let order = match current.as_ref() {
            Some((p, order)) if *p == pass => order.clone(),
            _ => {
                let order = Arc::new(permutation(n as usize, splitmix64(self.seed ^ splitmix64(pass))));
                *current = Some((pass, order.clone()));
                order
            }
        };
        order[offset as usize] as usize
    }
}

/// A Fisher-Yates permutation of `0..n`.
fn permutation(n: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut state = seed;
    for i in (1..n).rev() {
        state = splitmix64(state);
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    order
}

/// Yields `batches_per_epoch` micro-batches of `batch_size` windows per epoch.
///
/// For `n_devices` devices, burn-train slices the loader into one shard per device; shard `j`
/// yields micro-batches `j, j + n, j + 2n, ...` of the stream, so one multi-device step covers
/// the same windows as one single-device step with an `n` times larger batch.
#[derive(Clone, Debug)]
pub struct StepLoader {
    passes: Arc<ShuffledPasses>,
    batch_size: usize,
    batches_per_epoch: usize,
    /// Micro-batches of the whole run: the last epoch stops there (it may be shorter).
    total_batches: usize,
    /// `(shard, n_shards)`: this loader yields the micro-batches `b` with `b % n_shards == shard`.
    shard: (usize, usize),
    next_epoch: Arc<AtomicUsize>,
    device: Device,
}

impl StepLoader {
    /// A loader over `dataset` whose first epoch is number `start_epoch` (0 for a new run, `k`
    /// when resuming after epoch `k`), of `batches_per_epoch` micro-batches each until
    /// `total_batches` (the last epoch may be shorter).
    pub fn new(
        dataset: Arc<SequenceDataset>,
        batch_size: usize,
        batches_per_epoch: usize,
        total_batches: usize,
        seed: u64,
        start_epoch: usize,
        device: Device,
    ) -> Self {
        let passes = ShuffledPasses { dataset, seed, current: Mutex::new(None) };
        Self {
            passes: Arc::new(passes),
            batch_size,
            batches_per_epoch,
            total_batches,
            shard: (0, 1),
            next_epoch: Arc::new(AtomicUsize::new(start_epoch)),
            device,
        }
    }

    /// Micro-batch `batch` (global number, from 0) of the run.
    pub fn batch(&self, batch: u64) -> LmBatch {
        let first = batch * self.batch_size as u64;
        let windows = (first..first + self.batch_size as u64)
            .map(|position| self.passes.dataset.window(self.passes.window_index(position)))
            .collect();
        LmBatcher.batch(windows, &self.device)
    }
}

struct EpochIterator<'a> {
    loader: &'a StepLoader,
    epoch: usize,
    step: usize,
}

impl StepLoader {
    /// Micro-batches this loader (or shard) yields in `epoch` (from 0).
    fn own_batches(&self, epoch: usize) -> usize {
        let (shard, n_shards) = self.shard;
        let in_epoch = self.batches_per_epoch.min(self.total_batches.saturating_sub(epoch * self.batches_per_epoch));
        (in_epoch + n_shards - 1 - shard) / n_shards
    }
}

impl Iterator for EpochIterator<'_> {
    type Item = Result<LmBatch, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.step == self.loader.own_batches(self.epoch) {
            return None;
        }
        let (shard, n_shards) = self.loader.shard;
        let in_epoch = self.step * n_shards + shard;
        let global = (self.epoch * self.loader.batches_per_epoch + in_epoch) as u64;
        self.step += 1;
        Some(Ok(self.loader.batch(global)))
    }
}

impl DataLoaderIterator<LmBatch> for EpochIterator<'_> {
    fn progress(&self) -> Progress {
        let per_batch = self.loader.batch_size;
        Progress::new(self.step * per_batch, self.loader.own_batches(self.epoch) * per_batch, Some("sequences".into()))
    }
}

impl DataLoader<LmBatch> for StepLoader {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<LmBatch> + 'a> {
        let epoch = self.next_epoch.fetch_add(1, Ordering::SeqCst);
        Box::new(EpochIterator { loader: self, epoch, step: 0 })
    }

    fn num_items(&self) -> usize {
        self.own_batches(0) * self.batch_size
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<LmBatch>> {
        Arc::new(Self { device: device.clone(), ..self.clone() })
    }

    /// burn-train splits `num_items` into equal contiguous ranges, one per device; range
    /// `[start, end)` becomes shard `start / (end - start)` of `num_items / (end - start)`.
    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<LmBatch>> {
        let len = (end - start).max(1);
        let n_shards = (self.num_items() / len).max(1);
        // Each shard counts its own epochs (a shared counter would hand them different epochs).
        let next_epoch = Arc::new(AtomicUsize::new(self.next_epoch.load(Ordering::SeqCst)));
        Arc::new(Self { shard: ((start / len).min(n_shards - 1), n_shards), next_epoch, ..self.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::permutation;

    #[test]
    fn the_data_order_is_a_permutation_fixed_by_its_seed() {
        for n in [0, 1, 2, 17, 1000] {
            let mut order = permutation(n, 42);
            assert_eq!(order, permutation(n, 42), "the same seed, the same order");
            order.sort_unstable();
            assert_eq!(order, (0..n as u32).collect::<Vec<_>>(), "every window once");
        }
        assert_ne!(permutation(1000, 1), permutation(1000, 2));
        // Not the identity: the windows are shuffled.
        assert!(permutation(1000, 7).iter().enumerate().filter(|(i, &w)| *i as u32 == w).count() < 20);
    }
}
