//! The figures of a report: which numbers go on which chart (the paper's figures 1, 2, 4, 5, 6).

use std::path::Path;

use super::angular::normalize_per_n;
use super::plot::{Heatmap, LineChart};
use super::Report;
use crate::measure::FP16_MAX;
use crate::run::TrackRecord;

/// `(1, v_1), (2, v_2), ...`: one value per layer, layer 1 first.
fn per_layer(values: &[f64]) -> Vec<(f64, f64)> {
    values.iter().enumerate().map(|(i, &v)| ((i + 1) as f64, v)).collect()
}

/// `(0, v_0), (1, v_1), ...`: the embedding output then each block.
fn from_embedding(values: &[f64]) -> Vec<(f64, f64)> {
    values.iter().enumerate().map(|(i, &v)| (i as f64, v)).collect()
}

/// Indices of at most `max` records spread evenly from the first to the last.
fn spread(len: usize, max: usize) -> Vec<usize> {
    if len <= max {
        return (0..len).collect();
    }
    let mut picked: Vec<usize> = (0..max).map(|i| i * (len - 1) / (max - 1)).collect();
    picked.dedup();
    picked
}

/// The angular-distance heatmap (the paper's figure 5): `d(l, l+n)` with each row `n` min-max
/// normalised over `l`. It starts at the first block (`l = 1`): the embedding output is far from
/// every block, and normalising with it leaves the blocks one colour. With
/// `report.heatmap_from_embedding` it starts at the embedding output (`l = 0`).
pub fn angular_heatmap(report: &Report) -> Heatmap {
    let first = usize::from(!report.heatmap_from_embedding).min(report.angular_distance.len());
    Heatmap {
        title: "Angular distance d(l, l+n), each row n normalised over l".into(),
        x_label: if first == 0 { "layer l (0 = embedding output)" } else { "layer l" }.into(),
        y_label: "layers ahead n".into(),
        value_label: "normalised distance d(l, l+n)".into(),
        x_start: first,
        y_start: 1,
        cells: normalize_per_n(&report.angular_distance[first..]),
        small_is_bright: true,
    }
}

/// Writes the PNG figures of one model's report into `dir`; returns the file names.
pub fn write_report_figures(report: &Report, dir: &Path) -> std::io::Result<Vec<String>> {
    let mut written = Vec::new();
    let mut save = |name: &str, result: std::io::Result<()>| -> std::io::Result<()> {
        result?;
        written.push(name.to_string());
        Ok(())
    };
    let variance =
        LineChart::new("Layer-wise output variance", "layer (0 = embedding output)", "variance of the hidden state")
            .with_series("block output", from_embedding(&report.block_output_variance))
            .with_series("after attention", per_layer(&report.after_attention_variance))
            .with_log_y(true);
    save("variance.png", variance.write_png(&dir.join("variance.png")))?;

    let angular = angular_heatmap(report);
    save("angular_distance.png", angular.write_png(&dir.join("angular_distance.png")))?;

    let identity = LineChart::new("How far each block is from the identity", "layer", "||f(x)|| / ||x||")
        .with_series("update ratio", per_layer(&report.identity_ratio));
    save("identity_ratio.png", identity.write_png(&dir.join("identity_ratio.png")))?;

    if !report.logit_lens_loss.is_empty() {
        let lens = LineChart::new(
            "Logit lens: each layer read through the final norm and LM head",
            "layer (0 = embedding output)",
            "nats",
        )
        .with_series("next-token loss", from_embedding(&report.logit_lens_loss))
        .with_series("KL(model || lens)", from_embedding(&report.logit_lens_kl));
        save("logit_lens.png", lens.write_png(&dir.join("logit_lens.png")))?;
    }
    if !report.block_influence.is_empty() {
        let influence = LineChart::new("Block Influence (ShortGPT)", "layer", "1 - cos(input, output)")
            .with_series("Block Influence", per_layer(&report.block_influence));
        save("block_influence.png", influence.write_png(&dir.join("block_influence.png")))?;
    }
    if !report.max_abs_activation.is_empty() {
        let fp16 = vec![(0.0, FP16_MAX), (report.n_layers as f64, FP16_MAX)];
        let activation = LineChart::new(
            "Largest absolute activation per layer",
            "layer (0 = embedding output)",
            "max |hidden state|",
        )
        .with_series("max |x|", from_embedding(&report.max_abs_activation))
        .with_series("fp16 max (65504)", fp16)
        .with_log_y(true);
        save("max_abs_activation.png", activation.write_png(&dir.join("max_abs_activation.png")))?;
    }

    let pruning = LineChart::new(
        format!("Perplexity change when one layer is removed (full model: {:.3})", report.perplexity),
        "layer removed",
        "dPPL = PPL(pruned) - PPL",
    )
    .with_series("dPPL", per_layer(&report.pruning_drop));
    save("pruning_drop.png", pruning.write_png(&dir.join("pruning_drop.png")))?;

    if let Some(choices) = &report.multiple_choice {
        let chart = LineChart::new(
            format!(
                "Multiple-choice accuracy change per removed layer (acc {:.3}, acc_norm {:.3})",
                choices.accuracy.acc, choices.accuracy.acc_norm
            ),
            "layer removed",
            "accuracy change",
        )
        .with_series("acc", per_layer(&choices.acc_drop))
        .with_series("acc_norm", per_layer(&choices.acc_norm_drop));
        save("multiple_choice_drop.png", chart.write_png(&dir.join("multiple_choice_drop.png")))?;
    }
    if let Some(tracking) = &report.tracking {
        for name in write_tracking_figures(tracking, dir)? {
            written.push(name);
        }
    }
    Ok(written)
}

