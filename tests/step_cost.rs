//! What a training step costs a GPU beyond its arithmetic, counted (not timed): kernel launches by
//! op family over wgpu on Mesa's CPU Vulkan (lavapipe), blocking host reads, bytes cast under
//! mixed precision. The bounds are the counts of today's program for the tiny model: a change
//! that adds launches or a host wait fails here, and one that removes some lowers them.

mod common;

use std::process::Command;

use common::example;
use layernorm_scaling::train::StepBenchmark;

/// One bench record of the tiny model at batch 2 x seq 32 on `device` in `precision`.
fn bench(device: &str, precision: &str) -> StepBenchmark {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let output = Command::new(example("bench"))
        .args(["--model", "tiny", "--seq-len", "32", "--batch-size", "2", "--iters", "1", "--warmup-iters", "1"])
        .args(["--device", device, "--precision", precision, "--json"])
        .arg(&json)
        .env("CUBECL_AUTOTUNE_LEVEL", "minimal")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    println!("{stdout}");
    let mut records: Vec<StepBenchmark> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    records.remove(0)
}

#[test]
fn a_cpu_step_counts_its_host_reads_and_the_casts_of_mixed_precision() {
    let f32_step = bench("flex", "f32");
    let cost = f32_step.cost.expect("the bench counts the step");
    assert!(cost.launches.is_empty(), "flex launches no kernels: {cost:?}");
    assert_eq!(cost.cast_bytes.weights + cost.cast_bytes.activations, 0, "f32 casts nothing: {cost:?}");
    assert_eq!(cost.host_reads, 0, "{cost:?}");

    let mixed = bench("flex", "bf16-mixed").cost.expect("the bench counts the step");
    assert_eq!(mixed.host_reads, 0, "{mixed:?}");
    // Every matrix of the tiny model (4 layers x 7 projections of d 64, d_ff 176, and the LM head
    // of a 256-token vocabulary; not the embedding table, which is looked up) is cast to bf16 once
    // in the step's forward pass: 2 bytes per weight.
    let (d, d_ff, vocab, layers) = (64u64, 176u64, 256u64, 4u64);
    let matrices = layers * (4 * d * d + 3 * d * d_ff) + d * vocab;
    assert_eq!(mixed.cast_bytes.weights, 2 * matrices, "{mixed:?}");
    // Activations are cast as autocast casts them: into each sub-block once (attention, the
    // feed-forward network: bf16, 2 bytes) and out of it once (f32, 4 bytes), and the LM head's
    // input; the projections, RoPE, attention and SwiGLU pass bf16 between them.
    let tokens = 2 * 32;
    let activations = layers * 2 * (2 + 4) * tokens * d + 2 * tokens * d;
    assert_eq!(mixed.cast_bytes.activations, activations, "{mixed:?}");
}

#[cfg(feature = "wgpu")]
#[test]
fn a_gpu_step_launches_no_more_kernels_than_today() {
    use layernorm_scaling::train::OpFamily;
    // Upper bounds per optimiser step (tiny model, batch 2 x seq 32), by precision: all launches,
    // then by family. Measured over lavapipe; the same program launches the same on any GPU.
    type Bound = (&'static str, usize, &'static [(OpFamily, usize)]);
    let bounds: [Bound; 2] = [
        // The optimiser: the norm's and AdamW's multi-tensor kernels, each launch taking as many
        // tensors as lavapipe binds (31 buffers: AdamW binds 7 a tensor, 4 tensors a launch; the
        // norm 29 a launch), and the verdict (f16's with its loss scale).
        ("f32", 146, &[(OpFamily::Optimizer, 13), (OpFamily::Matmul, 51), (OpFamily::Cast, 0)]),
        ("f16-mixed", 176, &[(OpFamily::Optimizer, 14), (OpFamily::Matmul, 51), (OpFamily::Cast, 24)]),
    ];
    for (precision, total, families) in bounds {
        let record = bench("wgpu-cpu", precision);
        let cost = record.cost.expect("the bench counts the step");
        println!(
            "wgpu-cpu {precision}: {} launches {:?}, {} host reads; kernels {:?}",
            cost.total_launches(),
            cost.launches,
            cost.host_reads,
            cost.kernels
        );
        assert!(cost.total_launches() > 0, "launches are seen: {cost:?}");
        // Burn autotunes each full sum between a one-launch reduction and an atomic sum whose
        // output is zero-filled first (two launches), by timing: which one a run picks varies
        // (seen: 466 and 475 launches of the same f16-mixed step). The bounds count the program,
        // not the autotuner's pick: an atomic sum's zero fill is not counted.
        let kernel = |name: &str| cost.kernels.iter().find(|(k, _)| k == name).map_or(0, |(_, n)| *n);
        let fills = kernel("FullKernel").min(kernel("SharedSumKernel"));
        let counted = cost.total_launches() - fills;
        assert!(counted <= total, "{precision}: {counted} launches ({fills} zero fills of atomic sums not counted), at most {total}: {cost:?}");
        for &(family, most) in families {
            let n = cost.launches_of(family);
            assert!(n <= most, "{precision}: {n} {} launches, at most {most}: {cost:?}", family.name());
        }
        // The gradient norm, the clip, the verdict and f16's skip-or-step decision with its loss
        // scale stay on the device.
        assert_eq!(cost.host_reads, 0, "{precision}: {cost:?}");
        // The fused ops' own kernels are counted in their families.
        for family in [OpFamily::Attention, OpFamily::Norm, OpFamily::Loss] {
            assert!(cost.launches_of(family) > 0, "{precision}: no {} launch: {cost:?}", family.name());
        }
        assert!(cost.pool_peak_bytes.is_some_and(|peak| peak > 1 << 20), "{precision}: {cost:?}");
    }
}

