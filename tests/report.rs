//! Reports, figures, comparisons, training records and the analyze command end to end.

mod common;

use std::path::Path;
use std::process::Command;

use common::{assert_png_not_blank, assert_refused, builtin_data, cpu, example, one_at_a_time, quick};
use layernorm_scaling::analysis::{
    analyze, angular_heatmap, normalize_per_n, unique_labels, write_comparison, AnalysisEvent, AnalysisOptions,
    AnalysisRequest, ComparedRun, Heatmap, LineChart, ModelSource, Report,
};
use layernorm_scaling::data::{DataError, SplitProblem};
use layernorm_scaling::run::{
    read_metrics, read_model_dir_config, read_tracking, read_tracking_skipping_damage, LoadProblem,
};
use layernorm_scaling::train::{train, Start, TrainConfig};
use layernorm_scaling::{ConfigError, Error, LlamaConfig};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// The mean x of the pixels within 12 of `rgb` in each channel, left of the colour scale (the
/// rightmost 150 pixels).
fn mean_x_of_colour(path: &Path, rgb: [u8; 3]) -> f64 {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let (width, channels) = (info.width as usize, info.line_size / info.width as usize);
    let xs: Vec<usize> = pixels[..info.buffer_size()]
        .chunks(channels)
        .enumerate()
        .filter(|(_, p)| p[..3].iter().zip(rgb).all(|(&a, b)| a.abs_diff(b) <= 12))
        .map(|(i, _)| i % width)
        .filter(|&x| x < width - 150)
        .collect();
    assert!(xs.len() > 1000, "{}: only {} pixels of {rgb:?}", path.display(), xs.len());
    xs.iter().sum::<usize>() as f64 / xs.len() as f64
}

#[test]
fn a_report_is_written_whole_with_every_figure() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = builtin_data(dir.path(), 200, 32);
    let model = LlamaConfig::tiny().init(&cpu()).unwrap();
    let mut calls = Vec::new();
    let options = AnalysisOptions { batch_size: 4, batches: 2, ..AnalysisOptions::default() };
    let report = analyze(&model, &data, &options, &mut |done, total| calls.push((done, total))).unwrap();
    assert_eq!(calls.last(), Some(&(5, 5)));
    assert_eq!(
        (report.block_output_variance.len(), report.pruning_drop.len(), report.angular_distance.len()),
        (5, 4, 4)
    );
    // The trace statistics are means over the tokens of both batches: those of one forward pass
    // over all 8 sequences at once.
    {
        use burn::data::dataloader::batcher::Batcher;
        use layernorm_scaling::analysis::{angular_distance_matrix, identity_ratios};
        use layernorm_scaling::measure::layer_variances;
        let all = layernorm_scaling::data::LmBatcher.batch((0..8).map(|i| data.window(i)).collect(), &cpu());
        let trace = model.forward_trace(all.inputs);
        let close = |a: &[f64], b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs().max(1e-3))
        };
        assert!(close(&report.block_output_variance, &layer_variances(&trace).block_output));
        assert!(close(&report.after_attention_variance, &layer_variances(&trace).after_attention));
        assert!(close(&report.identity_ratio, &identity_ratios(&trace)));
        assert!(close(&report.angular_distance.concat(), &angular_distance_matrix(&trace.hidden).concat()));
    }

    let out = dir.path().join("reports/tiny");
    report.write(&out, "tiny").unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["n_layers"], 4);
    assert_eq!(json["pruned_layers"], serde_json::json!([1, 2, 3, 4]));
    let layers = std::fs::read_to_string(out.join("layers.csv")).unwrap();
    assert_eq!(layers.lines().count(), 6, "header, embedding and 4 layers");
    assert_eq!(std::fs::read_to_string(out.join("angular_distance.csv")).unwrap().lines().count(), 1 + 4 + 3 + 2 + 1);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("| 4 |") && summary.contains("![variance.png](variance.png)"), "{summary}");
    for figure in ["variance.png", "angular_distance.png", "identity_ratio.png", "pruning_drop.png"] {
        assert_png_not_blank(&out.join(figure));
    }
    // Nothing but the report is left beside it.
    assert_eq!(names(out.parent().unwrap()), vec!["tiny"]);

    // Only the chosen layers are pruned; the others have no drop in the table.
    let some = AnalysisOptions { layers: vec![2], ..options.clone() };
    let partial = analyze(&model, &data, &some, &mut |_, _| {}).unwrap();
    assert_eq!((partial.pruned_layers.clone(), partial.pruning_drop.len()), (vec![2], 1));
    assert_eq!(partial.drop_of(2), report.drop_of(2));
    assert!(partial.summary("t").contains("| 1 | ") && partial.summary("t").contains("| - |"));

    // Bad requests are clear errors, not panics.
    let too_deep = AnalysisOptions { layers: vec![2, 9], ..options.clone() };
    let err = analyze(&model, &data, &too_deep, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::NoSuchLayer { layer: 9, n_layers: 4 })), "{err}");
    // A layer listed twice is refused by the options themselves, before any model is read.
    let twice = AnalysisOptions { layers: vec![2, 1, 2], ..options.clone() };
    assert_eq!(twice.validate(), Err(ConfigError::LayerTwice { layer: 2 }));
    assert!(matches!(
        analyze(&model, &data, &twice, &mut |_, _| {}),
        Err(layernorm_scaling::Error::Config(ConfigError::LayerTwice { layer: 2 }))
    ));
    let short = builtin_data(dir.path(), 1, 10_000);
    let err = analyze(&model, &short, &options, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, Error::Data(DataError::Split(SplitProblem::NoFullSequence))), "{err}");
}

