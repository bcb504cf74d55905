//! A diagnostics report of one model: every number as JSON and CSV plus a Markdown summary,
//! written into a directory that appears whole or not at all.

use serde::Serialize;

use super::pruning::layers_or_all;
use super::trace_statistics::TraceStatistics;
use super::{logit_lens, normalize_per_n, pruning_drops, score_choices, ChoiceAccuracy, ChoiceItem};
use crate::data::{SequenceDataset, Tokenizer};
use crate::measure::{evaluation_batches, max_abs_activations};
use crate::model::{check_distinct_layers, check_finite, Llama};
use crate::run::TrackRecord;
use crate::{config_error::ConfigError, error::Error};

/// The default threshold of [`Report::effective_depth`]: a layer counts when removing it alone
/// raises the perplexity by 5% or more.
pub const EFFECTIVE_DEPTH_THRESHOLD: f64 = 0.05;

/// An error unless `threshold`, the perplexity rise at which a removed layer counts towards the
/// effective depth, is a fraction in (0, 1).
pub fn check_removal_threshold(threshold: f64) -> Result<(), ConfigError> {
    if threshold > 0.0 && threshold < 1.0 {
        return Ok(());
    }
    Err(ConfigError::OutOfRange {
        field: "removal_threshold",
        value: threshold,
        expected: "a fraction in (0, 1), e.g. 0.05 for a 5% perplexity rise",
    })
}

/// What [`analyze`] evaluates; also a command line (`clap::Args`, see [`crate::cli`]).
#[derive(Clone, Debug, PartialEq, Serialize, clap::Args)]
#[command(next_help_heading = "Evaluation")]
pub struct AnalysisOptions {
    /// Sequences per batch.
    #[arg(long, required = false)]
    pub batch_size: usize,
    /// Batches per evaluation: the perplexities and the trace statistics (variance, angular
    /// distance, identity ratio) are averaged over their tokens.
    #[arg(long, required = false)]
    pub batches: usize,
    /// The layers (1-based) to remove one at a time for the pruning drop, e.g. 1,4,8; empty: every layer.
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<usize>,
    /// Start the angular-distance heatmap at the embedding output (layer 0), not the first block.
    #[arg(long)]
    pub heatmap_embedding: bool,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        Self { batch_size: 8, batches: 8, layers: Vec::new(), heatmap_embedding: false }
    }
}

impl AnalysisOptions {
    /// An error for options no model can be analysed with: no sequences per batch, no batches, a
    /// layer listed twice. (Whether each layer exists is checked against the model.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.batch_size == 0 || self.batches == 0 {
            return Err(ConfigError::Zero { field: if self.batch_size == 0 { "batch_size" } else { "batches" } });
        }
        check_distinct_layers(&self.layers)
    }
}

/// Every number of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Number of blocks.
    pub n_layers: usize,
    /// Variance of the embedding output and of each block's output (`n_layers + 1`).
    pub block_output_variance: Vec<f64>,
    /// Variance after each block's attention sub-layer (`n_layers`).
    pub after_attention_variance: Vec<f64>,
    /// `||f(x)|| / ||x||` per block (`n_layers`).
    pub identity_ratio: Vec<f64>,
    /// Block Influence `1 - cos(input, output)` per block (`n_layers`; ShortGPT).
    pub block_influence: Vec<f64>,
    /// Logit lens: next-token loss of the embedding output and of each block's output read
    /// through the final norm and LM head (`n_layers + 1`; the last is the model's own loss).
    pub logit_lens_loss: Vec<f64>,
    /// Logit lens: `KL(model || lens)` of each (`n_layers + 1`; the last is 0).
    pub logit_lens_kl: Vec<f64>,
    /// The largest absolute value of the embedding output and of each block's output over the
    /// evaluated tokens (`n_layers + 1`): the margin to fp16's 65504.
    pub max_abs_activation: Vec<f64>,
    /// `angular_distance[l][n - 1]` between `hidden[l]` and `hidden[l + n]`.
    pub angular_distance: Vec<Vec<f64>>,
    /// The same, min-max normalised over `l` for each `n` (see [`normalize_per_n`]).
    pub angular_distance_normalized: Vec<Vec<f64>>,
    /// Perplexity of the full model on the evaluation data.
    pub perplexity: f64,
    /// The layers removed one at a time (1-based).
    pub pruned_layers: Vec<usize>,
    /// `dP(l) = PPL_pruned(l) - PPL` for each of `pruned_layers`.
    pub pruning_drop: Vec<f64>,
    /// Multiple-choice accuracy and its change when each layer is removed, when a task was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multiple_choice: Option<ChoiceReport>,
    /// What training recorded with `track_every`, when the run has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracking: Option<Vec<TrackRecord>>,
    /// Whether the angular-distance heatmap starts at the embedding output instead of block 1.
    pub heatmap_from_embedding: bool,
}

