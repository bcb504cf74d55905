//! The layer-removal report of a BERT-style encoder (`report.json`, `layers.csv`, `summary.md`
//! and a PNG figure), and its contrast with Pre-LN decoders in one comparison directory: the
//! paper's figure 2. Each directory appears whole or not at all.

use std::path::Path;

use serde::Serialize;

use super::{ComparedRun, LineChart};
use crate::hf::{BertConfig, LayerRemoval};
use crate::run::{COMPARISON, REPORT};

/// What the report says of the metric, wherever it is shown.
const METRIC: &str = "masked-token pseudo-perplexity (Salazar et al. 2020): each token but [CLS] and [SEP] masked \
                      in turn and scored with the rest visible; the paper measured BERT-Large on SQuAD v1.1 instead, \
                      which needs a fine-tuned head";

/// Every number of an encoder's layer-removal report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EncoderReport {
    /// The model directory.
    pub model: String,
    /// Its config.
    pub config: BertConfig,
    /// How performance is measured.
    pub metric: String,
    /// Tokens per sequence, `[CLS]` and `[SEP]` included.
    pub seq_len: usize,
    /// Pseudo-perplexity of the full model and with each layer removed.
    pub layer_removal: LayerRemoval,
}

/// An encoder's report in a comparison, under its label.
#[derive(Clone, Debug)]
pub struct ComparedEncoder {
    /// Legend label and sub-directory name.
    pub label: String,
    /// Title of its own report.
    pub title: String,
    /// The report.
    pub report: EncoderReport,
}

impl EncoderReport {
    /// A report of the encoder in `model` (a directory) with `config`, scored on sequences of `seq_len` tokens.
    pub fn new(model: &Path, config: BertConfig, seq_len: usize, layer_removal: LayerRemoval) -> Self {
        Self { model: model.display().to_string(), config, metric: METRIC.into(), seq_len, layer_removal }
    }

    /// Writes the report into `dir`, which appears whole or not at all.
    pub fn write(&self, dir: &Path, title: &str) -> std::io::Result<()> {
        crate::io::write_dir_atomically(dir, REPORT, |tmp| self.write_into(tmp, title).map(drop))
    }

    /// Writes `report.json`, `layers.csv`, `pseudo_perplexity_drop.png` and `summary.md` into the
    /// existing directory `dir`; returns the figures' names.
    pub fn write_into(&self, dir: &Path, title: &str) -> std::io::Result<Vec<String>> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(REPORT), json)?;
        let removal = &self.layer_removal;
        let mut csv = String::from("layer,pseudo_perplexity_without,pseudo_perplexity_drop\n");
        for ((layer, without), drop) in
            removal.removed_layers.iter().zip(&removal.pseudo_perplexity_without).zip(&removal.pseudo_perplexity_drop)
        {
            csv.push_str(&format!("{layer},{without},{drop}\n"));
        }
        std::fs::write(dir.join("layers.csv"), csv)?;
        let figure = "pseudo_perplexity_drop.png";
        LineChart::new("Pseudo-perplexity change when one layer is removed", "layer removed", "dPPPL")
            .with_series("", self.drops())
            .write_png(&dir.join(figure))?;
        std::fs::write(
            dir.join("summary.md"),
            format!("{}\n## Figures\n\n![{figure}]({figure})\n", self.summary(title)),
        )?;
        Ok(vec![figure.to_string()])
    }

    /// `(layer, dPPPL)` of every removed layer.
    fn drops(&self) -> Vec<(f64, f64)> {
        let removal = &self.layer_removal;
        removal.removed_layers.iter().zip(&removal.pseudo_perplexity_drop).map(|(&l, &d)| (l as f64, d)).collect()
    }

    /// A Markdown summary with one row per removed layer.
    pub fn summary(&self, title: &str) -> String {
        let removal = &self.layer_removal;
        let mut md = format!(
            "# {title}\n\nA Post-LN encoder of {} layers; pseudo-perplexity {:.4} over {} tokens ({} sequences of {} \
             tokens).\n\nMetric: {}.\n\n| layer removed | pseudo-perplexity | dPPPL | change |\n|---|---|---|---|\n",
            self.config.num_hidden_layers,
            removal.pseudo_perplexity,
            removal.scored_tokens,
            removal.sequences,
            self.seq_len,
            self.metric
        );
        for ((layer, without), drop) in
            removal.removed_layers.iter().zip(&removal.pseudo_perplexity_without).zip(&removal.pseudo_perplexity_drop)
        {
            let percent = 100.0 * drop / removal.pseudo_perplexity;
            md.push_str(&format!("| {layer} | {without:.4} | {drop:+.4} | {percent:+.2}% |\n"));
        }
        md
    }
}

/// One model's change of performance when each layer is removed, in a comparison.
struct RemovalCurve {
    /// Legend label.
    label: String,
    /// `decoder` or `Post-LN encoder`.
    kind: &'static str,
    /// What is measured: `perplexity` or `pseudo-perplexity`.
    metric: &'static str,
    /// The full model's value.
    full: f64,
    /// The model's number of layers.
    layers: usize,
    /// `(layer removed, relative change in %)`.
    points: Vec<(usize, f64)>,
}