#[test]
fn charts_and_heatmaps_are_valid_non_blank_pngs() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let line = LineChart::new("title", "x", "y")
        .with_series("a", vec![(0.0, 1.0), (1.0, 10.0), (2.0, 100.0)])
        .with_series("b", vec![(0.0, 2.0), (1.0, 3.0), (2.0, 4.0)])
        .with_log_y(true);
    line.write_png(&dir.path().join("line.png")).unwrap();
    assert_png_not_blank(&dir.path().join("line.png"));
    // A log axis with a non-positive value falls back to linear instead of failing.
    LineChart::new("t", "x", "y")
        .with_series("c", vec![(1.0, -1.0), (2.0, 0.0)])
        .with_log_y(true)
        .write_png(&dir.path().join("neg.png"))
        .unwrap();
    assert_png_not_blank(&dir.path().join("neg.png"));
    let heatmap = Heatmap {
        title: "triangle".into(),
        x_label: "l".into(),
        y_label: "n".into(),
        value_label: "d".into(),
        x_start: 0,
        y_start: 1,
        cells: vec![vec![0.0, 0.5, 1.0], vec![0.2, f64::NAN], vec![0.9]],
        small_is_bright: true,
    };
    heatmap.write_png(&dir.path().join("heat.png")).unwrap();
    assert_png_not_blank(&dir.path().join("heat.png"));
    // The colour direction: two cells, 0 on the left and 1 on the right. Viridis runs from purple
    // (68, 1, 84) to yellow (253, 231, 37); the smaller value is yellow when `small_is_bright`.
    for small_is_bright in [true, false] {
        let two = Heatmap { cells: vec![vec![0.0], vec![1.0]], small_is_bright, ..heatmap.clone() };
        let path = dir.path().join(format!("two-{small_is_bright}.png"));
        two.write_png(&path).unwrap();
        let (yellow_x, purple_x) = (mean_x_of_colour(&path, [253, 231, 37]), mean_x_of_colour(&path, [68, 1, 84]));
        assert_eq!(yellow_x < purple_x, small_is_bright, "yellow at x {yellow_x}, purple at x {purple_x}");
        std::fs::remove_file(&path).unwrap();
    }
    // Only the figures are left: no temporary files.
    assert_eq!(names(dir.path()), vec!["heat.png", "line.png", "neg.png"]);
}

