//! Measurements that training and the analysis share: the layer-wise variance and largest
//! activation of a forward pass, and the mean loss on held-out data. The records a run writes of
//! them (`metrics.jsonl`, `tracking.jsonl`) are the run directory's ([`crate::run`]).

mod activation;
#[cfg(feature = "data")]
mod loss;
mod variance;

pub use activation::{max_abs, max_abs_activations, FP16_MAX};
#[cfg(feature = "data")]
pub use loss::{evaluation_batches, mean_loss};
pub use variance::{layer_variances, token_variance, LayerVariances};
