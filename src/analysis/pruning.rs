//! The performance drop when one layer is removed (the paper's equation 1, figures 2 and 4):
//! `dP(l) = P_pruned(l) - P_original`, here with P the perplexity on held-out text.

use crate::data::SequenceDataset;
use crate::measure::mean_loss;
use crate::model::Llama;
use crate::{config_error::ConfigError, error::Error};

/// The perplexity of the full model and `dP(l)` for each layer of `layers` (1-based; empty: every
/// layer), in that order.
///
/// `progress` is called after each evaluation with `(done, total)`.
pub fn pruning_drops(
    model: &Llama,
    dataset: &SequenceDataset,
    batch_size: usize,
    batches: usize,
    layers: &[usize],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(f64, Vec<f64>), Error> {
    let layers = layers_or_all(model, layers)?;
    let original = mean_loss(model, dataset, batch_size, batches, &[])?.exp();
    progress(1, layers.len() + 1);
    let mut drops = Vec::with_capacity(layers.len());
    for (done, &layer) in layers.iter().enumerate() {
        drops.push(mean_loss(model, dataset, batch_size, batches, &[layer])?.exp() - original);
        progress(done + 2, layers.len() + 1);
    }
    Ok((original, drops))
}

/// `layers` checked against the model (1-based, each a block of it), or every layer when empty.
pub fn layers_or_all(model: &Llama, layers: &[usize]) -> Result<Vec<usize>, ConfigError> {
    model.check_layers(layers)?;
    Ok(if layers.is_empty() { (1..=model.n_layers()).collect() } else { layers.to_vec() })
}