#[test]
fn a_comparison_overlays_the_runs_and_tabulates_them() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = builtin_data(dir.path(), 200, 32);
    let options = AnalysisOptions { batch_size: 4, batches: 1, ..AnalysisOptions::default() };
    let runs: Vec<ComparedRun> = ["pre-ln", "lns"]
        .iter()
        .zip(unique_labels(&["x y".into(), "x y".into()]))
        .map(|(scheme, label)| {
            let model = LlamaConfig::tiny().with_norm_scheme(scheme.parse().unwrap()).init(&cpu()).unwrap();
            let report = analyze(&model, &data, &options, &mut |_, _| {}).unwrap();
            ComparedRun { label, title: scheme.to_string(), report }
        })
        .collect();
    assert_eq!(runs.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(), vec!["x-y", "x-y-2"]);
    let out = dir.path().join("comparison");
    write_comparison(&runs, &out).unwrap();
    let md = std::fs::read_to_string(out.join("comparison.md")).unwrap();
    assert!(md.contains("| x-y | 4 |") && md.contains("| x-y-2 | 4 |"), "{md}");
    let csv = std::fs::read_to_string(out.join("comparison.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 4);
    let summaries: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("comparison.json")).unwrap()).unwrap();
    let growth = runs[1].report.block_output_variance[4] / runs[1].report.block_output_variance[1];
    assert!((summaries[1]["variance_growth"].as_f64().unwrap() - growth).abs() < 1e-9);
    for figure in ["variance.png", "identity_ratio.png", "pruning_drop.png", "angular_distance_next.png"] {
        assert_png_not_blank(&out.join(figure));
    }
    for run in ["x-y", "x-y-2"] {
        assert_png_not_blank(&out.join(run).join("angular_distance.png"));
        assert!(out.join(run).join("report.json").is_file());
    }
}

fn tracked_run(out: &Path) -> TrainConfig {
    {
        let mut config = quick(out, 6, 3);
        config.output.track_every = Some(2);
        config.optim.warmup = Some(1);
        config
    }
}

#[test]
fn training_records_variance_and_per_layer_gradient_norms() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    train(&tracked_run(&out), Start::New, |_| {}).unwrap();
    let records = read_tracking(&out).unwrap();
    assert_eq!(records.iter().map(|r| r.step).collect::<Vec<_>>(), vec![0, 2, 4]);
    for r in &records {
        assert_eq!((r.block_output_variance.len(), r.after_attention_variance.len(), r.grad_norm.len()), (5, 4, 4));
        assert!(r.grad_norm.iter().all(|g| g.is_finite() && *g > 0.0), "{r:?}");
    }
    // The blocks' gradients are part of the step's global gradient norm (logged as a metric).
    let logged: Vec<f64> = read_metrics(&out)
        .unwrap()
        .into_iter()
        .filter(|row| row.split == "train" && row.metric.contains("Grad") && row.is_batch_value())
        .map(|row| row.value)
        .collect();
    assert_eq!(logged.len(), 6);
    for r in &records {
        let blocks: f64 = r.grad_norm.iter().map(|g| g * g).sum::<f64>().sqrt();
        let total = logged[r.step];
        assert!(blocks < total && blocks > 0.05 * total, "step {}: blocks {blocks} of total {total}", r.step);
    }
    // The first record is the initial model: its embedding variance matches a fresh init's scale.
    assert!(records[0].block_output_variance[0] > 0.0);

    // A resumed run keeps the records before its checkpoint and appends the rest, once each.
    let resumed_out = dir.path().join("resumed");
    train(&tracked_run(&resumed_out), Start::New, |_| {}).unwrap();
    let first_run = read_tracking(&resumed_out).unwrap();
    // An interruption after the checkpoint at step 3: the later checkpoint and the final model are gone.
    for file in ["model-step-6.bpk", "optim-step-6.bpk", "scheduler-step-6.bpk"] {
        for name in [file.to_string(), format!("{file}.sum")] {
            std::fs::remove_file(resumed_out.join("checkpoint").join(name)).unwrap();
        }
    }
    std::fs::remove_file(resumed_out.join("model.bpk")).unwrap();
    // A line cut short by a crash: the resumed run keeps the records before it.
    let tracking_file = resumed_out.join("tracking.jsonl");
    let text = std::fs::read_to_string(&tracking_file).unwrap();
    std::fs::write(&tracking_file, format!("{text}{{\"step\": 4, \"block_out")).unwrap();
    assert!(read_tracking(&resumed_out).unwrap_err().to_string().contains("line 4"));
    train(&tracked_run(&resumed_out), Start::Resume, |_| {}).unwrap();
    let resumed = read_tracking(&resumed_out).unwrap();
    assert_eq!(resumed.iter().map(|r| r.step).collect::<Vec<_>>(), vec![0, 2, 4]);
    assert_eq!(resumed[..2], first_run[..2]);
}

