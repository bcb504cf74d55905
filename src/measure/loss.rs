//! The mean next-token loss of a model on held-out sequences: the validation loss of a run and
//! the baseline of the pruning study.

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::tensor::Device;

use crate::data::{DataError, LmBatch, LmBatcher, SequenceDataset, SplitProblem};
use crate::error::Error;
use crate::model::{cross_entropy_counting, Llama};

/// The first `batches` batches of `batch_size` sequences of `dataset` on `device` (the last one may
/// be smaller), each with its number of sequences; an error when the dataset holds no sequence.
pub fn evaluation_batches<'a>(
    dataset: &'a SequenceDataset,
    batch_size: usize,
    batches: usize,
    device: &'a Device,
) -> Result<impl Iterator<Item = (LmBatch, usize)> + 'a, DataError> {
    // Saturating: `--batch-size` and `--batches` come from a command line, any size.
    let n = dataset.len().min(batch_size.saturating_mul(batches));
    if n == 0 {
        return Err(DataError::Split(SplitProblem::NoFullSequence));
    }
    Ok((0..n).step_by(batch_size).map(move |start| {
        let windows: Vec<_> = (start..start.saturating_add(batch_size).min(n)).map(|i| dataset.window(i)).collect();
        let size = windows.len();
        (LmBatcher.batch(windows, device), size)
    }))
}

/// Mean next-token loss of `model` on the first `batches` batches of `dataset`, with the given
/// layers (1-based) skipped: the mean over every counted target (padding is not counted), each
/// batch weighted by its targets, so it does not move with the batch size or the number of
/// devices. The validation a run logs takes it the same way ([`StepMetric::loss`]), so the final
/// validation loss a run reports is the one its last validation logged.
///
/// [`StepMetric::loss`]: crate::train::StepMetric::loss
pub fn mean_loss(
    model: &Llama,
    dataset: &SequenceDataset,
    batch_size: usize,
    batches: usize,
    skip: &[usize],
) -> Result<f64, Error> {
    let device = model.embed_tokens.weight.device();
    let (mut total, mut count) = (0.0, 0);
    for (batch, _) in evaluation_batches(dataset, batch_size, batches, &device)? {
        let logits = model.forward_skipping(batch.inputs, skip)?;
        let targets = batch.n_targets;
        total += cross_entropy_counting(logits, batch.targets, batch.counted).into_scalar::<f64>() * targets as f64;
        count += targets;
    }
    Ok(total / count as f64)
}
