//! The bench example: one record per device and precision, the model's Hugging Face config for the
//! PyTorch script, the ratio table against a PyTorch record, and bad input.

mod common;

use std::process::Command;

use common::{example, require_fault_points};
use layernorm_scaling::fused::profile::OpKind;
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
    // flex computes in every precision: one record each, with the model's shape and positive rates.
    let records: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let precisions: Vec<&str> = records.iter().map(|r| r.dtype.as_str()).collect();
    assert_eq!(precisions, ["f32", "bf16", "bf16-mixed", "f16-mixed"], "{stdout}");
    for r in &records {
        assert_eq!((r.device.as_str(), r.n_layers, r.d_model, r.batch_size, r.seq_len), ("flex", 4, 64, 2, 16));
        assert!(r.step_ms > 0.0 && r.tokens_per_second > 0.0 && r.tflops > 0.0, "{r:?}");
        assert!((r.tokens_per_second - 32.0 / (r.step_ms / 1e3)).abs() < 1e-6 * r.tokens_per_second);
        assert!(r.peak_memory_bytes.is_some_and(|b| b > 1 << 20), "{r:?}");
        // On a CPU device: no GPU name, no MFU without --peak-tflops, a start-up time that holds
        // at least the first step.
        assert!(r.gpu.is_none() && r.mfu.is_none(), "{r:?}");
        assert!(r.first_step_seconds.is_some_and(|s| s > 0.0 && s.is_finite()), "{r:?}");
    }
    let hf: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&hf_config).unwrap()).unwrap();
    assert_eq!((hf["hidden_size"].as_u64(), hf["num_hidden_layers"].as_u64()), (Some(64), Some(4)), "{hf}");
    // Measuring again replaces its own earlier outputs; one precision asked for is the one measured.
    let again = Command::new(example("bench"))
        .args(small)
        .args(["--device", "flex", "--precision", "f16-mixed", "--json"])
        .arg(&json)
        .arg("--hf-config")
        .arg(&hf_config)
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let again: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(again.iter().map(|r| r.dtype.as_str()).collect::<Vec<_>>(), ["f16-mixed"]);

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

    // The table is the result: a full disk under `> file` is a failure, not exit 0.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let output = Command::new(example("bench"))
        .arg("--records")
        .arg(&json)
        .arg("--compare")
        .arg(&torch)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The library's refusal of a result cut short, with the system's reason: a full disk.
    let refused = layernorm_scaling::Error::Output { error: std::io::Error::from_raw_os_error(28).to_string() };
    assert!(output.status.code() == Some(1) && stderr.contains(&refused.to_string()), "{stderr}");
}

#[test]
fn the_bench_refuses_bad_input_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(path("bad.json"), "{not json").unwrap();
    let model = r#"{"d_model":32,"d_ff":64,"n_layers":2,"n_heads":2,"vocab_size":256}"#;
    std::fs::write(path("model.json"), model).unwrap();
    // A record at 0 tokens/s (a ratio against it would be infinite).
    let record = serde_json::json!({"framework": "pytorch", "device": "cpu", "dtype": "f32", "n_layers": 2,
        "d_model": 32, "vocab_size": 256, "parameters": 1, "batch_size": 1, "seq_len": 8, "step_ms": 1.0,
        "tokens_per_second": 0.0, "peak_memory_bytes": null, "tflops": 0.0, "mfu": null, "threads": 1, "cpu": null});
    std::fs::write(path("zero.json"), record.to_string()).unwrap();
    std::fs::write(path("notes.txt"), "my notes").unwrap();
    // A config.json of a model, copied out of its folder: not the bench's to replace.
    let mistral = r#"{"model_type": "mistral", "hidden_size": 64}"#;
    std::fs::write(path("mistral.json"), mistral).unwrap();
    std::fs::create_dir(path("run")).unwrap();
    std::fs::write(path("run/model.json"), model).unwrap();
    for (args, expected) in [
        (vec!["--device", "cudaa"], "unknown device".to_string()),
        (vec!["--device", "flex", "--model", "nope"], "unknown model preset".into()),
        (vec!["--device", "flex", "--iters", "0"], "0 is not in 1..=100000".into()),
        (vec!["--device", "flex", "--compare", &path("bad.json")], "not a record".into()),
        (vec!["--device", "flex", "--compare", &path("zero.json")], "has 0 tokens/s".into()),
        (vec!["--device", "flex", "--model", "7b"], "does not fit in memory".into()),
        (vec!["--device", "flex", "--seq-len", "600"], "longer than the model's `max_seq_len` (256)".into()),
        // Train's options that a timed step does not use: taken silently, they said otherwise.
        (
            vec!["--device", "flex", "--data", "/nonexistent.txt", "--steps", "9"],
            "--data, --steps would not apply".into(),
        ),
        // An output that would replace an input, or the other output, before anything is measured.
        (
            vec!["--json", &path("out.json"), "--hf-config", &path("out.json")],
            "--json and --hf-config both name".into(),
        ),
        (vec!["--model", &path("model.json"), "--hf-config", &path("model.json")], "--hf-config and --model".into()),
        (vec!["--json", &path("zero.json"), "--compare", &path("zero.json")], "--json and --compare".into()),
        (vec!["--json", &format!("{}/", path("new"))], "is a folder".into()),
        // An existing file that is no earlier output of its kind (a run's model, notes): kept.
        (
            vec!["--device", "flex", "--json", &path("notes.txt")],
            "notes.txt exists and is not the bench's records".into(),
        ),
        (vec!["--device", "flex", "--hf-config", &path("run/model.json")], "is not a Hugging Face config".into()),
        (vec!["--device", "flex", "--hf-config", &path("mistral.json")], "is not a Hugging Face config".into()),
        // Records measured earlier take no options of a measurement.
        (
            vec!["--records", &path("zero.json"), "--compare", &path("zero.json"), "--seq-len", "64"],
            "--seq-len would not apply".into(),
        ),
    ] {
        let output = Command::new(example("bench")).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(&expected) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(path("model.json")).unwrap(), model, "the model file is untouched");
    assert_eq!(std::fs::read_to_string(path("notes.txt")).unwrap(), "my notes");
    assert_eq!(std::fs::read_to_string(path("mistral.json")).unwrap(), mistral);
    assert_eq!(std::fs::read_to_string(path("run/model.json")).unwrap(), model);
    assert!(!dir.path().join("out.json").exists() && !dir.path().join("new").exists());
}

