//! Progress as events, for logs and pipes (burn-train's TUI dashboard is used on a terminal): a
//! [`TrainEvent::Progress`] every `log_every` steps and a [`TrainEvent::Evaluated`] after each
//! validation pass.
//!
//! It replaces burn-train's `CliMetricsRenderer`, which prints its own lines on standard output
//! (the library prints nothing) and reports neither the loss nor the rate to the caller.

use std::collections::HashMap;

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, MetricId};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation, MetricsRendererTraining,
};

use super::events::{Events, TrainEvent};

/// Reports metric lines such as `Loss 2.1234 | Perplexity 8.37 | ...` as events.
pub struct PlainRenderer {
    events: Events,
    names: HashMap<MetricId, String>,
    values: Vec<(String, f64)>,
    split: String,
    epoch: usize,
    iteration: usize,
    micro_batches_per_epoch: usize,
    micro_batches_per_step: usize,
    total_steps: usize,
    log_every: usize,
}

impl PlainRenderer {
    /// A renderer for a run of `total_steps` optimiser steps of `micro_batches_per_step` reports each
    /// (accumulation steps times devices), sending its events to `events`.
    pub fn new(
        events: Events,
        total_steps: usize,
        steps_per_epoch: usize,
        micro_batches_per_step: usize,
        log_every: usize,
    ) -> Self {
        Self {
            events,
            names: HashMap::new(),
            values: Vec::new(),
            split: String::new(),
            epoch: 0,
            iteration: 0,
            micro_batches_per_epoch: steps_per_epoch * micro_batches_per_step,
            micro_batches_per_step,
            total_steps,
            log_every,
        }
    }

    fn record(&mut self, state: MetricState) {
        if let MetricState::Numeric(entry, Some(value)) = state {
            let name = self.names.get(&entry.metric_id).cloned().unwrap_or_default();
            self.values.retain(|(known, _)| *known != name);
            self.values.push((name, value.current()));
        }
    }

    fn line(&self) -> String {
        let metrics: Vec<String> =
            self.values.iter().map(|(name, value)| format!("{name} {}", format_value(*value))).collect();
        metrics.join(" | ")
    }

    fn step(&self) -> usize {
        ((self.epoch.saturating_sub(1)) * self.micro_batches_per_epoch + self.iteration) / self.micro_batches_per_step
    }
}

fn format_value(value: f64) -> String {
    if value != 0.0 && (value.abs() >= 1e5 || value.abs() < 1e-3) {
        format!("{value:.3e}")
    } else {
        format!("{value:.4}")
    }
}

impl MetricsRendererTraining for PlainRenderer {
    fn update_train(&mut self, state: MetricState) {
        self.record(state);
    }
    fn update_valid(&mut self, state: MetricState) {
        self.record(state);
    }
}

impl MetricsRendererEvaluation for PlainRenderer {
    fn update_test(&mut self, _name: EvaluationName, state: MetricState) {
        self.record(state);
    }
}

impl TrainingProgressLogger for PlainRenderer {
    fn start(&mut self, _total: usize, start: usize, _items: Option<usize>, _label: Option<&str>) {
        self.epoch = start;
    }
    fn update_epoch(&mut self, epoch: usize) {
        self.epoch = epoch + 1;
    }
    fn start_split(&mut self, split: &str, _total_items: usize) {
        self.split = split.to_string();
        self.iteration = 0;
        self.values.clear();
    }
    fn update_split(&mut self, _items: usize) {
        self.iteration += 1;
        let step = self.step();
        if self.split == "train" && self.iteration.is_multiple_of(self.micro_batches_per_step) {
            // The step's last micro-batch: every metric holds the step's value, over all its
            // micro-batches and devices.
            if step.is_multiple_of(self.log_every) {
                self.events.send(TrainEvent::Progress { step, total_steps: self.total_steps, metrics: self.line() });
            }
            // A metric the next step does not report (the gradient norm of a skipped step) is left
            // out of its line rather than shown with this step's value.
            self.values.clear();
        }
    }
    fn end_split(&mut self) {
        if self.split != "train" {
            let (split, step, metrics) = (self.split.clone(), self.step_at_epoch_end(), self.line());
            self.events.send(TrainEvent::Evaluated { split, step, metrics });
        }
    }
    fn end(&mut self) {}
    fn log_event_training(&mut self, _event: String) {}
}

impl PlainRenderer {
    fn step_at_epoch_end(&self) -> usize {
        (self.epoch * self.micro_batches_per_epoch / self.micro_batches_per_step).min(self.total_steps)
    }
}

impl EvaluationProgressLogger for PlainRenderer {
    fn start_global_progress(&mut self, _total: usize) {}
    fn start_test(&mut self, _name: &str, _total: usize) {}
    fn update_test_progress(&mut self, _items: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _event: String) {}
}

impl MetricsRenderer for PlainRenderer {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name.to_string());
    }
}