/// Multiple-choice accuracy of the full model and `dP(l) = acc_pruned(l) - acc` per removed layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChoiceReport {
    /// Questions scored.
    pub questions: usize,
    /// Accuracy of the full model.
    pub accuracy: ChoiceAccuracy,
    /// The layers removed one at a time (1-based).
    pub pruned_layers: Vec<usize>,
    /// Change of `acc` when each layer is removed.
    pub acc_drop: Vec<f64>,
    /// Change of `acc_norm` when each layer is removed.
    pub acc_norm_drop: Vec<f64>,
}

/// Scores `items` with the full model and with each of `layers` (1-based; empty: every layer) removed.
pub fn choice_report(
    model: &Llama,
    tokenizer: &Tokenizer,
    items: &[ChoiceItem],
    layers: &[usize],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ChoiceReport, Error> {
    let layers = layers_or_all(model, layers)?;
    let (accuracy, _) = score_choices(model, tokenizer, items, &[])?;
    progress(1, layers.len() + 1);
    let (mut acc_drop, mut acc_norm_drop) = (Vec::new(), Vec::new());
    for (done, &layer) in layers.iter().enumerate() {
        let (pruned, _) = score_choices(model, tokenizer, items, &[layer])?;
        acc_drop.push(pruned.acc - accuracy.acc);
        acc_norm_drop.push(pruned.acc_norm - accuracy.acc_norm);
        progress(done + 2, layers.len() + 1);
    }
    Ok(ChoiceReport { questions: items.len(), accuracy, pruned_layers: layers, acc_drop, acc_norm_drop })
}

/// Measures `model` on `data`: the trace statistics, perplexity and pruning drops, each over the
/// tokens of the first `options.batches` batches. `progress` sees `(done, total)` evaluations.
///
/// A model with a NaN or infinite weight (a diverged run) is refused: its report would be NaN.
pub fn analyze(
    model: &Llama,
    data: &SequenceDataset,
    options: &AnalysisOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, Error> {
    options.validate()?;
    check_finite(model, || "the model diverged; there is nothing to analyse".into())?;
    let pruned_layers = layers_or_all(model, &options.layers)?;
    let device = model.embed_tokens.weight.device();
    // Each statistic is a mean over tokens, and every sequence has as many: a batch's mean counts
    // with its number of sequences.
    let (mut sum, mut sequences) = (TraceStatistics::default(), 0);
    let mut max_abs_activation: Vec<f64> = Vec::new();
    for (batch, size) in evaluation_batches(data, options.batch_size, options.batches, &device)? {
        let trace = model.forward_trace(batch.inputs);
        let lens = logit_lens(model, &trace, batch.targets);
        let batch_max = max_abs_activations(&trace);
        max_abs_activation.resize(batch_max.len(), 0.0);
        for (max, value) in max_abs_activation.iter_mut().zip(batch_max) {
            *max = max.max(value);
        }
        sum.add(&TraceStatistics::of(&trace, lens), size as f64);
        sequences += size;
    }
    let mut stats = TraceStatistics::default();
    stats.add(&sum, 1.0 / sequences as f64);
    let (perplexity, pruning_drop) =
        pruning_drops(model, data, options.batch_size, options.batches, &pruned_layers, progress)?;
    Ok(Report {
        n_layers: model.n_layers(),
        angular_distance_normalized: normalize_per_n(&stats.angular_distance),
        block_output_variance: stats.block_output_variance,
        after_attention_variance: stats.after_attention_variance,
        identity_ratio: stats.identity_ratio,
        block_influence: stats.block_influence,
        logit_lens_loss: stats.lens.loss,
        logit_lens_kl: stats.lens.kl,
        max_abs_activation,
        angular_distance: stats.angular_distance,
        perplexity,
        pruned_layers,
        pruning_drop,
        multiple_choice: None,
        tracking: None,
        heatmap_from_embedding: options.heatmap_embedding,
    })
}

impl Report {
    /// The effective depth: how many of the removed layers raise the perplexity by at least
    /// `threshold` (relative, `0.05` for 5%) when removed alone; the others can go at that cost.
    /// Every layer of the model counts when every layer was removed (the default).
    pub fn effective_depth(&self, threshold: f64) -> usize {
        self.pruning_drop.iter().filter(|&&drop| drop >= threshold * self.perplexity).count()
    }

    /// The pruning drop of `layer` (1-based), when it was measured.
    pub fn drop_of(&self, layer: usize) -> Option<f64> {
        self.pruned_layers.iter().position(|&l| l == layer).map(|i| self.pruning_drop[i])
    }

    /// A Markdown summary with one row per layer.
    pub fn summary(&self, title: &str) -> String {
        self.summary_with_figures(title, &[])
    }

    pub(super) fn summary_with_figures(&self, title: &str, figures: &[String]) -> String {
        let mut md = format!(
            "# {title}\n\n{} layers; perplexity {:.4}.\n\n| layer | output variance | identity ratio | Block Influence \
             | logit-lens loss | logit-lens KL | max abs activation | dPPL when removed |\n|---|---|---|---|---|---|---|---|\n",
            self.n_layers, self.perplexity
        );
        let cell = |values: &[f64], i: usize, digits: usize| {
            values.get(i).map(|v| format!("{v:.digits$}")).unwrap_or_else(|| "-".into())
        };
        for l in 1..=self.n_layers {
            let drop = self.drop_of(l).map(|d| format!("{d:+.4}")).unwrap_or_else(|| "-".into());
            md.push_str(&format!(
                "| {l} | {:.4e} | {:.4} | {} | {} | {} | {} | {drop} |\n",
                self.block_output_variance[l],
                self.identity_ratio[l - 1],
                cell(&self.block_influence, l - 1, 4),
                cell(&self.logit_lens_loss, l, 4),
                cell(&self.logit_lens_kl, l, 4),
                cell(&self.max_abs_activation, l, 2),
            ));
        }
        if let Some(choices) = &self.multiple_choice {
            md.push_str(&format!(
                "\nMultiple choice ({} question(s)): acc {:.4}, acc_norm {:.4}.\n\n| layer removed | d acc | d acc_norm |\n|---|---|---|\n",
                choices.questions, choices.accuracy.acc, choices.accuracy.acc_norm
            ));
            for ((l, a), n) in choices.pruned_layers.iter().zip(&choices.acc_drop).zip(&choices.acc_norm_drop) {
                md.push_str(&format!("| {l} | {a:+.4} | {n:+.4} |\n"));
            }
        }
        if let Some(records) = self.tracking.as_deref().filter(|r| !r.is_empty()) {
            md.push_str(&format!(
                "\nTraining records: {} (steps {} to {}), in `tracking.csv`.\n",
                records.len(),
                records[0].step,
                records[records.len() - 1].step
            ));
        }
        if !figures.is_empty() {
            md.push_str("\n## Figures\n\n");
            for name in figures {
                md.push_str(&format!("![{name}]({name})\n\n"));
            }
        }
        md
    }
}
