//! The paired comparison of a sweep: each scheme's final validation loss minus a baseline
//! scheme's, seed by seed (a seed fixes the data order, and both runs validate on the same
//! tokens), with the mean, the sample standard deviation and a 95% interval (Student's t) of the
//! differences, and whether that interval excludes zero.

use std::collections::BTreeMap;

use serde::Serialize;

use super::scheme_result::{depths_of, mean_std, SchemeResult};

/// One scheme against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairedDifference {
    /// The scheme.
    pub scheme: String,
    /// The depth both have, on a depth axis (each depth is paired with its own baseline run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// The baseline scheme.
    pub baseline: String,
    /// `loss(scheme) - loss(baseline)` for each seed both finished; negative: the scheme is better.
    pub differences: BTreeMap<u64, f64>,
    /// The mean difference.
    pub mean: Option<f64>,
    /// The differences' sample standard deviation (`None` below two seeds).
    pub std: Option<f64>,
    /// The 95% interval of the mean difference, `mean ± t(0.975, n - 1) std / sqrt(n)` (`None`
    /// below two seeds).
    pub interval: Option<(f64, f64)>,
    /// Whether the interval excludes zero: the schemes differ beyond their seed noise (`None`
    /// below two seeds).
    pub distinguishable: Option<bool>,
}

/// Each scheme of `results` but the baseline, against `baseline`'s row of the same depth (`None`
/// when no row is the baseline's).
pub fn paired_differences(results: &[SchemeResult], baseline: &str) -> Option<Vec<PairedDifference>> {
    let mut all = Vec::new();
    for layers in depths_of(results) {
        let at_depth: Vec<&SchemeResult> = results.iter().filter(|r| r.layers == layers).collect();
        if let Some(base) = at_depth.iter().find(|r| r.scheme == baseline) {
            all.extend(paired_with(&at_depth, base, baseline));
        }
    }
    (!all.is_empty() || results.iter().any(|r| r.scheme == baseline)).then_some(all)
}

/// Each row of `results` but the baseline's against `base`.
fn paired_with(results: &[&SchemeResult], base: &SchemeResult, baseline: &str) -> Vec<PairedDifference> {
    let paired = results.iter().filter(|r| r.scheme != baseline).map(|r| {
        let differences: BTreeMap<u64, f64> = r
            .losses
            .iter()
            .filter_map(|(seed, loss)| base.losses.get(seed).map(|base_loss| (*seed, loss - base_loss)))
            .collect();
        let values: Vec<f64> = differences.values().copied().collect();
        let (mean, std) = mean_std(&values);
        let interval = mean.zip(std).map(|(mean, std)| {
            let half = t_quantile_975(values.len() - 1) * std / (values.len() as f64).sqrt();
            (mean - half, mean + half)
        });
        PairedDifference {
            scheme: r.scheme.clone(),
            layers: r.layers,
            baseline: baseline.to_string(),
            differences,
            mean,
            std,
            interval,
            distinguishable: interval.map(|(low, high)| low > 0.0 || high < 0.0),
        }
    });
    paired.collect()
}

/// The 0.975 quantile of Student's t with `dof` degrees of freedom (> 0): the table to 30, then
/// the Cornish-Fisher expansion around the normal's 1.95996 (within 1e-4 there).
pub fn t_quantile_975(dof: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
        2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518,
        2.0484, 2.0452, 2.0423,
    ];
    match dof {
        0 => f64::INFINITY,
        1..=30 => TABLE[dof - 1],
        _ => {
            let (z, n) = (1.959964f64, dof as f64);
            z + (z.powi(3) + z) / (4.0 * n) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * n * n)
        }
    }
}