/// `scripts/gpu_bench.sh run` as one device call would run it, at a tiny size on flex
/// (`DRY_RUN=1`): every route is tried, a failing one (PyTorch, where python3 has no torch) is
/// recorded and the script goes on, and everything comes back in one packed file.
#[test]
fn the_gpu_bench_script_dry_run_measures_every_route_into_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let (results, pack) = (dir.path().join("results"), dir.path().join("out").join("gpu_bench.tar.xz"));
    let script = |envs: &[(&str, &str)]| {
        let mut command = Command::new("bash");
        command
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu_bench.sh"))
            .arg("run")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("DRY_RUN", "1")
            .env("BENCH", example("bench"))
            .env("RESULTS", &results)
            .env("PACK", &pack)
            .env_remove("OUT");
        command.envs(envs.iter().copied()).output().unwrap()
    };
    let output = script(&[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let summary = std::fs::read_to_string(results.join("summary.txt")).unwrap();
    for route in ["bench-flex-f32: done", "bench-flex-bf16-mixed: done", "kernels-flex-f32: done", "ratios: done"] {
        assert!(summary.contains(route), "{route}: {summary}");
    }
    for torch in ["torch-bf16-eager: ", "torch-bf16-compile: "] {
        assert!(summary.contains(torch), "every PyTorch route is tried or its failure recorded: {summary}");
    }
    let records: Vec<StepBenchmark> =
        serde_json::from_str(&std::fs::read_to_string(results.join("burn.json")).unwrap()).unwrap();
    let routes: Vec<(&str, &str)> = records.iter().map(|r| (r.device.as_str(), r.dtype.as_str())).collect();
    assert_eq!(routes, [("flex", "bf16-mixed"), ("flex", "f32")]);
    assert!(records.iter().all(|r| r.cost.is_some() && r.tokens_per_second > 0.0), "{records:?}");
    // One file, well under what a device call brings back (16 MiB), holding the summary.
    let packed = std::fs::metadata(&pack).unwrap().len();
    assert!(packed > 0 && packed < 16 << 20, "{packed} bytes");
    let listing = Command::new("tar").arg("-tJf").arg(&pack).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("./summary.txt") && listing.contains("./burn.json"), "{listing}");

    // A pack that cannot be written is said, and the run still ends well: its files stay.
    let output = script(&[("PACK", "/proc/no/such/place.tar.xz"), ("ROUTES", "flex:f32")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary = std::fs::read_to_string(results.join("summary.txt")).unwrap();
    assert!(summary.contains("could not pack into /proc/no/such/place.tar.xz"), "{summary}");
    // A bad setting is refused before any work.
    let output = script(&[("ROUTE_TIMEOUT", "abc")]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("ROUTE_TIMEOUT must be a whole number of seconds above 0, not 'abc'"), "{stderr}");
}
