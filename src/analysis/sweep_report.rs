//! The report of a sweep ([`crate::train::Sweep`]), in the manner of the paper's Table 1: the
//! final validation loss and perplexity of each scheme (mean and standard deviation over its
//! seeds, the best marked, diverged runs shown as such), the loss curves of every scheme
//! overlaid, and the diagnostics comparison of every scheme's final model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::comparison::{write_comparison, ComparedRun};
use super::depth_report::{depth_csv, depth_markdown, depth_points, write_depth_figures};
use super::paired::{paired_differences, paired_markdown, PairedDifference};
use super::plot::LineChart;
use super::scheme_result::{sweep_results, SchemeResult};
use crate::run::{read_metrics, MetricRow, METRICS};
use crate::train::{group_name, DataBudget, PairOutcome, Sweep, SweepRecord};

/// The file that marks a sweep's report folder (a new report replaces the folder that holds it).
pub const SWEEP_RESULTS: &str = "results.json";

/// The folder of the report of the sweep in `sweep_dir`.
pub fn sweep_report_dir(sweep_dir: &Path) -> PathBuf {
    sweep_dir.join("report")
}

/// `1 scheme`, `2 schemes`.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `mean ± std`, `mean` alone, or `-`.
fn mean_pm_std(mean: Option<f64>, std: Option<f64>, digits: usize) -> String {
    match (mean, std) {
        (Some(m), Some(s)) => format!("{m:.digits$} ± {s:.digits$}"),
        (Some(m), None) => format!("{m:.digits$}"),
        _ => "-".into(),
    }
}

/// The table in Markdown, the best scheme (of each depth) in bold.
pub fn results_markdown(results: &[SchemeResult], seeds: usize) -> String {
    let by_depth = results.iter().any(|r| r.layers.is_some());
    let mut md = if by_depth {
        String::from("| layers | scheme | seeds finished | validation loss | perplexity |\n|---|---|---|---|---|\n")
    } else {
        String::from("| scheme | seeds finished | validation loss | perplexity |\n|---|---|---|---|\n")
    };
    for r in results {
        if let Some(layers) = r.layers {
            md.push_str(&format!("| {layers} "));
        }
        let loss = mean_pm_std(r.loss_mean, r.loss_std, 4);
        let ppl = mean_pm_std(r.perplexity_mean, r.perplexity_std, 3);
        let diverged = if r.diverged > 0 { format!(" ({} diverged)", r.diverged) } else { String::new() };
        let (loss, ppl) = match (r.finished, r.best) {
            (0, _) if r.diverged > 0 => ("diverged".to_string(), "diverged".to_string()),
            (_, true) => (format!("**{loss}** (best)"), format!("**{ppl}**")),
            _ => (loss, ppl),
        };
        md.push_str(&format!("| {} | {} of {seeds}{diverged} | {loss} | {ppl} |\n", r.scheme, r.finished));
    }
    md
}

/// A CSV cell of a value that may not exist: empty when it does not, else written to read back
/// to the last bit.
fn csv_cell(value: Option<f64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The table as CSV: one line per scheme (empty cells where a value does not exist).
fn results_csv(results: &[SchemeResult]) -> String {
    let mut csv =
        String::from("scheme,layers,finished,diverged,loss_mean,loss_std,perplexity_mean,perplexity_std,best\n");
    for r in results {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r.scheme,
            r.layers.map(|l| l.to_string()).unwrap_or_default(),
            r.finished,
            r.diverged,
            csv_cell(r.loss_mean),
            csv_cell(r.loss_std),
            csv_cell(r.perplexity_mean),
            csv_cell(r.perplexity_std),
            r.best
        ));
    }
    csv
}

/// The paired comparison as CSV: one line per scheme and seed (the summary repeated on each).
fn paired_csv(paired: &[PairedDifference]) -> String {
    let mut csv = String::from("scheme,layers,baseline,seed,difference,mean,std,low,high,distinguishable\n");
    for p in paired {
        for (seed, difference) in &p.differences {
            csv.push_str(&format!(
                "{},{},{},{seed},{difference},{},{},{},{},{}\n",
                p.scheme,
                p.layers.map(|l| l.to_string()).unwrap_or_default(),
                p.baseline,
                csv_cell(p.mean),
                csv_cell(p.std),
                csv_cell(p.interval.map(|i| i.0)),
                csv_cell(p.interval.map(|i| i.1)),
                p.distinguishable.map(|d| d.to_string()).unwrap_or_default()
            ));
        }
    }
    csv
}

/// One scheme's loss curves: `(step, mean over its seeds)` of the training loss (each step's
/// micro-batches averaged) and of the validation loss.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossCurves {
    /// Training loss by step.
    pub train: Vec<(f64, f64)>,
    /// Validation loss by step.
    pub valid: Vec<(f64, f64)>,
}

