//! Block Influence (ShortGPT, Men et al. 2024, arXiv 2403.03853): `BI_l = 1 - E[cos(x_l, y_l)]`
//! over tokens, where `x_l` enters block `l` and `y_l` leaves it. A block that barely turns the
//! hidden state (BI near 0) is the one ShortGPT removes first.

use super::angular::token_cosines;
use crate::model::ForwardTrace;

/// `n_layers` values, block 1 first: `1 -` the mean over tokens of the cosine similarity between
/// each block's input and output.
pub fn block_influence(trace: &ForwardTrace) -> Vec<f64> {
    trace
        .hidden
        .windows(2)
        .map(|pair| {
            let cosines = token_cosines(&pair[0], &pair[1]);
            1.0 - cosines.iter().sum::<f64>() / cosines.len().max(1) as f64
        })
        .collect()
}
