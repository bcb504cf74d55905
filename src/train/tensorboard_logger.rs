//! burn-train's `MetricLogger` for TensorBoard, which burn-train lacks: every numeric metric of
//! a learner as scalars in an event file, one point per optimiser step.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use layernorm_scaling::train::TensorBoardLogger;
//! let logger = TensorBoardLogger::new("runs/my-run/tensorboard")?;
//! // supervised_training.with_metric_logger(logger) ...
//! # Ok(()) }
//! ```
//!
//! Training values are written at each optimiser step's last micro-batch (see
//! [`with_micro_batches`](TensorBoardLogger::with_micro_batches)), gathered over the step's
//! micro-batches, under `train/<metric>` ([`tensorboard::history`](crate::tensorboard::history));
//! a validation's final values under `valid/<metric>` at the step it validated. The values are
//! also kept in memory for burn-train to read back (its checkpointing strategies do).

use std::collections::HashMap;
use std::path::Path;

use burn::train::logger::{InMemoryMetricLogger, MetricLogger};
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};

use crate::tensorboard::history::{tag, StepValues};
use crate::tensorboard::{EventSink, EventWriter};

/// Writes a learner's numeric metrics to a TensorBoard event file.
pub struct TensorBoardLogger {
    sink: EventSink,
    memory: InMemoryMetricLogger,
    names: HashMap<MetricId, String>,
    micro_batches: usize,
    /// Optimiser steps done, the run's earlier ones included.
    steps: usize,
    /// Training batches of the step in progress logged so far.
    batches_in_step: usize,
    step_values: StepValues,
}

impl TensorBoardLogger {
    /// A logger writing a new event file in `dir` (made if missing).
    pub fn new(dir: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self::to_sink(EventSink::new(EventWriter::create(dir.as_ref())?)))
    }

    /// A logger writing through `sink` (shared with other writers of the same file).
    pub fn to_sink(sink: EventSink) -> Self {
        Self {
            sink,
            memory: InMemoryMetricLogger::new(),
            names: HashMap::new(),
            micro_batches: 1,
            steps: 0,
            batches_in_step: 0,
            step_values: StepValues::default(),
        }
    }

    /// `micro_batches` training batches make one optimiser step (gradient accumulation times
    /// devices); 1 by default.
    pub fn with_micro_batches(mut self, micro_batches: usize) -> Self {
        self.micro_batches = micro_batches.max(1);
        self
    }

    /// The first step logged is `steps + 1` (a resumed run's `steps` done before); 0 by default.
    pub fn starting_after(mut self, steps: usize) -> Self {
        self.steps = steps;
        self
    }

    /// The event file's writer, to share with other writers of the run.
    pub fn sink(&self) -> EventSink {
        self.sink.clone()
    }
}

impl MetricLogger for TensorBoardLogger {
    fn log(&mut self, update: MetricsUpdate, epoch: usize, split: &Split) {
        let split_name = split.to_string();
        let is_train = matches!(split, Split::Train);
        let mut finals = Vec::new();
        // Whether this update is a batch's (an epoch's end gives final values only).
        let mut of_a_batch = false;
        for numeric in &update.entries_numeric {
            let entry = &numeric.entry;
            let Some(metric) = self.names.get(&entry.metric_id) else { continue };
            if entry.serialized_entry.is_not_available() {
                // A metric that reports nothing for this batch (a step's earlier micro-batches).
                of_a_batch = true;
                continue;
            }
            let Ok(value) = NumericEntry::deserialize(&entry.serialized_entry.serialized) else { continue };
            let (value, count) = match value {
                NumericEntry::Final(value) => {
                    finals.push((tag(&split_name, metric), value));
                    continue;
                }
                NumericEntry::Value(value) => (value, None),
                NumericEntry::Aggregated { aggregated_value, count } => (aggregated_value, Some(count)),
            };
            of_a_batch = true;
            // Validation's batch values are not charted: its final values are.
            if is_train {
                self.step_values.add(tag(&split_name, metric), value, count);
            }
        }
        if is_train && of_a_batch {
            self.batches_in_step += 1;
            if self.batches_in_step == self.micro_batches {
                self.batches_in_step = 0;
                self.steps += 1;
                self.sink.scalars(self.steps as u64, &self.step_values.take());
            }
        } else if !is_train && !finals.is_empty() {
            self.sink.scalars(self.steps as u64, &finals);
        }
        self.memory.log(update, epoch, split);
    }

