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