#[test]
fn a_measurement_that_crashes_says_why() {
    // A measurement that aborts (as a failed allocation does): its message and signal reach the
    // user, not Rust's note on backtraces.
    let args = ["--model", "tiny", "--seq-len", "64", "--batch-size", "4", "--iters", "1", "--warmup-iters", "0"];
    require_fault_points();
    let output = Command::new(example("bench"))
        .args(args)
        .args(["--device", "flex", "--bf16", "false"])
        .env(layernorm_scaling::io::CRASH_AT, "bench:step")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    // The fault point's own line, naming it, and the signal (SIGABRT) that ended the measurement.
    let fault = format!("{}=bench:step: ", layernorm_scaling::io::CRASH_AT);
    assert!(stderr.contains(&fault) && stderr.contains("signal 6"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{stderr}");
    // A process limited to 1 GB of address space (`ulimit -v`), of which malloc's arenas and the
    // threads' stacks take about 640 MiB: refused before the step, with what to lower (it used
    // to abort on its first large allocation).
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1000000 && exec {} --model tiny --seq-len 256 --batch-size 64 --iters 1 --warmup-iters 0 \
             --device flex --bf16 false",
            example("bench").display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not fit in memory") && stderr.contains("lower --batch-size"), "{stderr}");
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

#[test]
fn the_breakdown_splits_the_median_step_and_says_when_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let small = ["--model", "tiny", "--seq-len", "32", "--batch-size", "2", "--iters", "3", "--warmup-iters", "1"];
    let run = |ops: &str, json: &std::path::Path| {
        let output = Command::new(example("bench"))
            .args(small)
            .args(["--device", "flex", "--bf16", "false", "--breakdown", "--json"])
            .arg(json)
            .env("LAYERNORM_SCALING_OPS", ops)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        let records: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        (stdout, records.into_iter().next().unwrap())
    };
    let (stdout, fused) = run("fused", &dir.path().join("fused.json"));
    assert_eq!(fused.ops.as_deref(), Some("fused"));
    let names: Vec<&str> = fused.breakdown.iter().map(|(name, _)| name.as_str()).collect();
    // The fused op kinds in report order, then the optimiser.
    let kinds = OpKind::ALL.map(OpKind::name);
    assert_eq!((&names[..4], names[4]), (&kinds[..], "optimiser"), "{stdout}");
    // The parts are the median step's own: they add up to its time.
    let total: f64 = fused.breakdown.iter().map(|(_, ms)| ms).sum();
    assert!((total - fused.step_ms).abs() <= 1e-6 * fused.step_ms, "{total} vs {}", fused.step_ms);
    assert!(fused.breakdown.iter().take(4).all(|(_, ms)| *ms > 0.0), "every fused op ran: {stdout}");
    // Each part is printed on a line of its own, with its milliseconds.
    for (part, ms) in &fused.breakdown {
        let printed = |l: &str| l.trim_start().starts_with(part.as_str()) && l.contains(&format!(" {ms:.1} ms "));
        assert!(stdout.lines().any(printed), "{part}: {stdout}");
    }

    let (stdout, reference) = run("reference", &dir.path().join("reference.json"));
    assert_eq!((reference.ops.as_deref(), reference.breakdown.len()), (Some("reference"), 0));
    assert!(
        stdout.contains("no breakdown for flex f32: only the fused ops time themselves (ops: reference)"),
        "{stdout}"
    );

    // Records read back print their breakdown too; a `null` breakdown reads as none.
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("fused.json")).unwrap()).unwrap();
    value[0]["breakdown"] = serde_json::Value::Null;
    std::fs::write(dir.path().join("null.json"), value.to_string()).unwrap();
    for (records, expected) in [("fused.json", "where the median step went"), ("null.json", "no breakdown")] {
        let output = Command::new(example("bench"))
            .args(["--breakdown", "--records"])
            .arg(dir.path().join(records))
            .arg("--compare")
            .arg(dir.path().join("fused.json"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(expected),
            "{records}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The processes whose command line holds `marker` (Linux's `/proc`).
#[cfg(target_os = "linux")]
fn processes_with(marker: &str) -> Vec<u32> {
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    entries
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        })
        .collect()
}

#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn a_killed_bench_leaves_no_measurement_running() {
    // A seed no other test gives marks the processes (the measurement gets the bench's options).
    let marker = format!("{}", 9_000_000_000u64 + u64::from(std::process::id()));
    let mut bench = Command::new(example("bench"))
        .args(["--model", "tiny", "--seq-len", "64", "--batch-size", "2", "--iters", "100000"])
        .args(["--device", "flex", "--bf16", "false", "--seed", &marker])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let child = loop {
        let children: Vec<u32> = processes_with(&marker).into_iter().filter(|&pid| pid != bench.id()).collect();
        if let Some(&child) = children.first() {
            break child;
        }
        assert!(started.elapsed().as_secs() < 60, "the measurement never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    bench.kill().unwrap();
    bench.wait().unwrap();
    let gone = || !std::path::Path::new(&format!("/proc/{child}")).exists() || processes_with(&marker).is_empty();
    let killed = std::time::Instant::now();
    while !gone() {
        assert!(killed.elapsed().as_secs() < 10, "the measurement {child} outlived the killed bench");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_kernel_profile_lists_the_gpu_kernels_and_says_when_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let small = ["--model", "tiny", "--seq-len", "16", "--batch-size", "2", "--iters", "1", "--warmup-iters", "1"];
    let devices = if cfg!(feature = "wgpu") { "flex,wgpu-cpu" } else { "flex" };
    let json = dir.path().join("profiled.json");
    let output = Command::new(example("bench"))
        .args(small)
        .args(["--device", devices, "--precision", "f32", "--kernel-profile", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("no kernel profile for flex f32: only CubeCL devices"), "{stdout}");
    let records: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(records[0].kernels.is_empty(), "{:?}", records[0].kernels);
    if !cfg!(feature = "wgpu") {
        return;
    }
    // The fused ops' own kernels ran on the GPU device, each at least once per layer and step.
    let kernels = &records[1].kernels;
    for name in ["RmsNormForwardKernel", "AttentionGradQKernel", "SwigluBackwardKernel", "PackColumnsKernel"] {
        assert!(
            kernels.iter().any(|k| k.name == name && k.launches >= 4 && k.milliseconds > 0.0),
            "{name}: {kernels:?}"
        );
    }
    assert!(kernels.windows(2).all(|w| w[0].milliseconds >= w[1].milliseconds), "longest first: {kernels:?}");
    // Only the timed step counts: autotuning and its device probes ran in the warm-up.
    assert!(!kernels.iter().any(|k| k.name == "MemoryDirectThroughput"), "{kernels:?}");
    assert!(stdout.contains("profiled: each kernel waited"), "{stdout}");
    // The longest kernels are listed by name, each with its launches; and again from the records
    // read back.
    let listed = |stdout: &str| {
        kernels.iter().take(4).all(|k| {
            stdout.lines().any(|l| l.trim_start().starts_with(&k.name) && l.contains(&format!(" {} ", k.launches)))
        })
    };
    assert!(listed(&stdout), "{stdout}");
    let output =
        Command::new(example("bench")).arg("--records").arg(&json).arg("--compare").arg(&json).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && listed(&stdout), "{stdout}");
}