impl LossCurves {
    /// The curves of the metric rows of each seed's run (non-finite values left out).
    pub fn of(runs: &[Vec<MetricRow>]) -> Self {
        let curve = |split: &str| -> Vec<(f64, f64)> {
            let mut by_step: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
            for rows in runs {
                let mut steps: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
                let loss = rows.iter().filter(|r| r.split == split && r.metric == "Loss" && r.is_batch_value());
                for row in loss.filter(|r| r.value.is_finite()) {
                    let entry = steps.entry(row.step).or_default();
                    *entry = (entry.0 + row.value, entry.1 + 1);
                }
                for (step, (sum, n)) in steps {
                    let entry = by_step.entry(step).or_default();
                    *entry = (entry.0 + sum / n as f64, entry.1 + 1);
                }
            }
            by_step.into_iter().map(|(step, (sum, n))| (step as f64, sum / n as f64)).collect()
        };
        Self { train: curve("train"), valid: curve("valid") }
    }
}

/// Each group's loss curves (a scheme, with its init and depth on those axes, labelled as its
/// folder: `lns`, `layers-8/lns+scaled`) from the runs of its pairs that `record` holds, averaged
/// over seeds (diverged ones up to their last finite loss), and a warning for each run left out
/// because its `metrics.jsonl` cannot be read (naming the file). A group left with no run is
/// marked `(no data)` in the figures' legend.
pub fn sweep_loss_curves(sweep: &Sweep, record: &SweepRecord) -> (Vec<(String, LossCurves)>, Vec<String>) {
    let pairs = sweep.pairs();
    let mut warnings = Vec::new();
    let mut curves = |group: &str| {
        let mut runs = Vec::new();
        for pair in pairs.iter().filter(|p| p.group() == group && record.outcomes.contains_key(&p.key())) {
            match read_metrics(&pair.dir) {
                Ok(rows) if rows.iter().any(MetricRow::is_train_loss) => {
                    // A finished pair's history ends at its last step: one that ends before was cut.
                    let last = rows.iter().filter(|r| r.is_train_loss()).map(|r| r.step).max().unwrap_or(0);
                    let finished = matches!(record.outcomes.get(&pair.key()), Some(PairOutcome::Finished { .. }));
                    if finished && last < record.config.optim.steps {
                        warnings.push(format!(
                            "the loss curve of {} stops at step {last} of {}: {} was cut short since the pair \
                             finished",
                            pair.key(),
                            record.config.optim.steps,
                            pair.dir.join(METRICS).display()
                        ));
                    }
                    runs.push(rows)
                }
                Ok(_) => warnings.push(format!(
                    "the loss curves leave out {}: {} holds no training loss",
                    pair.key(),
                    pair.dir.join(METRICS).display()
                )),
                Err(e) => warnings.push(format!("the loss curves leave out {}: {e}", pair.key())),
            }
        }
        LossCurves::of(&runs)
    };
    let groups = sweep.groups().into_iter().map(|(layers, arm)| group_name(layers, &arm));
    let per_group = groups.map(|group| (group.clone(), curves(&group))).collect();
    (per_group, warnings)
}

/// The target tokens of one optimiser step, and whether they are a mean over truncated, padded
/// sequences: from the data budget a finished pair recorded in its `train.json` (real targets
/// only, as `train` counts them), else `batch_size x grad_accum x seq_len` (packed sequences,
/// one device).
fn tokens_per_step(record: &SweepRecord) -> (f64, bool) {
    let config = &record.config;
    let budget = record.outcomes.keys().find_map(|key| {
        let recorded = DataBudget::recorded_in(&config.output.out.join(key).join(crate::run::TRAIN_CONFIG));
        recorded.filter(|budget| budget.sequences > 0 && budget.read > 0)
    });
    match budget {
        Some(budget) => {
            let sequences_per_step = budget.read as f64 / config.optim.steps.max(1) as f64;
            let targets_per_sequence = budget.tokens as f64 / budget.sequences as f64;
            (sequences_per_step * targets_per_sequence, budget.sequences_mode == crate::data::SequenceMode::Truncate)
        }
        None => ((config.optim.batch_size * config.optim.grad_accum * config.data.seq_len) as f64, false),
    }
}

/// Writes the overlaid loss curves against steps and against tokens (`tokens_per_step` each).
fn write_curves(
    curves: &[(String, LossCurves)],
    (tokens_per_step, padded): (f64, bool),
    dir: &Path,
) -> std::io::Result<Vec<String>> {
    let mut written = Vec::new();
    let tokens = if padded { "real tokens, padding not counted (millions)" } else { "tokens (millions)" };
    for (name, per, x_label) in [
        ("loss_vs_steps.png", 1.0, "optimiser step".to_string()),
        ("loss_vs_tokens.png", tokens_per_step / 1e6, tokens.to_string()),
    ] {
        let mut chart = LineChart::new("Training and validation loss", x_label, "loss");
        for (scheme, c) in curves {
            let scaled = |points: &[(f64, f64)]| points.iter().map(|&(s, l)| (s * per, l)).collect::<Vec<_>>();
            chart = chart.with_series(format!("{scheme} train"), scaled(&c.train));
            chart = chart.with_series(format!("{scheme} valid"), scaled(&c.valid));
        }
        chart.write_png(&dir.join(name))?;
        written.push(name.to_string());
    }
    Ok(written)
}

