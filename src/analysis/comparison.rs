//! Several reports side by side (e.g. Pre-LN against LNS): the curves overlaid and one table.

use std::path::Path;

use serde::Serialize;

use super::figures::write_comparison_figures;
use super::Report;

/// One run of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparedRun {
    /// Short label: the legend entry and the name of the run's sub-directory.
    pub label: String,
    /// Title of the run's own report.
    pub title: String,
    /// The run's report.
    pub report: Report,
}

/// The headline numbers of one run (a row of `comparison.md`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    /// The run's label.
    pub label: String,
    /// Number of blocks.
    pub n_layers: usize,
    /// Perplexity of the full model.
    pub perplexity: f64,
    /// Output variance of the last block over that of the first.
    pub variance_growth: f64,
    /// Mean identity ratio of the deeper half of the blocks (layers `> L/2`).
    pub deep_identity_ratio: f64,
    /// Mean `dPPL` of the deeper half's pruned layers (`NaN` when none was pruned).
    pub deep_pruning_drop: f64,
}

impl RunSummary {
    /// The summary of `report`.
    pub fn of(label: &str, report: &Report) -> Self {
        let layers = report.n_layers;
        let deep = |layer: usize| layer > layers / 2;
        let mean = |values: Vec<f64>| {
            if values.is_empty() {
                f64::NAN
            } else {
                values.iter().sum::<f64>() / values.len() as f64
            }
        };
        let identity = (1..=layers).filter(|&l| deep(l)).map(|l| report.identity_ratio[l - 1]).collect();
        let drops =
            report.pruned_layers.iter().zip(&report.pruning_drop).filter(|(&l, _)| deep(l)).map(|(_, &d)| d).collect();
        Self {
            label: label.to_string(),
            n_layers: layers,
            perplexity: report.perplexity,
            variance_growth: report.block_output_variance[layers] / report.block_output_variance[1],
            deep_identity_ratio: mean(identity),
            deep_pruning_drop: mean(drops),
        }
    }
}

/// Makes `labels` unique and usable as directory names (`a`, `a` becomes `a`, `a-2`).
pub fn unique_labels(labels: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for label in labels {
        let clean: String =
            label.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).collect();
        let clean = if clean.trim_matches('.').is_empty() { "run".to_string() } else { clean };
        let mut candidate = clean.clone();
        let mut n = 2;
        while out.contains(&candidate) {
            candidate = format!("{clean}-{n}");
            n += 1;
        }
        out.push(candidate);
    }
    out
}

/// Writes a comparison directory, whole or not at all: each run's full report in a sub-directory
/// named by its label, the overlaid figures, `comparison.md`, `comparison.csv` and `comparison.json`.
pub fn write_comparison(runs: &[ComparedRun], dir: &Path) -> std::io::Result<()> {
    crate::io::write_dir_atomically(dir, "comparison.json", |tmp| {
        for run in runs {
            let sub = tmp.join(&run.label);
            std::fs::create_dir(&sub)?;
            run.report.write_into(&sub, &run.title)?;
        }
        let pairs: Vec<(String, Report)> = runs.iter().map(|r| (r.label.clone(), r.report.clone())).collect();
        let figures = write_comparison_figures(&pairs, tmp)?;
        let summaries: Vec<RunSummary> = runs.iter().map(|r| RunSummary::of(&r.label, &r.report)).collect();
        let json = serde_json::to_string_pretty(&summaries).map_err(std::io::Error::other)?;
        std::fs::write(tmp.join("comparison.json"), json)?;
        let mut csv = String::from("run,layer,block_output_variance,identity_ratio,pruning_drop\n");
        for run in runs {
            for l in 1..=run.report.n_layers {
                let drop = run.report.drop_of(l).map(|d| d.to_string()).unwrap_or_default();
                csv.push_str(&format!(
                    "{},{l},{},{},{drop}\n",
                    run.label,
                    run.report.block_output_variance[l],
                    run.report.identity_ratio[l - 1]
                ));
            }
        }
        std::fs::write(tmp.join("comparison.csv"), csv)?;
        std::fs::write(tmp.join("comparison.md"), comparison_markdown(runs, &summaries, &figures))
    })
}

fn comparison_markdown(runs: &[ComparedRun], summaries: &[RunSummary], figures: &[String]) -> String {
    let mut md = String::from(
        "# Comparison\n\n| run | layers | perplexity | variance growth (last / first block) | identity ratio, deeper half | dPPL, deeper half |\n|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        md.push_str(&format!(
            "| {} | {} | {:.4} | {:.2}x | {:.4} | {:+.4} |\n",
            s.label, s.n_layers, s.perplexity, s.variance_growth, s.deep_identity_ratio, s.deep_pruning_drop
        ));
    }
    md.push_str("\nEach run's full report is in its sub-directory:\n\n");
    for run in runs {
        md.push_str(&format!("- [{}]({}/summary.md): {}\n", run.label, run.label, run.title));
    }
    md.push_str("\n## Figures\n\n");
    for name in figures {
        md.push_str(&format!("![{name}]({name})\n\n"));
    }
    md
}
