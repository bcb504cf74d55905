//! The per-layer statistics of forward traces (variance, angular distance, identity ratio, Block
//! Influence, logit lens), averaged over the tokens of several batches.

use super::{angular_distance_matrix, block_influence, identity_ratios, LogitLens};
use crate::measure::layer_variances;
use crate::model::ForwardTrace;

/// The trace statistics of one batch, or their weighted sum or mean over several.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TraceStatistics {
    /// `n_layers + 1` variances: the embedding output and each block's output.
    pub block_output_variance: Vec<f64>,
    /// `n_layers` variances after each block's attention residual.
    pub after_attention_variance: Vec<f64>,
    /// `angular_distance[l][n - 1]`, as [`angular_distance_matrix`].
    pub angular_distance: Vec<Vec<f64>>,
    /// `n_layers` update ratios, as [`identity_ratios`].
    pub identity_ratio: Vec<f64>,
    /// `n_layers` Block Influences, as [`block_influence`].
    pub block_influence: Vec<f64>,
    /// `n_layers + 1` logit-lens losses and KL divergences, as [`logit_lens`](super::logit_lens).
    pub lens: LogitLens,
}

impl TraceStatistics {
    /// The statistics of one trace and its logit lens (each a mean over its tokens).
    pub fn of(trace: &ForwardTrace, lens: LogitLens) -> Self {
        let variances = layer_variances(trace);
        Self {
            block_output_variance: variances.block_output,
            after_attention_variance: variances.after_attention,
            angular_distance: angular_distance_matrix(&trace.hidden),
            identity_ratio: identity_ratios(trace),
            block_influence: block_influence(trace),
            lens,
        }
    }

    /// Adds `weight * other`, value by value (an empty `self` counts as zeros).
    pub fn add(&mut self, other: &Self, weight: f64) {
        accumulate(&mut self.block_output_variance, &other.block_output_variance, weight);
        accumulate(&mut self.after_attention_variance, &other.after_attention_variance, weight);
        accumulate(&mut self.identity_ratio, &other.identity_ratio, weight);
        accumulate(&mut self.block_influence, &other.block_influence, weight);
        accumulate(&mut self.lens.loss, &other.lens.loss, weight);
        accumulate(&mut self.lens.kl, &other.lens.kl, weight);
        self.angular_distance.resize(other.angular_distance.len(), Vec::new());
        for (row, values) in self.angular_distance.iter_mut().zip(&other.angular_distance) {
            accumulate(row, values, weight);
        }
    }
}

fn accumulate(sum: &mut Vec<f64>, values: &[f64], weight: f64) {
    sum.resize(values.len(), 0.0);
    for (total, value) in sum.iter_mut().zip(values) {
        *total += weight * value;
    }
}
