//! The curse against depth, from a sweep over `--layers`: for each scheme and depth, the final
//! validation loss, how much the hidden-state variance grows from the first block to the last,
//! and the effective depth (how many blocks raise the perplexity by at least a threshold when
//! removed alone). Under Pre-LN the growth climbs with depth while the effective depth lags
//! behind the depth; that gap is the curse.

use std::path::Path;

use serde::Serialize;

use super::comparison::{ComparedRun, RunSummary};
use super::plot::LineChart;
use super::scheme_result::SchemeResult;
use crate::train::{distinct, group_name};

/// One scheme at one depth.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DepthPoint {
    /// The scheme (with its init on an init axis).
    pub scheme: String,
    /// The number of layers.
    pub layers: usize,
    /// Mean final validation loss over the finished seeds.
    pub loss_mean: Option<f64>,
    /// Output variance of the last block over that of the first (first finished seed's model).
    pub variance_growth: Option<f64>,
    /// Blocks whose removal alone raises the perplexity by at least the threshold.
    pub effective_depth: Option<usize>,
}

/// The points of every row of `results` that has a depth, with the diagnostics of its group
/// (`diagnostics` labelled by group, `layers-<L>/<scheme>`) where there are some.
pub fn depth_points(results: &[SchemeResult], diagnostics: &[ComparedRun], threshold: f64) -> Vec<DepthPoint> {
    results
        .iter()
        .filter_map(|r| {
            let layers = r.layers?;
            let group = group_name(Some(layers), &r.scheme);
            let report = diagnostics.iter().find(|run| run.label == group).map(|run| &run.report);
            Some(DepthPoint {
                scheme: r.scheme.clone(),
                layers,
                loss_mean: r.loss_mean,
                variance_growth: report.map(|report| RunSummary::of(&group, report).variance_growth),
                effective_depth: report.map(|report| report.effective_depth(threshold)),
            })
        })
        .collect()
}

/// The schemes of `points`, in order.
fn schemes(points: &[DepthPoint]) -> Vec<&str> {
    distinct(points.iter().map(|p| p.scheme.as_str()))
}

/// The table in Markdown: one row per scheme and depth.
pub fn depth_markdown(points: &[DepthPoint], threshold: f64) -> String {
    let mut md = format!(
        "| scheme | layers | validation loss | variance growth (last / first block) | effective depth (dPPL >= {}%) |\n\
         |---|---|---|---|---|\n",
        threshold * 100.0
    );
    for name in schemes(points) {
        for p in points.iter().filter(|p| p.scheme == name) {
            let loss = p.loss_mean.map_or("-".into(), |l| format!("{l:.4}"));
            let growth = p.variance_growth.map_or("-".into(), |g| format!("{g:.1}x"));
            let effective = p.effective_depth.map_or("-".into(), |e| format!("{e} of {}", p.layers));
            md.push_str(&format!("| {} | {} | {loss} | {growth} | {effective} |\n", p.scheme, p.layers));
        }
    }
    md
}

/// The points as CSV (empty cells where a value does not exist).
pub fn depth_csv(points: &[DepthPoint]) -> String {
    let mut csv = String::from("scheme,layers,loss_mean,variance_growth,effective_depth\n");
    let cell = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for p in points {
        csv.push_str(&format!(
            "{},{},{},{},{}\n",
            p.scheme,
            p.layers,
            cell(p.loss_mean),
            cell(p.variance_growth),
            p.effective_depth.map(|e| e.to_string()).unwrap_or_default()
        ));
    }
    csv
}

/// Writes `loss_vs_depth.png`, `variance_growth_vs_depth.png` and `effective_depth_vs_depth.png`
/// (one curve per scheme; a chart with no value is left out) into `dir`; returns their names.
pub fn write_depth_figures(points: &[DepthPoint], threshold: f64, dir: &Path) -> std::io::Result<Vec<String>> {
    let series = |value: &dyn Fn(&DepthPoint) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        schemes(points)
            .into_iter()
            .map(|name| {
                let curve = points
                    .iter()
                    .filter(|p| p.scheme == name)
                    .filter_map(|p| value(p).map(|v| (p.layers as f64, v)))
                    .collect();
                (name.to_string(), curve)
            })
            .filter(|(_, curve): &(String, Vec<(f64, f64)>)| !curve.is_empty())
            .collect()
    };
    let deepest = points.iter().map(|p| p.layers).max().unwrap_or(0) as f64;
    let shallowest = points.iter().map(|p| p.layers).min().unwrap_or(0) as f64;
    let charts = [
        (
            "loss_vs_depth.png",
            LineChart::new("Final validation loss against depth", "layers", "validation loss"),
            series(&|p| p.loss_mean),
            None,
        ),
        (
            "variance_growth_vs_depth.png",
            LineChart::new("Hidden-state variance growth against depth", "layers", "variance, last / first block")
                .with_log_y(true),
            series(&|p| p.variance_growth),
            None,
        ),
        (
            "effective_depth_vs_depth.png",
            LineChart::new(
                format!(
                    "Effective depth against depth (blocks whose removal costs >= {}% perplexity)",
                    threshold * 100.0
                ),
                "layers",
                "effective depth",
            ),
            series(&|p| p.effective_depth.map(|e| e as f64)),
            Some(("every block counts", vec![(shallowest, shallowest), (deepest, deepest)])),
        ),
    ];
    let mut written = Vec::new();
    for (name, mut chart, curves, reference) in charts {
        if curves.is_empty() {
            continue;
        }
        for (label, curve) in curves {
            chart = chart.with_series(label, curve);
        }
        if let Some((label, line)) = reference {
            chart = chart.with_series(label, line);
        }
        chart.write_png(&dir.join(name))?;
        written.push(name.to_string());
    }
    Ok(written)
}