    fn read_numeric(&mut self, name: &str, epoch: usize, split: &Split) -> Result<Vec<NumericEntry>, String> {
        self.memory.read_numeric(name, epoch, split)
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id.clone(), definition.name.to_string());
        self.memory.log_metric_definition(definition);
    }

    fn log_epoch_summary(&mut self, summary: EpochSummary) {
        // Durable at every validation, as `metrics.jsonl`.
        self.sink.sync();
        self.memory.log_epoch_summary(summary);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use burn::train::metric::store::NumericMetricUpdate;
    use burn::train::metric::{MetricAttributes, MetricEntry, SerializedEntry};

    use super::*;
    use crate::tensorboard::proto::{ValueKind, What};
    use crate::tensorboard::record::read_events;

    fn define(logger: &mut TensorBoardLogger, name: &str) -> MetricId {
        let id = MetricId::new(Arc::new(name.to_string()));
        logger.log_metric_definition(MetricDefinition {
            metric_id: id.clone(),
            name: Arc::new(name.to_string()),
            description: None,
            attributes: MetricAttributes::None,
        });
        id
    }

    fn update(entries: &[(&MetricId, Option<NumericEntry>)]) -> MetricsUpdate {
        let entries_numeric = entries
            .iter()
            .map(|(id, entry)| {
                let serialized = match entry {
                    Some(entry) => SerializedEntry::new(String::new(), entry.serialize()),
                    None => SerializedEntry::not_available(None),
                };
                NumericMetricUpdate {
                    entry: MetricEntry::new((*id).clone(), serialized),
                    numeric_entry: entry.clone(),
                    running_entry: None,
                }
            })
            .collect();
        MetricsUpdate { entries: Vec::new(), entries_numeric }
    }

    #[test]
    fn a_step_of_two_micro_batches_is_one_point_and_a_validation_its_final_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut logger = TensorBoardLogger::new(dir.path()).unwrap().with_micro_batches(2).starting_after(10);
        let (loss, lr, norm) =
            (define(&mut logger, "Loss"), define(&mut logger, "Learning Rate"), define(&mut logger, "Gradient norm"));
        let tokens = |value, count| Some(NumericEntry::Aggregated { aggregated_value: value, count });
        // Step 11: losses 2 (100 tokens) and 4 (300 tokens); the norm on its last micro-batch.
        logger.log(
            update(&[(&loss, tokens(2.0, 100)), (&lr, Some(NumericEntry::Value(0.1))), (&norm, None)]),
            1,
            &Split::Train,
        );
        logger.log(
            update(&[(&loss, tokens(4.0, 300)), (&lr, Some(NumericEntry::Value(0.2))), (&norm, tokens(0.5, 1))]),
            1,
            &Split::Train,
        );
        // The epoch's final training values are not charted; the validation's are, at step 11.
        logger.log(update(&[(&loss, Some(NumericEntry::Final(9.0)))]), 1, &Split::Train);
        logger.log(update(&[(&loss, tokens(1.0, 50))]), 1, &Split::Valid);
        logger.log(update(&[(&loss, Some(NumericEntry::Final(1.5)))]), 1, &Split::Valid);
        let bytes = std::fs::read(logger.sink().path()).unwrap();
        let (events, torn) = read_events(&bytes);
        assert!(!torn);
        let points: Vec<(i64, String, f32)> = events
            .iter()
            .filter_map(|event| match &event.what {
                Some(What::Summary(summary)) => Some((event.step, summary)),
                _ => None,
            })
            .flat_map(|(step, summary)| {
                summary.value.iter().map(move |value| match value.value {
                    Some(ValueKind::SimpleValue(v)) => (step, value.tag.clone(), v),
                    _ => panic!("not a scalar"),
                })
            })
            .collect();
        let expected = [
            (11, "train/gradient_norm".to_string(), 0.5),
            (11, "train/learning_rate".to_string(), 0.2),
            (11, "train/loss".to_string(), 3.5),
            (11, "valid/loss".to_string(), 1.5),
        ];
        assert_eq!(points, expected);
        // burn-train reads the values back from memory.
        let read = logger.read_numeric("Loss", 1, &Split::Valid).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(logger.sink().failure(), None);
    }
}
