//! The paper's instruments for the curse of depth: layer-wise variance, angular distance between
//! layers, how close each block is to the identity, and the performance drop of layer pruning.

mod angular;
mod identity;
mod pruning;
mod report;
mod variance;

pub use angular::{angular_distance, angular_distance_matrix, normalize_rows};
pub use identity::{identity_ratios, update_ratio};
pub use pruning::{mean_loss, perplexity, pruning_drops};
pub use report::{analyze, Report};
pub use variance::{layer_variances, token_variance, LayerVariances};