/// Writes the sweep report into `dir`, whole or not at all: `results.md`, `results.csv`,
/// `results.json`, `loss_vs_steps.png`, `loss_vs_tokens.png`, `diagnostics/` (the comparison
/// of one model per scheme, when any finished), and when the sweep has the `baseline` scheme, the
/// paired comparison against it (`paired.csv`, in `results.md` and `results.json`). A sweep over
/// depths adds the curse against depth ([`depth_points`], `depth.csv` and three figures), its
/// effective depth counting the blocks whose removal costs at least `removal_threshold` of the
/// perplexity (relative; the diagnostics give the removals: labelled by group, `layers-8/lns`), a
/// fraction in (0, 1) ([`check_removal_threshold`](super::check_removal_threshold)).
pub fn write_sweep_report(
    dir: &Path,
    record: &SweepRecord,
    curves: &[(String, LossCurves)],
    diagnostics: &[ComparedRun],
    baseline: &str,
    removal_threshold: f64,
) -> std::io::Result<Vec<SchemeResult>> {
    super::report::check_removal_threshold(removal_threshold)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let results = sweep_results(record);
    let paired = paired_differences(&results, baseline);
    let depth = depth_points(&results, diagnostics, removal_threshold);
    let config = &record.config;
    let (tokens_per_step, padded) = tokens_per_step(record);
    crate::io::write_dir_atomically(dir, SWEEP_RESULTS, |tmp| {
        let figures = write_curves(curves, (tokens_per_step, padded), tmp)?;
        let json = serde_json::json!({
            "results": results,
            "paired": paired,
            "depth": depth,
            "removal_threshold": removal_threshold,
            "outcomes": record.outcomes
        });
        std::fs::write(tmp.join(SWEEP_RESULTS), serde_json::to_string_pretty(&json).map_err(std::io::Error::other)?)?;
        std::fs::write(tmp.join("results.csv"), results_csv(&results))?;
        let axes = [
            (!record.depths.is_empty()).then(|| count(record.depths.len(), "depth")),
            Some(count(record.schemes.len(), "scheme")),
            (!record.inits.is_empty()).then(|| count(record.inits.len(), "init")),
            Some(count(record.seeds.len(), "seed")),
        ];
        let mut md = format!(
            "# Sweep: {}\n\nFinal validation loss and perplexity (mean ± sample standard deviation over the seeds \
             that finished; the best of the schemes with no diverged seed in bold{}), {} steps of {}.\n\n",
            axes.into_iter().flatten().collect::<Vec<_>>().join(" x "),
            if record.depths.is_empty() { "" } else { ", at each depth" },
            config.optim.steps,
            if padded {
                format!("{tokens_per_step:.0} real target tokens on average (padding not counted)")
            } else {
                format!("{tokens_per_step} tokens")
            }
        );
        md.push_str(&results_markdown(&results, record.seeds.len()));
        if !depth.is_empty() {
            std::fs::write(tmp.join("depth.csv"), depth_csv(&depth))?;
            md.push_str(&format!(
                "\n## The curse against depth\n\nFor each scheme and depth: the mean final validation loss, how much the \
                 hidden-state variance grows from the first block's output to the last's, and the effective depth, the \
                 blocks whose removal alone raises the perplexity by at least {}% (both from the first finished seed's \
                 model; `-` without diagnostics).\n\n",
                removal_threshold * 100.0
            ));
            md.push_str(&depth_markdown(&depth, removal_threshold));
            md.push('\n');
            for name in write_depth_figures(&depth, removal_threshold, tmp)? {
                md.push_str(&format!("![{name}]({name})\n\n"));
            }
        }
        if let Some(paired) = paired.as_ref().filter(|p| !p.is_empty()) {
            std::fs::write(tmp.join("paired.csv"), paired_csv(paired))?;
            md.push_str(&format!(
                "\n## Paired against {baseline}\n\nEach scheme's final validation loss minus {baseline}'s, seed by seed \
                 (a seed fixes the data order and every run validates on the same tokens): the mean ± sample standard \
                 deviation of the differences, their 95% interval (Student's t), and whether it excludes 0.\n\n"
            ));
            md.push_str(&paired_markdown(paired));
        }
        let diverged: Vec<String> = record
            .outcomes
            .iter()
            .filter_map(|(key, o)| match o {
                PairOutcome::Diverged { reason } => Some(format!("- {key}: {reason}\n")),
                PairOutcome::Finished { .. } => None,
            })
            .collect();
        if !diverged.is_empty() {
            md.push_str("\nDiverged runs:\n\n");
            md.push_str(&diverged.concat());
        }
        md.push('\n');
        for name in &figures {
            md.push_str(&format!("![{name}]({name})\n\n"));
        }
        if !diagnostics.is_empty() {
            write_comparison(diagnostics, &tmp.join("diagnostics"))?;
            md.push_str("Diagnostics of each scheme's final model (first finished seed): [diagnostics/comparison.md](diagnostics/comparison.md)\n");
        }
        std::fs::write(tmp.join("results.md"), md)
    })?;
    Ok(results)
}