#[test]
fn the_analyze_command_writes_a_full_report_and_refuses_bad_input() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("pre-ln"), dir.path().join("lns"));
    train(
        &{
            let mut config = tracked_run(&a);
            config.model.norm = Some("pre-ln".parse().unwrap());
            config
        },
        Start::New,
        |_| {},
    )
    .unwrap();
    train(
        &{
            let mut config = tracked_run(&b);
            config.optim.steps = 3;
            config.output.track_every = None;
            config
        },
        Start::New,
        |_| {},
    )
    .unwrap();
    let analyze = example("analyze");
    let common = ["--seq-len", "32", "--batch-size", "4", "--batches", "1", "--device", "flex"];
    // The analysis of `run` that `common` asks for, in this process: the library's own refusals
    // and warnings, to find in what the command says.
    let prepared = |run: &Path, out: Option<&Path>| {
        let mut warnings = Vec::new();
        let request = AnalysisRequest {
            seq_len: 32,
            device: "flex".into(),
            out: out.map(Path::to_path_buf),
            options: AnalysisOptions { batch_size: 4, batches: 1, ..AnalysisOptions::default() },
            ..AnalysisRequest::new(vec![ModelSource::Run(run.to_path_buf())])
        };
        let refused = request
            .prepare(&mut |event| {
                if let AnalysisEvent::Warning(warning) = event {
                    warnings.push(warning);
                }
            })
            .err();
        (refused, warnings)
    };

    // A small multiple-choice file in the ARC layout, scored with and without each layer.
    let arc = dir.path().join("arc-good.jsonl");
    let questions = [
        r#"{"question": "brackets: ([", "choices": ["])", ")]"], "answer": 0}"#,
        r#"{"question": {"stem": "1+1="}, "choices": {"text": ["2", "3", "11"], "label": ["A", "B", "C"]}, "answerKey": "A"}"#,
        r#"{"question": "the old dogs", "choices": [{"text": "run.", "label": "1"}, {"text": "runs.", "label": "2"}], "answerKey": "1"}"#,
    ];
    std::fs::write(&arc, questions.join("\n")).unwrap();
    let output =
        Command::new(&analyze).args(["--run"]).arg(&a).arg("--choices").arg(&arc).args(common).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = a.join("analysis");
    for file in ["report.json", "layers.csv", "angular_distance.csv", "summary.md", "tracking.csv"] {
        assert!(report.join(file).is_file(), "{file} missing");
    }
    for figure in [
        "variance.png",
        "angular_distance.png",
        "identity_ratio.png",
        "pruning_drop.png",
        "training_variance.png",
        "training_grad_norm.png",
        "training_variance_by_step.png",
        "multiple_choice_drop.png",
    ] {
        assert_png_not_blank(&report.join(figure));
    }
    // It says where the report is.
    assert!(String::from_utf8_lossy(&output.stdout).contains(&report.display().to_string()));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap()).unwrap();
    let choices = &json["multiple_choice"];
    assert_eq!((choices["questions"].as_u64(), choices["acc_drop"].as_array().map(Vec::len)), (Some(3), Some(4)));
    for key in ["acc", "acc_norm"] {
        let value = choices["accuracy"][key].as_f64().unwrap();
        assert!([0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0].iter().any(|v| (v - value).abs() < 1e-9), "{key} = {value}");
    }
    // Running again replaces the earlier report (it holds report.json).
    let output = Command::new(&analyze).args(["--run"]).arg(&a).args(common).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!report.join("multiple_choice_drop.png").exists(), "the old report was replaced whole");

    // Two runs of a sweep, both `seed-1`, are labelled by scheme and seed.
    let (pre_ln, lns) = (dir.path().join("sweep/pre-ln/seed-1"), dir.path().join("sweep/lns/seed-1"));
    for (from, to) in [(&a, &pre_ln), (&b, &lns)] {
        std::fs::create_dir_all(to).unwrap();
        for file in ["model.json", "model.bpk", "model.bpk.sum"] {
            std::fs::copy(from.join(file), to.join(file)).unwrap();
        }
    }
    let out = dir.path().join("comparison");
    let output = Command::new(&analyze)
        .arg("--run")
        .arg(&pre_ln)
        .arg(&lns)
        .arg("--out")
        .arg(&out)
        .args(common)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let md = std::fs::read_to_string(out.join("comparison.md")).unwrap();
    assert!(md.contains("| pre-ln/seed-1 | 4 |") && md.contains("| lns/seed-1 | 4 |"), "{md}");
    assert!(out.join("pre-ln/seed-1/summary.md").is_file() && out.join("lns/seed-1/summary.md").is_file());
    assert_png_not_blank(&out.join("variance.png"));

    // Bad input: a clear message, a non-zero exit, no panic, and no report directory written.
    let bad_out = dir.path().join("bad");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let malformed = dir.path().join("arc.jsonl");
    std::fs::write(&malformed, "{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\nnot json\n")
        .unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["--layers".into(), "2,9".into()], "layer 9 does not exist"),
        (vec!["--data".into(), empty.clone().into()], "no text"),
        (vec!["--choices".into(), malformed.clone().into()], "arc.jsonl:2"),
        (vec!["--step".into(), "7".into()], "no checkpoint at step 7"),
    ];
    for (extra, expected) in cases {
        let output = Command::new(&analyze)
            .arg("--run")
            .arg(&a)
            .arg("--out")
            .arg(&bad_out)
            .args(common)
            .args(&extra)
            .output()
            .unwrap();
        assert_refused(&output, &[expected], &format!("{extra:?}"));
        assert!(!bad_out.exists(), "{extra:?} left a report behind");
    }
    // An output directory that is not an earlier report (a run, or the working directory) is
    // refused before any work, and left as it was.
    for (cwd, out) in [(dir.path(), b.as_os_str()), (b.as_path(), std::ffi::OsStr::new("."))] {
        let output = Command::new(&analyze)
            .current_dir(cwd)
            .arg("--run")
            .arg(&a)
            .arg("--out")
            .arg(out)
            .args(common)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The library's refusal of that directory, named as it was given.
        let (refused, _) = prepared(&a, Some(&b));
        let refused = refused.expect("refused in process too");
        assert!(matches!(&refused, Error::File { path, .. } if *path == b), "{refused:?}");
        let refused = refused.to_string().replace(&b.display().to_string(), &Path::new(out).display().to_string());
        assert!(output.status.code() == Some(1) && stderr.contains(&refused), "{out:?}: {stderr}");
        assert!(b.join("model.bpk").is_file() && b.join("model.json").is_file(), "{out:?} touched the run");
    }
    // An earlier report directory that holds the model being analysed is not replaced.
    let holder = dir.path().join("holder");
    std::fs::create_dir_all(holder.join("model")).unwrap();
    std::fs::write(holder.join("report.json"), "{}").unwrap();
    for file in ["model.json", "model.bpk", "model.bpk.sum"] {
        std::fs::copy(b.join(file), holder.join("model").join(file)).unwrap();
    }
    let output = Command::new(&analyze)
        .arg("--run")
        .arg(holder.join("model"))
        .arg("--out")
        .arg(&holder)
        .args(common)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Refused before any work: the folder's files are not provably the report's (no .contents),
    // the model's among them.
    assert!(output.status.code() == Some(1) && stderr.contains("model/model.bpk"), "{stderr}");
    assert!(holder.join("model/model.bpk").is_file());

    // A malformed tracking.jsonl names its line.
    let tracked = dir.path().join("bad-tracking");
    std::fs::create_dir(&tracked).unwrap();
    for file in ["model.json", "model.bpk", "model.bpk.sum"] {
        std::fs::copy(b.join(file), tracked.join(file)).unwrap();
    }
    let record = r#"{"step": 0, "block_output_variance": [], "after_attention_variance": [], "grad_norm": []}"#;
    std::fs::write(tracked.join("tracking.jsonl"), format!("{record}\n")).unwrap();
    let output = Command::new(&analyze).arg("--run").arg(&tracked).args(common).output().unwrap();
    // The library's refusal names the file and its line.
    let refused = prepared(&tracked, None).0.expect("refused in process too");
    let Error::File { path, message } = &refused else { panic!("{refused:?}") };
    assert!(*path == tracked.join("tracking.jsonl") && message.starts_with("line 1:"), "{refused}");
    assert_refused(&output, &[&refused.to_string()], "a tracking log without layers");
    assert!(!tracked.join("analysis").exists());

    // A line damaged mid-file (a write cut short by a full disk) costs its record, not the report.
    let damaged = dir.path().join("damaged-tracking");
    std::fs::create_dir(&damaged).unwrap();
    for file in ["model.json", "model.bpk", "model.bpk.sum"] {
        std::fs::copy(a.join(file), damaged.join(file)).unwrap();
    }
    let whole = std::fs::read_to_string(a.join("tracking.jsonl")).unwrap();
    let (first, rest) = whole.split_once('\n').unwrap();
    std::fs::write(damaged.join("tracking.jsonl"), format!("{first}\n{{\"step\": 1, \"block_out\n{rest}")).unwrap();
    let output = Command::new(&analyze).arg("--run").arg(&damaged).args(common).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The library warns of that line, naming the file and its line: the command says so.
    let (refused, warnings) = prepared(&damaged, None);
    assert!(refused.is_none(), "{refused:?}");
    let file = damaged.join("tracking.jsonl").display().to_string();
    assert!(warnings.len() == 1 && warnings[0].contains(&file) && warnings[0].contains("(line 2:"), "{warnings:?}");
    assert!(output.status.success() && stderr.contains(&warnings[0]), "{stderr}");
    let n_layers = read_model_dir_config(&damaged).unwrap().n_layers;
    let (_, bad) = read_tracking_skipping_damage(&damaged, n_layers).unwrap();
    assert_eq!(bad.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [2], "one damaged line, the second");
    assert!(damaged.join("analysis/report.json").is_file());

    // A checkpoint that does not match its config.
    let mismatched = dir.path().join("mismatched");
    std::fs::create_dir(&mismatched).unwrap();
    for file in ["model.bpk", "model.bpk.sum"] {
        std::fs::copy(a.join(file), mismatched.join(file)).unwrap();
    }
    let json = std::fs::read_to_string(b.join("model.json")).unwrap().replace("\"d_model\": 64", "\"d_model\": 32");
    std::fs::write(mismatched.join("model.json"), json).unwrap();
    let output = Command::new(&analyze).arg("--run").arg(&mismatched).args(common).output().unwrap();
    // The library refuses the weights, naming their file.
    let refused = prepared(&mismatched, None).0.expect("refused in process too");
    let Error::RunModel { path, problem } = &refused else { panic!("{refused:?}") };
    assert!(*path == mismatched.join("model.bpk"), "{refused:?}");
    assert!(matches!(**problem, LoadProblem::DoesNotMatch { .. }), "{refused:?}");
    assert_refused(&output, &[&refused.to_string()], "weights that do not match model.json");
    assert!(!mismatched.join("analysis").exists());
}

