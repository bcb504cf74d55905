//! The table of a sweep's results, one row per scheme (and init, and depth): each row's seeds'
//! final validation losses, their mean and spread, and the best row marked. The sweep's report,
//! its paired comparison and its depth table all read these rows.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::train::{distinct, group_name, PairOutcome, SweepRecord};

/// One scheme's row of the table (one per depth on a depth axis).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchemeResult {
    /// The scheme (`pre-ln`, `lns`, ...), with its init on an init axis (`lns+scaled`).
    pub scheme: String,
    /// The number of layers, on a depth axis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// Seeds that trained to the end.
    pub finished: usize,
    /// Seeds that diverged.
    pub diverged: usize,
    /// Final validation loss of each finished seed, by seed.
    pub losses: BTreeMap<u64, f64>,
    /// Mean of the finished seeds' validation losses.
    pub loss_mean: Option<f64>,
    /// Their sample standard deviation (`None` below two seeds).
    pub loss_std: Option<f64>,
    /// Mean of their perplexities (`exp` of each loss).
    pub perplexity_mean: Option<f64>,
    /// Sample standard deviation of their perplexities.
    pub perplexity_std: Option<f64>,
    /// Whether this scheme has the lowest mean validation loss.
    pub best: bool,
}

/// Mean and sample standard deviation (`None` for fewer than two values).
pub(super) fn mean_std(values: &[f64]) -> (Option<f64>, Option<f64>) {
    if values.is_empty() {
        return (None, None);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.len() > 1).then(|| (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt());
    (Some(mean), std)
}

/// The table of a sweep: one row per scheme (and init, and depth), in the sweep's order. The best
/// is marked among the rows of each depth.
pub fn sweep_results(record: &SweepRecord) -> Vec<SchemeResult> {
    let mut results: Vec<SchemeResult> = record
        .sweep()
        .groups()
        .into_iter()
        .map(|(layers, arm)| {
            let group = group_name(layers, &arm);
            let (mut losses, mut diverged) = (BTreeMap::new(), 0);
            for seed in &record.seeds {
                match record.outcomes.get(&format!("{group}/seed-{seed}")) {
                    Some(PairOutcome::Finished { valid_loss }) => {
                        losses.insert(*seed, *valid_loss);
                    }
                    Some(PairOutcome::Diverged { .. }) => diverged += 1,
                    None => {}
                }
            }
            let values: Vec<f64> = losses.values().copied().collect();
            let perplexities: Vec<f64> = values.iter().map(|l| l.exp()).collect();
            let ((loss_mean, loss_std), (perplexity_mean, perplexity_std)) =
                (mean_std(&values), mean_std(&perplexities));
            SchemeResult {
                scheme: arm,
                layers,
                finished: losses.len(),
                diverged,
                losses,
                loss_mean,
                loss_std,
                perplexity_mean,
                perplexity_std,
                best: false,
            }
        })
        .collect();
    for layers in depths_of(&results) {
        let best = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.layers == layers)
            // A scheme that lost a seed to divergence is not the best on its lucky seeds.
            .filter(|(_, r)| r.diverged == 0)
            .filter_map(|(i, r)| r.loss_mean.map(|m| (i, m)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i);
        if let Some(i) = best {
            results[i].best = true;
        }
    }
    results
}

/// The depths of the rows, in order (`[None]` without a depth axis).
pub(super) fn depths_of(results: &[SchemeResult]) -> Vec<Option<usize>> {
    distinct(results.iter().map(|r| r.layers))
}
