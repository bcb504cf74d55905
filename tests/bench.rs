//! The bench example: one record per device and precision, the model's Hugging Face config for the
//! PyTorch script, the ratio table against a PyTorch record, and bad input.

mod common;

use std::process::Command;

use common::example;
use layernorm_scaling::train::StepBenchmark;

#[test]
fn the_bench_measures_writes_records_and_compares_with_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let (json, hf_config) = (dir.path().join("burn.json"), dir.path().join("config.json"));
    let small = ["--model", "tiny", "--seq-len", "16", "--batch-size", "2", "--iters", "2", "--warmup-iters", "1"];
    let output = Command::new(example("bench"))
        .args(small)
        .args(["--device", "flex", "--json"])
        .arg(&json)
        .arg("--hf-config")
        .arg(&hf_config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    // flex computes in f32 and bf16: one record each, with the model's shape and positive rates.
    let records: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(records.iter().map(|r| r.dtype.as_str()).collect::<Vec<_>>(), ["f32", "bf16"], "{stdout}");
    for r in &records {
        assert_eq!((r.device.as_str(), r.n_layers, r.d_model, r.batch_size, r.seq_len), ("flex", 4, 64, 2, 16));
        assert!(r.step_ms > 0.0 && r.tokens_per_second > 0.0 && r.tflops > 0.0, "{r:?}");
        assert!((r.tokens_per_second - 32.0 / (r.step_ms / 1e3)).abs() < 1e-6 * r.tokens_per_second);
        assert!(r.peak_memory_bytes.is_some_and(|b| b > 1 << 20), "{r:?}");
    }
    let hf: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&hf_config).unwrap()).unwrap();
    assert_eq!((hf["hidden_size"].as_u64(), hf["num_hidden_layers"].as_u64()), (Some(64), Some(4)), "{hf}");

    // A PyTorch record of the same shape at half the speed: the ratio is 2x.
    let mut theirs = records[0].clone();
    theirs.framework = "pytorch 2.9.0 eager".into();
    theirs.tokens_per_second = records[0].tokens_per_second / 2.0;
    let torch = dir.path().join("torch.json");
    std::fs::write(&torch, serde_json::to_string(&theirs).unwrap()).unwrap();
    let output = Command::new(example("bench"))
        .args(small)
        .args(["--device", "flex", "--bf16", "false", "--compare"])
        .arg(&torch)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    // `device dtype ours against... theirs ratio`: the ratio is this run's rate over the file's
    // (timing-free: a loaded machine changes the rate, not the arithmetic).
    let ratio_line = stdout.lines().find(|l| l.contains("pytorch 2.9.0 eager")).expect("a ratio line");
    let fields: Vec<&str> = ratio_line.split_whitespace().collect();
    let number = |field: &str| -> f64 { field.trim_end_matches('x').parse().unwrap() };
    let (ours, against, ratio) =
        (number(fields[2]), number(fields[fields.len() - 2]), number(fields[fields.len() - 1]));
    assert!((against - theirs.tokens_per_second).abs() <= 0.5, "the PyTorch rate is the file's: {ratio_line}");
    assert!(ours > 0.0, "{ratio_line}");
    let expected = ours / against;
    assert!((ratio - expected).abs() <= 0.005 + 0.01 * expected, "the ratio is ours over theirs: {ratio_line}");
}

#[test]
fn the_bench_refuses_bad_input_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let bad_json = dir.path().join("bad.json");
    std::fs::write(&bad_json, "{not json").unwrap();
    for (args, expected) in [
        (vec!["--device", "cudaa"], "unknown device"),
        (vec!["--device", "flex", "--model", "nope"], "unknown model preset"),
        (vec!["--device", "flex", "--iters", "0"], "0 is not in 1..=100000"),
        (vec!["--device", "flex", "--compare", bad_json.to_str().unwrap()], "not a record"),
        (vec!["--device", "flex", "--model", "7b"], "does not fit in memory"),
    ] {
        let output = Command::new(example("bench")).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_bf16_step_draws_token_ids_inside_the_vocabulary() {
    // 2,048 ids over a 256-token vocabulary: drawn as floats and cast in bf16, about one in 512
    // rounded up to 256 and the embedding lookup failed.
    let output = Command::new(example("bench"))
        .args(["--model", "tiny", "--seq-len", "256", "--batch-size", "8", "--iters", "1", "--warmup-iters", "0"])
        .args(["--device", "flex", "--bf16", "true"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.lines().any(|l| l.starts_with("flex") && l.contains("bf16") && !l.contains("skipped")), "{stdout}");
}
