//! Measurements that training and the analysis share: the layer-wise variance of a forward pass,
//! the mean loss on held-out data, and the tracking and metric records a run writes.

#[cfg(feature = "data")]
mod loss;
mod metric_record;
mod tracking_record;
mod variance;

#[cfg(feature = "data")]
pub use loss::{evaluation_batches, mean_loss};
#[cfg(feature = "train")]
pub(crate) use metric_record::parse_metric_lines;
pub use metric_record::{first_non_finite_loss, read_metrics, MetricRow, METRICS_FILE};
#[cfg(feature = "train")]
pub(crate) use tracking_record::read_tracking_lines;
pub use tracking_record::{read_tracking, TrackRecord, TRACKING_FILE};
pub use variance::{layer_variances, token_variance, LayerVariances};
