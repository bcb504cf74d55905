//! What a run's records become in TensorBoard: the tags, one point per optimiser step.
//!
//! | record | tag | step |
//! |---|---|---|
//! | a training value (`metrics.jsonl`, split `train`) | `train/<metric>`: `train/loss`, `train/perplexity`, `train/learning_rate`, `train/tokens_per_second`, `train/gradient_norm` | the optimiser step; micro-batches of one step give their mean, weighted by their counts (tokens for the loss) |
//! | a validation's final value (split `valid`) | `valid/loss`, `valid/perplexity` | the step validated |
//! | a tracking record (`tracking.jsonl`) | `layers/output_variance/00` (the embedding), `.../01` (block 1), ...; `layers/attention_variance/<block>`, `layers/grad_norm/<block>`, `layers/max_activation/<layer>` | the record's step |

use std::collections::BTreeMap;

use crate::run::{MetricRow, TrackRecord};

/// The tag of burn-train's metric `metric` in `split`: `split/` and the name in snake case
/// (`Learning Rate` in `train` is `train/learning_rate`).
pub fn tag(split: &str, metric: &str) -> String {
    let mut name = String::with_capacity(metric.len());
    for c in metric.trim().chars() {
        match c {
            c if c.is_ascii_alphanumeric() => name.push(c.to_ascii_lowercase()),
            _ if !name.is_empty() && !name.ends_with('_') => name.push('_'),
            _ => {}
        }
    }
    format!("{split}/{}", name.trim_end_matches('_'))
}

/// One optimiser step's values, gathered over its micro-batches: a value with a count (the
/// loss over its tokens) as the count-weighted mean, a plain value as its last; a count of 0
/// (a micro-batch that reports nothing) is left out.
#[derive(Debug, Default)]
pub struct StepValues {
    values: BTreeMap<String, Gathered>,
}

#[derive(Debug)]
enum Gathered {
    Mean { sum: f64, weight: f64 },
    Last(f64),
}

impl StepValues {
    /// Adds one micro-batch's `value` of `tag`, averaged over `count` items (or a plain value).
    pub fn add(&mut self, tag: String, value: f64, count: Option<usize>) {
        match count {
            Some(0) => {}
            Some(count) => {
                let weight = count as f64;
                match self.values.entry(tag).or_insert(Gathered::Mean { sum: 0.0, weight: 0.0 }) {
                    Gathered::Mean { sum, weight: total } => {
                        *sum += value * weight;
                        *total += weight;
                    }
                    last => *last = Gathered::Mean { sum: value * weight, weight },
                }
            }
            None => {
                self.values.insert(tag, Gathered::Last(value));
            }
        }
    }

    /// The step's values, `(tag, value)` by tag; empties the gathering for the next step.
    pub fn take(&mut self) -> Vec<(String, f64)> {
        std::mem::take(&mut self.values)
            .into_iter()
            .map(|(tag, gathered)| match gathered {
                Gathered::Mean { sum, weight } => (tag, sum / weight),
                Gathered::Last(value) => (tag, value),
            })
            .collect()
    }
}

/// The points of a run's metric records, `(step, values)` by step: the training values of every
/// step, gathered over its micro-batches, and each validation's final values; steps after
/// `up_to` are left out.
pub fn metric_points(rows: &[MetricRow], up_to: Option<usize>) -> Vec<(u64, Vec<(String, f64)>)> {
    let mut steps: BTreeMap<usize, (StepValues, Vec<(String, f64)>)> = BTreeMap::new();
    for row in rows.iter().filter(|row| up_to.is_none_or(|last| row.step <= last)) {
        let (train, valid) = steps.entry(row.step).or_default();
        match (row.split.as_str(), row.is_final) {
            ("train", false) => train.add(tag("train", &row.metric), row.value, row.count),
            ("train", true) => {}
            (split, true) => valid.push((tag(split, &row.metric), row.value)),
            (_, false) => {}
        }
    }
    steps
        .into_iter()
        .map(|(step, (mut train, valid))| (step as u64, train.take().into_iter().chain(valid).collect::<Vec<_>>()))
        .filter(|(_, values)| !values.is_empty())
        .collect()
}

/// The per-layer values of a tracking record, as scalars tagged by quantity and layer (layer 0
/// is the embedding's output, layer `l` block `l`'s; numbers padded to sort in order).
pub fn layer_points(record: &TrackRecord) -> Vec<(String, f64)> {
    let width = record.block_output_variance.len().max(10).to_string().len();
    let mut points = Vec::new();
    let mut add = |quantity: &str, first: usize, values: &[f64]| {
        for (index, value) in values.iter().enumerate() {
            points.push((format!("layers/{quantity}/{:0width$}", first + index), *value));
        }
    };
    add("output_variance", 0, &record.block_output_variance);
    add("attention_variance", 1, &record.after_attention_variance);
    add("grad_norm", 1, &record.grad_norm);
    add("max_activation", 0, &record.max_abs_activation);
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(split: &str, batch: usize, step: usize, metric: &str, value: f64, count: Option<usize>) -> MetricRow {
        MetricRow {
            split: split.into(),
            epoch: 1,
            batch,
            step,
            metric: metric.into(),
            value,
            count,
            is_final: batch == 0,
        }
    }

    #[test]
    fn tags_are_snake_case_under_their_split() {
        assert_eq!(tag("train", "Learning Rate"), "train/learning_rate");
        assert_eq!(tag("valid", "Loss"), "valid/loss");
        assert_eq!(tag("train", "Tokens per second"), "train/tokens_per_second");
        assert_eq!(tag("train", " MFU (%) "), "train/mfu");
    }

    #[test]
    fn micro_batches_give_one_point_per_step() {
        let rows = [
            // Step 1 over two micro-batches: losses 2 (100 tokens) and 4 (300 tokens); the norm
            // only on the step's last micro-batch.
            row("train", 1, 1, "Loss", 2.0, Some(100)),
            row("train", 1, 1, "Gradient norm", 9.0, Some(0)),
            row("train", 2, 1, "Loss", 4.0, Some(300)),
            row("train", 2, 1, "Gradient norm", 0.5, Some(1)),
            row("train", 3, 2, "Loss", 1.0, Some(10)),
            row("valid", 1, 2, "Loss", 7.0, Some(5)),
            row("train", 0, 2, "Loss", 3.0, None),
            row("valid", 0, 2, "Loss", 1.5, None),
            row("train", 4, 3, "Loss", 1.0, Some(10)),
        ];
        let points = metric_points(&rows, Some(2));
        assert_eq!(
            points,
            vec![
                (1, vec![("train/gradient_norm".into(), 0.5), ("train/loss".into(), 3.5)]),
                (2, vec![("train/loss".into(), 1.0), ("valid/loss".into(), 1.5)]),
            ]
        );
        assert_eq!(metric_points(&rows, None).len(), 3);
    }

    #[test]
    fn layers_are_numbered_from_the_embedding() {
        let record = TrackRecord {
            step: 4,
            block_output_variance: vec![1.0, 2.0, 3.0],
            after_attention_variance: vec![1.5, 2.5],
            grad_norm: vec![0.1, 0.2],
            max_abs_activation: vec![],
        };
        let points = layer_points(&record);
        assert_eq!(points.len(), 7);
        assert_eq!(points[0], ("layers/output_variance/00".into(), 1.0));
        assert_eq!(points[3], ("layers/attention_variance/01".into(), 1.5));
        assert_eq!(points[6], ("layers/grad_norm/02".into(), 0.2));
    }
}