/// The paired table in Markdown.
pub fn paired_markdown(paired: &[PairedDifference]) -> String {
    let Some(baseline) = paired.first().map(|p| p.baseline.as_str()) else {
        return String::new();
    };
    let by_depth = paired.iter().any(|p| p.layers.is_some());
    let mut md = format!(
        "| {}scheme | seeds paired | loss - {baseline}, by seed | mean ± std | 95% interval | distinguishable from 0 |\n\
         |{}---|---|---|---|---|---|\n",
        if by_depth { "layers | " } else { "" },
        if by_depth { "---|" } else { "" },
    );
    for p in paired {
        if let Some(layers) = p.layers {
            md.push_str(&format!("| {layers} "));
        }
        let by_seed: Vec<String> = p.differences.iter().map(|(seed, d)| format!("{seed}: {d:+.4}")).collect();
        let mean = match (p.mean, p.std) {
            (Some(m), Some(s)) => format!("{m:+.4} ± {s:.4}"),
            (Some(m), None) => format!("{m:+.4}"),
            _ => "-".into(),
        };
        let interval = p.interval.map_or("-".into(), |(low, high)| format!("[{low:+.4}, {high:+.4}]"));
        let verdict = match p.distinguishable {
            Some(true) if p.mean < Some(0.0) => "yes: lower",
            Some(true) => "yes: higher",
            Some(false) => "no",
            None if p.differences.is_empty() => "- (no seed finished in both)",
            None => "- (one seed)",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {mean} | {interval} | {verdict} |\n",
            p.scheme,
            p.differences.len(),
            if by_seed.is_empty() { "-".into() } else { by_seed.join(", ") }
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scheme: &str, losses: &[(u64, f64)]) -> SchemeResult {
        SchemeResult {
            scheme: scheme.into(),
            layers: None,
            finished: losses.len(),
            diverged: 0,
            losses: losses.iter().copied().collect(),
            loss_mean: None,
            loss_std: None,
            perplexity_mean: None,
            perplexity_std: None,
            best: false,
        }
    }

    #[test]
    fn differences_are_paired_by_seed_with_a_t_interval() {
        let results = [
            row("pre-ln", &[(1, 3.0), (2, 3.2), (3, 3.1)]),
            row("lns", &[(1, 2.9), (2, 3.0), (3, 3.05), (4, 1.0)]),
            row("post-ln", &[(2, 3.3)]),
        ];
        let paired = paired_differences(&results, "pre-ln").unwrap();
        assert_eq!(paired.len(), 2);
        let lns = &paired[0];
        // Differences -0.1, -0.2, -0.05 (seed 4 has no baseline): mean -0.11667, std 0.07638.
        let d: Vec<f64> = lns.differences.values().copied().collect();
        assert_eq!(d.len(), 3);
        assert!((d[0] + 0.1).abs() < 1e-12 && (d[1] + 0.2).abs() < 1e-12 && (d[2] + 0.05).abs() < 1e-12);
        let (mean, std) = (lns.mean.unwrap(), lns.std.unwrap());
        assert!((mean + 0.35 / 3.0).abs() < 1e-12);
        assert!((std - (0.0175f64 / 3.0).sqrt()).abs() < 1e-12, "{std}");
        // t(0.975, 2) = 4.3027: half-width 4.3027 x 0.07638 / sqrt(3) = 0.18974, straddling 0.
        let (low, high) = lns.interval.unwrap();
        assert!((high - low - 2.0 * 4.3027 * std / 3f64.sqrt()).abs() < 1e-12);
        assert_eq!(lns.distinguishable, Some(false));
        assert_eq!((paired[1].std, paired[1].distinguishable), (None, None), "one seed paired");
        assert!(paired_differences(&results, "deepnorm").is_none());
        let md = paired_markdown(&paired);
        assert!(md.contains("| lns | 3 | 1: -0.1000, 2: -0.2000, 3: -0.0500 | -0.1167 ± 0.0764 |"), "{md}");
        assert!(md.contains("| no |") && md.contains("- (one seed)"), "{md}");
    }

    #[test]
    fn the_t_quantile_approaches_the_normal_one() {
        assert_eq!(t_quantile_975(1), 12.7062);
        assert!((t_quantile_975(31) - 2.0395).abs() < 2e-4);
        assert!((t_quantile_975(60) - 2.0003).abs() < 2e-4);
        assert!((t_quantile_975(1000) - 1.9623).abs() < 2e-4);
    }
}