/// A mean change as the comparison's table shows it: `+1.25%`, or `-` where no layer was removed.
fn percent_cell(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:+.2}%"))
}

/// The mean relative change (%) of the removals of layers in `1..=half` and in `half+1..=n`;
/// `None` for a half none of whose layers was removed.
fn half_means(points: &[(usize, f64)], n_layers: usize) -> (Option<f64>, Option<f64>) {
    let mean = |deep: bool| {
        let values: Vec<f64> = points.iter().filter(|(l, _)| (*l > n_layers / 2) == deep).map(|p| p.1).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    (mean(false), mean(true))
}

/// Writes a comparison directory of decoders (their perplexity reports) and encoders (their
/// pseudo-perplexity reports), whole or not at all: each model's report in a sub-directory named
/// by its label, `layer_removal.png` with every model's relative change when each layer is
/// removed (the paper's figure 2, side by side), `comparison.md` and `comparison.json`.
pub fn write_removal_comparison(
    decoders: &[ComparedRun],
    encoders: &[ComparedEncoder],
    dir: &Path,
) -> std::io::Result<()> {
    crate::io::write_dir_atomically(dir, COMPARISON, |tmp| {
        let sub_dir = |label: &str| {
            let sub = tmp.join(label);
            std::fs::create_dir_all(&sub).map(|()| sub)
        };
        let mut curves: Vec<RemovalCurve> = Vec::new();
        for run in decoders {
            run.report.write_into(&sub_dir(&run.label)?, &run.title)?;
            let report = &run.report;
            let changes = report.pruned_layers.iter().zip(&report.pruning_drop);
            curves.push(RemovalCurve {
                label: run.label.clone(),
                kind: "decoder",
                metric: "perplexity",
                full: report.perplexity,
                layers: report.n_layers,
                points: changes.map(|(&l, &d)| (l, 100.0 * d / report.perplexity)).collect(),
            });
        }
        for encoder in encoders {
            encoder.report.write_into(&sub_dir(&encoder.label)?, &encoder.title)?;
            let removal = &encoder.report.layer_removal;
            let changes = removal.removed_layers.iter().zip(&removal.pseudo_perplexity_drop);
            curves.push(RemovalCurve {
                label: encoder.label.clone(),
                kind: "Post-LN encoder",
                metric: "pseudo-perplexity",
                full: removal.pseudo_perplexity,
                layers: encoder.report.config.num_hidden_layers,
                points: changes.map(|(&l, &d)| (l, 100.0 * d / removal.pseudo_perplexity)).collect(),
            });
        }
        let figure = "layer_removal.png";
        curves
            .iter()
            .fold(
                LineChart::new("Change when one layer is removed", "layer removed", "change of (pseudo-)perplexity, %"),
                |chart, curve| {
                    chart.with_series(&curve.label, curve.points.iter().map(|&(l, p)| (l as f64, p)).collect())
                },
            )
            .write_png(&tmp.join(figure))?;
        let mut md = String::from(
            "# Layer removal: Post-LN encoders and decoders\n\nThe change of each model's performance when one layer \
             is removed, relative to the full model (the paper's figure 2). Decoders: perplexity on the evaluation \
             text. Encoders: masked-token pseudo-perplexity; the paper measured BERT-Large on SQuAD v1.1, so compare \
             the shape of the curves, not the numbers.\n\n| model | kind | layers | metric | full model | mean change, \
             first half | mean change, second half |\n|---|---|---|---|---|---|---|\n",
        );
        let mut summaries = Vec::new();
        for RemovalCurve { label, kind, metric, full, layers, points } in &curves {
            let (shallow, deep) = half_means(points, *layers);
            md.push_str(&format!(
                "| {label} | {kind} | {layers} | {metric} | {full:.4} | {} | {} |\n",
                percent_cell(shallow),
                percent_cell(deep)
            ));
            summaries.push(serde_json::json!({
                "label": label, "kind": kind, "n_layers": layers, "metric": metric, "full_model": full,
                "relative_change_percent": points.iter().map(|(l, p)| serde_json::json!({"layer": l, "change": p})).collect::<Vec<_>>(),
                "mean_change_first_half": shallow, "mean_change_second_half": deep,
            }));
        }
        md.push_str("\nEach model's full report is in its sub-directory:\n\n");
        let titles = decoders.iter().map(|r| (&r.label, &r.title)).chain(encoders.iter().map(|e| (&e.label, &e.title)));
        for (label, title) in titles {
            md.push_str(&format!("- [{label}]({label}/summary.md): {title}\n"));
        }
        md.push_str(&format!("\n## Figures\n\n![{figure}]({figure})\n"));
        let json = serde_json::to_string_pretty(&summaries).map_err(std::io::Error::other)?;
        std::fs::write(tmp.join(COMPARISON), json)?;
        std::fs::write(tmp.join("comparison.md"), md)
    })
}
