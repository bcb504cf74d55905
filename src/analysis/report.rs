//! A diagnostics report of one model: every number as JSON and CSV plus a Markdown summary,
//! written into a directory that appears whole or not at all.

use std::path::Path;

use serde::Serialize;

use super::{
    angular_distance_matrix, identity_ratios, layer_variances, normalize_rows, pruning_drops, score_choices,
    ChoiceAccuracy, ChoiceItem,
};
use crate::data::{PackedDataset, Tokenizer};
use crate::model::Llama;
use crate::ConfigError;

/// Every number of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Number of blocks.
    pub n_layers: usize,
    /// Variance of the embedding output and of each block's output.
    pub block_output_variance: Vec<f64>,
    /// Variance after each block's attention sub-layer.
    pub after_attention_variance: Vec<f64>,
    /// `||f(x)|| / ||x||` per block.
    pub identity_ratio: Vec<f64>,
    /// `angular_distance[l][n - 1]` between `hidden[l]` and `hidden[l + n]`.
    pub angular_distance: Vec<Vec<f64>>,
    /// The same, min-max normalised per row.
    pub angular_distance_normalized: Vec<Vec<f64>>,
    /// Perplexity of the full model on the evaluation data.
    pub perplexity: f64,
    /// `dP(l) = PPL_pruned(l) - PPL` per layer.
    pub pruning_drop: Vec<f64>,
    /// Multiple-choice accuracy and its change when each layer is removed, when a task was given.
    pub multiple_choice: Option<ChoiceReport>,
}

/// Multiple-choice accuracy of the full model and `dP(l) = acc_pruned(l) - acc` per layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChoiceReport {
    /// Questions scored.
    pub questions: usize,
    /// Accuracy of the full model.
    pub accuracy: ChoiceAccuracy,
    /// Change of `acc` when each layer is removed.
    pub acc_drop: Vec<f64>,
    /// Change of `acc_norm` when each layer is removed.
    pub acc_norm_drop: Vec<f64>,
}

/// Scores `items` with the full model and with each single layer removed.
pub fn choice_report(
    model: &Llama,
    tokenizer: &Tokenizer,
    items: &[ChoiceItem],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ChoiceReport, ConfigError> {
    let layers = model.n_layers();
    let (accuracy, _) = score_choices(model, tokenizer, items, &[])?;
    progress(1, layers + 1);
    let (mut acc_drop, mut acc_norm_drop) = (Vec::new(), Vec::new());
    for layer in 1..=layers {
        let (pruned, _) = score_choices(model, tokenizer, items, &[layer])?;
        acc_drop.push(pruned.acc - accuracy.acc);
        acc_norm_drop.push(pruned.acc_norm - accuracy.acc_norm);
        progress(layer + 1, layers + 1);
    }
    Ok(ChoiceReport { questions: items.len(), accuracy, acc_drop, acc_norm_drop })
}

/// Measures `model` on the first `batches` batches of `data`.
pub fn analyze(
    model: &Llama,
    data: &PackedDataset,
    batch_size: usize,
    batches: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, ConfigError> {
    use burn::data::dataloader::batcher::Batcher;
    use burn::data::dataset::Dataset;
    let device = model.embed_tokens.weight.device();
    let n = data.len().min(batch_size);
    if n == 0 {
        return Err(ConfigError::Unsupported(
            "the evaluation data holds no full sequence; give more text or a shorter --seq-len".into(),
        ));
    }
    let batch = crate::data::LmBatcher.batch((0..n).map(|i| data.window(i)).collect(), &device);
    let trace = model.forward_trace(batch.inputs);
    let variances = layer_variances(&trace);
    let angular = angular_distance_matrix(&trace.hidden);
    let (perplexity, pruning_drop) = pruning_drops(model, data, batch_size, batches, progress)?;
    Ok(Report {
        n_layers: model.n_layers(),
        block_output_variance: variances.block_output,
        after_attention_variance: variances.after_attention,
        identity_ratio: identity_ratios(&trace),
        angular_distance_normalized: normalize_rows(&angular),
        angular_distance: angular,
        perplexity,
        pruning_drop,
        multiple_choice: None,
    })
}

impl Report {
    /// Writes `report.json`, `layers.csv`, `angular_distance.csv` and `summary.md` into `dir`:
    /// built in a temporary sibling directory and renamed, so `dir` never holds half a report.
    pub fn write(&self, dir: &Path, title: &str) -> std::io::Result<()> {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "report".into());
        let tmp = parent.join(format!(".{name}.tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let result = self.write_files(&tmp, title).and_then(|()| {
            if dir.exists() {
                std::fs::remove_dir_all(dir)?;
            }
            std::fs::rename(&tmp, dir)
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    fn write_files(&self, dir: &Path, title: &str) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("report.json"), json)?;
        let mut layers = String::from("layer,block_output_variance,after_attention_variance,identity_ratio,pruning_drop\n");
        layers.push_str(&format!("0,{},,,\n", self.block_output_variance[0]));
        for l in 1..=self.n_layers {
            layers.push_str(&format!(
                "{l},{},{},{},{}\n",
                self.block_output_variance[l],
                self.after_attention_variance[l - 1],
                self.identity_ratio[l - 1],
                self.pruning_drop[l - 1]
            ));
        }
        std::fs::write(dir.join("layers.csv"), layers)?;
        let mut angular = String::from("layer,n,distance,normalized\n");
        for (l, (row, normalized)) in self.angular_distance.iter().zip(&self.angular_distance_normalized).enumerate() {
            for (n, (d, norm)) in row.iter().zip(normalized).enumerate() {
                angular.push_str(&format!("{l},{},{d},{norm}\n", n + 1));
            }
        }
        std::fs::write(dir.join("angular_distance.csv"), angular)?;
        std::fs::write(dir.join("summary.md"), self.summary(title))
    }

    /// A Markdown summary with one row per layer.
    pub fn summary(&self, title: &str) -> String {
        let mut md = format!(
            "# {title}\n\n{} layers; perplexity {:.4}.\n\n| layer | output variance | identity ratio | dPPL when removed |\n|---|---|---|---|\n",
            self.n_layers, self.perplexity
        );
        for l in 1..=self.n_layers {
            md.push_str(&format!(
                "| {l} | {:.4e} | {:.4} | {:+.4} |\n",
                self.block_output_variance[l],
                self.identity_ratio[l - 1],
                self.pruning_drop[l - 1]
            ));
        }
        if let Some(choices) = &self.multiple_choice {
            md.push_str(&format!(
                "\nMultiple choice ({} questions): acc {:.4}, acc_norm {:.4}.\n\n| layer removed | d acc | d acc_norm |\n|---|---|---|\n",
                choices.questions, choices.accuracy.acc, choices.accuracy.acc_norm
            ));
            for (l, (a, n)) in choices.acc_drop.iter().zip(&choices.acc_norm_drop).enumerate() {
                md.push_str(&format!("| {} | {a:+.4} | {n:+.4} |\n", l + 1));
            }
        }
        md
    }
}