#[test]
fn the_angular_heatmap_of_a_trained_model_shows_the_blocks_structure() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let trained = train(&quick(&out, 40, 20), Start::New, |_| {}).unwrap();
    let data = builtin_data(dir.path(), 200, 64);
    let options = AnalysisOptions { batch_size: 4, batches: 2, ..AnalysisOptions::default() };
    let report = analyze(&trained.model, &data, &options, &mut |_, _| {}).unwrap();
    // From the first block (the default), the cells outside the first column are not one colour
    // (what the issue saw with the embedding column: every other cell the same yellow).
    let heatmap = angular_heatmap(&report);
    assert_eq!((heatmap.x_start, heatmap.cells.len()), (1, 3));
    let rest: Vec<f64> = heatmap.cells[1..].iter().flatten().copied().collect();
    let spread =
        rest.iter().copied().fold(f64::NEG_INFINITY, f64::max) - rest.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(spread > 0.1, "cells outside the first column: {rest:?}");
    // From the embedding output (the option), the first column is the embedding's.
    let with_embedding = angular_heatmap(&Report { heatmap_from_embedding: true, ..report.clone() });
    assert_eq!((with_embedding.x_start, with_embedding.cells.len()), (0, 4));
    assert_eq!(with_embedding.cells, normalize_per_n(&report.angular_distance));
}
