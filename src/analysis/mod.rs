//! The paper's instruments for the curse of depth: layer-wise variance, angular distance between
//! layers, how close each block is to the identity, and the performance drop of layer pruning.

mod angular;
mod identity;
mod multiple_choice;
mod pruning;
mod report;
mod variance;

pub use angular::{angular_distance, angular_distance_matrix, normalize_rows};
pub use identity::{identity_ratios, update_ratio};
pub use multiple_choice::{
    continuation_log_likelihood, read_choice_items, score_choices, ChoiceAccuracy, ChoiceItem,
};
pub use pruning::{mean_loss, perplexity, pruning_drops};
pub use report::{analyze, choice_report, ChoiceReport, Report};
pub use variance::{layer_variances, token_variance, LayerVariances};
