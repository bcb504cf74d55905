//! Several reports side by side (e.g. Pre-LN against LNS): the curves overlaid and one table.

use std::path::{Component, Path};

use serde::Serialize;

use super::figures::write_comparison_figures;
use super::Report;
use crate::run::COMPARISON;

/// One run of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparedRun {
    /// Short label: the legend entry and the run's sub-directory (from [`unique_labels`]).
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

/// Labels that tell runs apart by their directories: the shortest ends of their paths, in whole
/// components, that differ between every two runs (`pre-ln/seed-1` and `lns/seed-1` for two
/// runs of a sweep; `pre-ln` and `lns` for `runs/pre-ln` and `runs/lns`).
pub fn path_labels(dirs: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = dirs
        .iter()
        .map(|dir| {
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            let names = dir.components().filter_map(|c| match c {
                Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
                _ => None,
            });
            names.collect()
        })
        .collect();
    let ends = |n: usize| -> Vec<String> { parts.iter().map(|p| p[p.len().saturating_sub(n)..].join("/")).collect() };
    let distinct = |labels: &[String]| labels.iter().enumerate().all(|(i, l)| !labels[..i].contains(l));
    let longest = parts.iter().map(Vec::len).max().unwrap_or(0);
    // The same directory twice never differs: its last name then, made unique by `unique_labels`.
    ends((1..=longest).find(|&n| distinct(&ends(n))).unwrap_or(1))
}

/// Makes `labels` unique and usable as relative directory paths (`/` separates directories):
/// other characters than ASCII letters, digits and `-_.` become `-`. A label that is taken, or
/// that would hold or be held by a taken one's directory, gets a number on its first directory
/// (`a`, `a`, `a/b` become `a`, `a-2`, `a-3/b`; a label of dots only becomes `run`).
pub fn unique_labels(labels: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for label in labels {
        let names: Vec<String> = label
            .split('/')
            .filter(|name| !name.is_empty())
            .map(|name| {
                let clean: String = name
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' })
                    .collect();
                if clean.trim_matches('.').is_empty() {
                    "run".to_string()
                } else {
                    clean
                }
            })
            .collect();
        let (first, rest) = match names.split_first() {
            Some((first, rest)) => (first.clone(), rest.iter().map(|name| format!("/{name}")).collect()),
            None => ("run".to_string(), String::new()),
        };
        let overlaps = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"));
        let mut candidate = format!("{first}{rest}");
        let mut n = 2;
        while out.iter().any(|taken| overlaps(taken, &candidate)) {
            candidate = format!("{first}-{n}{rest}");
            n += 1;
        }
        out.push(candidate);
    }
    out
}

/// Writes a comparison directory, whole or not at all: each run's full report in a sub-directory
/// named by its label, the overlaid figures, `comparison.md`, `comparison.csv` and `comparison.json`.
pub fn write_comparison(runs: &[ComparedRun], dir: &Path) -> std::io::Result<()> {
    crate::io::write_dir_atomically(dir, COMPARISON, |tmp| {
        for run in runs {
            let sub = tmp.join(&run.label);
            if let Some(parent) = sub.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::create_dir(&sub)?;
            run.report.write_into(&sub, &run.title)?;
        }
        let pairs: Vec<(String, Report)> = runs.iter().map(|r| (r.label.clone(), r.report.clone())).collect();
        let figures = write_comparison_figures(&pairs, tmp)?;
        let summaries: Vec<RunSummary> = runs.iter().map(|r| RunSummary::of(&r.label, &r.report)).collect();
        let json = serde_json::to_string_pretty(&summaries).map_err(std::io::Error::other)?;
        std::fs::write(tmp.join(COMPARISON), json)?;
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
    // A figure that was not measured (no deeper layer removed, say) is `-`, not `NaN`.
    let or_dash = |value: f64, shown: String| if value.is_finite() { shown } else { "-".to_string() };
    for s in summaries {
        md.push_str(&format!(
            "| {} | {} | {:.4} | {:.2}x | {} | {} |\n",
            s.label,
            s.n_layers,
            s.perplexity,
            s.variance_growth,
            or_dash(s.deep_identity_ratio, format!("{:.4}", s.deep_identity_ratio)),
            or_dash(s.deep_pruning_drop, format!("{:+.4}", s.deep_pruning_drop)),
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{comparison_markdown, path_labels, unique_labels, RunSummary};

    #[test]
    fn a_figure_not_measured_is_a_dash_not_nan() {
        let summary = RunSummary {
            label: "lns".into(),
            n_layers: 4,
            perplexity: 12.5,
            variance_growth: 2.0,
            deep_identity_ratio: 0.9,
            deep_pruning_drop: f64::NAN,
        };
        let md = comparison_markdown(&[], &[summary], &[]);
        assert!(md.contains("| lns | 4 | 12.5000 | 2.00x | 0.9000 | - |") && !md.contains("NaN"), "{md}");
    }

    fn labels(dirs: &[&str]) -> Vec<String> {
        let dirs: Vec<&Path> = dirs.iter().map(Path::new).collect();
        unique_labels(&path_labels(&dirs))
    }

    #[test]
    fn runs_are_labelled_by_the_shortest_ends_of_their_paths_that_differ() {
        assert_eq!(labels(&["runs/sweep/pre-ln/seed-1", "runs/sweep/lns/seed-1"]), ["pre-ln/seed-1", "lns/seed-1"]);
        assert_eq!(labels(&["runs/pre-ln", "/tmp/lns/"]), ["pre-ln", "lns"]);
        assert_eq!(labels(&["a/x/seed-1", "b/x/seed-1", "b/x/seed-2"]), ["a/x/seed-1", "b/x/seed-1", "b/x/seed-2"]);
        assert_eq!(labels(&["runs/lns", "runs/lns"]), ["lns", "lns-2"]);
    }

    #[test]
    fn labels_are_unique_directories_that_do_not_hold_each_other() {
        let given = ["x y", "x y", "a/b", "a", "../..", "", "lns/seed-1"].map(String::from);
        assert_eq!(unique_labels(&given), ["x-y", "x-y-2", "a/b", "a-2", "run/run", "run-2", "lns/seed-1"]);
    }
}