/// Figures of `tracking.jsonl`: variance and gradient norm per layer at several steps, and each
/// layer's variance over training. No records: no figure.
pub fn write_tracking_figures(records: &[TrackRecord], dir: &Path) -> std::io::Result<Vec<String>> {
    let Some(first) = records.first() else {
        return Ok(Vec::new());
    };
    let picked = spread(records.len(), 8);
    let mut by_layer =
        LineChart::new("Layer-wise output variance during training", "layer (0 = embedding output)", "variance")
            .with_log_y(true);
    let mut grads =
        LineChart::new("Per-layer gradient norm during training", "layer", "gradient L2 norm").with_log_y(true);
    for &i in &picked {
        let record = &records[i];
        by_layer = by_layer.with_series(format!("step {}", record.step), from_embedding(&record.block_output_variance));
        grads = grads.with_series(format!("step {}", record.step), per_layer(&record.grad_norm));
    }
    let layers = first.grad_norm.len();
    let mut over_time =
        LineChart::new("Output variance of each layer over training", "step", "variance").with_log_y(true);
    for layer in spread(layers, 8).into_iter().map(|i| i + 1) {
        let points =
            records.iter().filter_map(|r| r.block_output_variance.get(layer).map(|&v| (r.step as f64, v))).collect();
        over_time = over_time.with_series(format!("layer {layer}"), points);
    }
    let mut grads_over_time =
        LineChart::new("Gradient norm of each layer over training", "step", "gradient L2 norm").with_log_y(true);
    for layer in spread(layers, 8).into_iter().map(|i| i + 1) {
        let points = records.iter().filter_map(|r| r.grad_norm.get(layer - 1).map(|&g| (r.step as f64, g))).collect();
        grads_over_time = grads_over_time.with_series(format!("layer {layer}"), points);
    }
    by_layer.write_png(&dir.join("training_variance.png"))?;
    over_time.write_png(&dir.join("training_variance_by_step.png"))?;
    grads.write_png(&dir.join("training_grad_norm.png"))?;
    grads_over_time.write_png(&dir.join("training_grad_norm_by_step.png"))?;
    let mut written: Vec<String> = [
        "training_variance.png",
        "training_variance_by_step.png",
        "training_grad_norm.png",
        "training_grad_norm_by_step.png",
    ]
    .map(String::from)
    .to_vec();
    if records.iter().any(|r| !r.max_abs_activation.is_empty()) {
        let mut activation =
            LineChart::new("Largest absolute activation of each layer over training", "step", "max |x|")
                .with_log_y(true);
        for layer in spread(layers + 1, 8) {
            let points =
                records.iter().filter_map(|r| r.max_abs_activation.get(layer).map(|&m| (r.step as f64, m))).collect();
            activation = activation.with_series(format!("layer {layer}"), points);
        }
        activation.write_png(&dir.join("training_max_abs_activation.png"))?;
        written.push("training_max_abs_activation.png".into());
    }
    Ok(written)
}

/// The layer-wise output variance of several models overlaid (the paper's figure 1), on a log
/// scale: one curve per `(label, values)`, each holding the embedding output's variance (layer 0)
/// then each block's.
pub fn variance_chart<'a>(
    title: impl Into<String>,
    curves: impl IntoIterator<Item = (&'a str, &'a [f64])>,
) -> LineChart {
    curves.into_iter().fold(
        LineChart::new(title, "layer (0 = embedding output)", "variance").with_log_y(true),
        |chart, (label, values)| chart.with_series(label, from_embedding(values)),
    )
}

/// The overlaid figures of several reports (one curve per run) into `dir`; returns the file names.
pub fn write_comparison_figures(runs: &[(String, Report)], dir: &Path) -> std::io::Result<Vec<String>> {
    let variance = variance_chart(
        "Layer-wise output variance",
        runs.iter().map(|(label, report)| (label.as_str(), report.block_output_variance.as_slice())),
    );
    let mut identity = LineChart::new("How far each block is from the identity", "layer", "||f(x)|| / ||x||");
    let mut pruning = LineChart::new("Perplexity change when one layer is removed", "layer removed", "dPPL");
    let mut adjacent = LineChart::new("Angular distance to the next layer", "layer l", "d(l, l+1)");
    let mut influence = LineChart::new("Block Influence (ShortGPT)", "layer", "1 - cos(input, output)");
    let mut lens = LineChart::new("Logit lens: next-token loss of each layer", "layer (0 = embedding output)", "nats");
    let mut activation =
        LineChart::new("Largest absolute activation per layer", "layer (0 = embedding output)", "max |hidden state|")
            .with_log_y(true);
    for (label, report) in runs {
        identity = identity.with_series(label, per_layer(&report.identity_ratio));
        pruning = pruning.with_series(label, per_layer(&report.pruning_drop));
        let next: Vec<f64> = report.angular_distance.iter().filter_map(|row| row.first().copied()).collect();
        adjacent = adjacent.with_series(label, from_embedding(&next));
        influence = influence.with_series(label, per_layer(&report.block_influence));
        lens = lens.with_series(label, from_embedding(&report.logit_lens_loss));
        activation = activation.with_series(label, from_embedding(&report.max_abs_activation));
    }
    let charts = [
        ("variance.png", variance),
        ("identity_ratio.png", identity),
        ("pruning_drop.png", pruning),
        ("angular_distance_next.png", adjacent),
        ("block_influence.png", influence),
        ("logit_lens.png", lens),
        ("max_abs_activation.png", activation),
    ];
    let mut written = Vec::new();
    for (name, chart) in charts {
        chart.write_png(&dir.join(name))?;
        written.push(name.to_string());
    }
    Ok(written)
}
