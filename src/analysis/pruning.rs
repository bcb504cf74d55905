//! The performance drop when one layer is removed (the paper's equation 1, figures 2 and 4):
//! `dP(l) = P_pruned(l) - P_original`, here with P the perplexity on held-out text.

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::tensor::Device;

use crate::data::{LmBatch, LmBatcher, PackedDataset};
use crate::model::{cross_entropy, Llama};
use crate::ConfigError;

/// The first `batches` batches of `batch_size` sequences of `dataset` on `device` (the last one may
/// be smaller), each with its number of sequences; an error when the dataset holds no sequence.
pub(crate) fn evaluation_batches<'a>(
    dataset: &'a PackedDataset,
    batch_size: usize,
    batches: usize,
    device: &'a Device,
) -> Result<impl Iterator<Item = (LmBatch, usize)> + 'a, ConfigError> {
    let n = dataset.len().min(batch_size * batches);
    if n == 0 {
        return Err(ConfigError::Unsupported(
            "the evaluation data holds no full sequence; give more text or a shorter --seq-len".into(),
        ));
    }
    Ok((0..n).step_by(batch_size).map(move |start| {
        let windows: Vec<_> = (start..(start + batch_size).min(n)).map(|i| dataset.window(i)).collect();
        let size = windows.len();
        (LmBatcher.batch(windows, device), size)
    }))
}

/// Mean next-token loss of `model` on the first `batches` batches of `dataset`, with the given
/// layers (1-based) skipped.
pub fn mean_loss(
    model: &Llama,
    dataset: &PackedDataset,
    batch_size: usize,
    batches: usize,
    skip: &[usize],
) -> Result<f64, ConfigError> {
    let device = model.embed_tokens.weight.device();
    let (mut total, mut count) = (0.0, 0);
    for (batch, size) in evaluation_batches(dataset, batch_size, batches, &device)? {
        let logits = model.forward_skipping(batch.inputs, skip)?;
        total += cross_entropy(logits, batch.targets).into_scalar::<f64>() * size as f64;
        count += size;
    }
    Ok(total / count as f64)
}

/// Perplexity (`exp` of [`mean_loss`]) with the given layers (1-based) skipped.
pub fn perplexity(
    model: &Llama,
    dataset: &PackedDataset,
    batch_size: usize,
    batches: usize,
    skip: &[usize],
) -> Result<f64, ConfigError> {
    Ok(mean_loss(model, dataset, batch_size, batches, skip)?.exp())
}

/// The perplexity of the full model and `dP(l)` for each layer of `layers` (1-based; empty: every
/// layer), in that order.
///
/// `progress` is called after each evaluation with `(done, total)`.
pub fn pruning_drops(
    model: &Llama,
    dataset: &PackedDataset,
    batch_size: usize,
    batches: usize,
    layers: &[usize],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(f64, Vec<f64>), ConfigError> {
    let layers = layers_or_all(model, layers)?;
    let original = perplexity(model, dataset, batch_size, batches, &[])?;
    progress(1, layers.len() + 1);
    let mut drops = Vec::with_capacity(layers.len());
    for (done, &layer) in layers.iter().enumerate() {
        drops.push(perplexity(model, dataset, batch_size, batches, &[layer])? - original);
        progress(done + 2, layers.len() + 1);
    }
    Ok((original, drops))
}

/// `layers` checked against the model (1-based, each a block of it), or every layer when empty.
pub fn layers_or_all(model: &Llama, layers: &[usize]) -> Result<Vec<usize>, ConfigError> {
    model.check_layers(layers)?;
    Ok(if layers.is_empty() { (1..=model.n_layers()).collect() } else { layers.to_vec() })
}
