//! Times a training step (forward, backward, AdamW) of any model on every compiled-in device, in
//! every precision the device has (f32, bf16, bf16-mixed, f16-mixed), and compares the figures
//! with PyTorch's.
//!
//! ```bash
//! cargo run --release --example bench -- --model 9m --seq-len 256 --batch-size 8 --hf-config runs/bench/9m.json
//! python3 scripts/torch_bench.py --config runs/bench/9m.json --seq-len 256 --batch-size 8 --json runs/bench/torch.json
//! cargo run --release --example bench -- --model 9m --seq-len 256 --batch-size 8 --compare runs/bench/torch.json
//! ```
//!
//! Each (device, precision) pair runs in a process of its own: a device takes one precision per
//! process, and the peak memory is then that pair's alone.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::io::check_replaceable_file;
use layernorm_scaling::memory::format_bytes;
use layernorm_scaling::train::{
    benchmark_step, check_seq_len, model_config, runs_cubecl_kernels, StepBenchmark, TrainConfig, PROFILE_LOG,
    PROFILE_OPTION,
};
use layernorm_scaling::{cli, compiled_backends, outln, parse_device, ConfigError, Error, Precision};

/// The options of the bench itself; the model, batch and optimiser are `TrainConfig`'s options.
#[derive(Parser, Debug)]
#[command(about = "Time a training step on every compiled-in device and compare with PyTorch")]
#[command(args_override_self = true, allow_negative_numbers = true)]
struct Args {
    /// Timed steps (the median is reported; at most 100000, the times are kept in memory).
    #[arg(long, default_value_t = 10, value_parser = cli::size(1..=100_000))]
    iters: usize,
    /// Steps run before timing (at most 100000).
    #[arg(long, default_value_t = 3, value_parser = cli::size(0..=100_000))]
    warmup_iters: usize,
    /// Write the records as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the model's Hugging Face config.json, for `scripts/torch_bench.py --config`.
    #[arg(long)]
    hf_config: Option<PathBuf>,
    /// JSON records of `scripts/torch_bench.py` to compare with (a ratio table).
    #[arg(long, num_args = 1..)]
    compare: Vec<PathBuf>,
    /// Also print where a step's time goes: each fused op (forward and backward), the optimiser
    /// and the rest (CPU devices; a GPU queues work, so its wall-clock split says little).
    #[arg(long)]
    breakdown: bool,
    /// Also time each GPU kernel (CubeCL's profiling: wgpu, Vulkan, CUDA) and print the kernels
    /// that took the most device time. Each kernel then waits for the one before, so the step
    /// times of such a run are longer than without.
    #[arg(long)]
    kernel_profile: bool,
    /// Compare the records of an earlier run (its `--json` file) instead of measuring again.
    #[arg(long, requires = "compare")]
    records: Option<PathBuf>,
    /// Measure the one device and precision given, and print the record as JSON (used by the
    /// bench for each pair).
    #[arg(long, hide = true)]
    single: bool,
}

/// The prefix of the record line a single measurement prints.
const RECORD: &str = "bench-record: ";

fn main() -> ExitCode {
    layernorm_scaling::cli::console::reuse_freed_memory();
    let command = cli::augment(Args::command(), &TrainConfig::default());
    let options: Vec<String> = command.get_arguments().map(|arg| arg.get_id().to_string()).collect();
    let matches = cli::matches(command);
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config = cli::overridden(TrainConfig::default(), &matches).unwrap_or_else(|e| e.exit());
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    // The options of a measurement, which `--records` (measured earlier) would not apply.
    let reading_only = ["records", "compare", "breakdown"];
    let measuring: Vec<String> = options
        .iter()
        .map(String::as_str)
        .filter(|id| given(id) && !reading_only.contains(id))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    if args.records.is_some() && !measuring.is_empty() {
        let error = ConfigError::Conflict(format!(
            "--records compares records measured earlier, so {} would not apply; drop them, or measure again \
             without --records",
            measuring.join(", ")
        ));
        return layernorm_scaling::cli::console::exit_code(Err(Error::from(error)));
    }
    // Train's options that choose data, the schedule or the run's outputs: a step timed on random
    // tokens of the model's shape uses none of them, and taking them silently says otherwise.
    let unused: Vec<String> =
        TRAIN_ONLY.iter().filter(|id| given(id)).map(|id| format!("--{}", id.replace('_', "-"))).collect();
    if !unused.is_empty() {
        let error = ConfigError::Conflict(format!(
            "the bench times training steps on random tokens of the model's shape, so {} would not apply; drop \
             them (the model, batch, sequence length, precision, optimiser and device options apply)",
            unused.join(", ")
        ));
        return layernorm_scaling::cli::console::exit_code(Err(Error::from(error)));
    }
    // The printed table is the bench's result (--json is optional): a table lost is a failure.
    let result = run(&args, &config, given("device"), given("bf16") || given("precision"))
        .and_then(|()| layernorm_scaling::cli::console::output_written());
    layernorm_scaling::cli::console::exit_code(result)
}

/// The options of `train` (ids) that a timed step does not use.
const TRAIN_ONLY: [&str; 22] = [
    "data",
    "text_field",
    "builtin_docs",
    "tokenizer",
    "grad_accum",
    "steps",
    "warmup",
    "min_lr_ratio",
    "data_seed",
    "out",
    "eval_every",
    "save_every",
    "keep_checkpoints",
    "eval_batches",
    "valid_fraction",
    "valid_data",
    "valid_tokens",
    "sequences",
    "cache_dir",
    "samples",
    "log_every",
    "track_every",
];

fn run(args: &Args, config: &TrainConfig, device_given: bool, dtype_given: bool) -> Result<(), Error> {
    config.validate()?;
    check_paths(args, config)?;
    if args.single {
        cli::say_auto_device(&config.device);
        let device = parse_device(&config.device)?;
        let record = benchmark_step(config, &device, args.warmup_iters, args.iters)?;
        outln!("{RECORD}{}", serde_json::to_string(&record).expect("a record serialises"));
        return Ok(());
    }
    let model = model_config(config)?;
    check_seq_len(config, &model)?;
    let theirs = args.compare.iter().map(read_records).collect::<Result<Vec<_>, _>>()?.concat();
    if let Some(path) = &args.records {
        let records = read_records(path)?;
        if args.breakdown {
            print_breakdowns(&records);
        }
        print_kernel_profiles(&records, false);
        print_step_costs(&records);
        compare(&records, &theirs);
        return Ok(());
    }
    // Output paths are checked before minutes of measuring.
    for path in args.json.iter().chain(&args.hf_config) {
        check_writable(path)?;
    }
    if let Some(path) = &args.hf_config {
        let mut json = layernorm_scaling::hf::hf_config_json(&model)?;
        json[WRITTEN_BY.0] = WRITTEN_BY.1.into();
        write_json(path, &json)?;
        outln!("wrote {} (the model's Hugging Face config.json)", path.display());
    }
    let devices: Vec<String> = if device_given {
        config.device.split(',').map(|d| d.trim().to_string()).collect()
    } else {
        compiled_backends().into_iter().map(String::from).collect()
    };
    for device in &devices {
        cli::say_auto_device(device);
        parse_device(device)?;
    }
    let precisions: Vec<Precision> =
        if dtype_given { vec![config.training_precision()] } else { Precision::ALL.to_vec() };
    outln!(
        "training step of {} layers x d_model {} ({} parameters, {}), batch {} x seq {}; median of {} steps; {} ops",
        model.n_layers,
        model.d_model,
        model.num_params(),
        model.norm_scheme,
        config.optim.batch_size,
        config.data.seq_len,
        args.iters,
        layernorm_scaling::fused::current_path().name()
    );
    outln!(
        "{:<10} {:<10} {:>10} {:>11} {:>10} {:>8} {:>7} {:>8}",
        "device",
        "dtype",
        "step ms",
        "tokens/s",
        "peak mem",
        "TFLOP/s",
        "MFU",
        "1st step"
    );
    if args.kernel_profile {
        outln!("kernel profile on: each GPU kernel waits for the one before, so steps take longer than without");
    }
    let (mut records, mut failures) = (Vec::new(), Vec::new());
    for device in &devices {
        for &precision in &precisions {
            let dtype = precision.name();
            match measure(device, precision, args.kernel_profile) {
                Ok(record) => {
                    print_record(&record);
                    records.push(record);
                }
                // Asked for explicitly, a pair that cannot run is an error; by default it is skipped.
                Err(reason) if device_given && dtype_given => return Err(Error::Training(reason)),
                Err(reason) => {
                    outln!("{device:<10} {dtype:<10} skipped: {reason}");
                    failures.push(reason);
                }
            }
        }
    }
    if records.is_empty() {
        let reason = failures.into_iter().next().unwrap_or_else(|| "no device to measure".into());
        return Err(Error::Training(format!("nothing could be measured: {reason}")));
    }
    if args.breakdown {
        print_breakdowns(&records);
    }
    if args.kernel_profile {
        print_kernel_profiles(&records, true);
    }
    print_step_costs(&records);
    if let Some(path) = &args.json {
        write_json(path, &records)?;
        outln!("wrote {}", path.display());
    }
    if !theirs.is_empty() {
        compare(&records, &theirs);
    }
    Ok(())
}

/// Runs this bench again for one device and precision, and reads the record it prints. With
/// `kernel_profile` on a CubeCL device, the child logs CubeCL's profile into a temporary folder
/// and records the kernels of its timed steps.
fn measure(device: &str, precision: Precision, kernel_profile: bool) -> Result<StepBenchmark, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    // The last `--precision` given wins (a `--bf16` given to this bench made it the only one).
    command.args(std::env::args_os().skip(1)).args(["--device", device, "--precision", precision.name(), "--single"]);
    let profiled = kernel_profile && parse_device(device).is_ok_and(|device| runs_cubecl_kernels(&device));
    let _log_dir = if profiled {
        let dir =
            tempfile::tempdir().map_err(|e| format!("cannot make a temporary folder for the kernel profile: {e}"))?;
        // CubeCL reads the variable as UTF-8 and ignores it otherwise.
        let log = dir.path().join("cubecl.log");
        let log = log.to_str().ok_or_else(|| {
            format!("the temporary folder {} is not UTF-8, which CubeCL's log needs: set TMPDIR", dir.path().display())
        })?;
        command.env(PROFILE_OPTION, "profile").env(PROFILE_LOG, log);
        Some(dir)
    } else {
        command.env_remove(PROFILE_OPTION).env_remove(PROFILE_LOG);
        None
    };
    die_with_parent(&mut command);
    let output = command.output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|line| line.strip_prefix(RECORD));
    let record: StepBenchmark = match (output.status.success(), line) {
        (true, Some(line)) => serde_json::from_str(line).map_err(|e| e.to_string())?,
        _ => return Err(failure_reason(&String::from_utf8_lossy(&output.stderr), &output.status)),
    };
    if profiled && record.kernels.is_empty() {
        return Err("the kernel profile came out empty: CubeCL logged no kernel of the timed steps".into());
    }
    Ok(record)
}

/// Why a measurement failed: the last line of its stderr that says something (not Rust's notes
/// on backtraces), and the signal that ended it, if one did (an allocation that failed aborts).
fn failure_reason(stderr: &str, status: &std::process::ExitStatus) -> String {
    let noise = |line: &str| line.trim().is_empty() || line.starts_with("note: ") || line.contains("backtrace");
    let said = stderr.lines().rev().find(|line| !noise(line)).map(|line| line.trim_start_matches("error: "));
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    match (said, signal) {
        (Some(said), Some(signal)) => format!("{said} (the measurement was ended by signal {signal})"),
        (None, Some(signal)) => format!("the measurement was ended by signal {signal}"),
        (Some(said), None) => said.to_string(),
        (None, None) => format!("the measurement failed without a message ({status})"),
    }
}

/// Has the measuring child killed when the bench dies (Linux), so that a killed bench leaves no
/// measurement running.
fn die_with_parent(command: &mut Command) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as i32;
        // SAFETY: prctl, getppid and raise are async-signal-safe, as pre_exec requires.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::raise(libc::SIGKILL); // the bench died before the prctl
                }
                Ok(())
            });
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = command;
}

fn print_record(r: &StepBenchmark) {
    let memory = r.peak_memory_bytes.map_or("-".into(), format_bytes);
    let mfu = r.mfu.map_or("-".into(), |m| format!("{:.1}%", 100.0 * m));
    let first = r.first_step_seconds.map_or("-".into(), |s| format!("{s:.1} s"));
    outln!(
        "{:<10} {:<10} {:>10.1} {:>11.0} {:>10} {:>8.3} {:>7} {:>8}",
        r.device,
        r.dtype,
        r.step_ms,
        r.tokens_per_second,
        memory,
        r.tflops,
        mfu,
        first
    );
    if !r.kernels.is_empty() {
        outln!("{:<10} profiled: each kernel waited for the one before, so steps took longer than without", "");
    }
    if let Some(gpu) = &r.gpu {
        let peak = layernorm_scaling::device::known_peak_tflops(gpu)
            .map_or("not known: give --peak-tflops for MFU".into(), |p| format!("{p} TFLOP/s dense bf16"));
        outln!("{:<10} on {gpu} (peak {peak}); peak mem is the device memory reserved", "");
    }
}

/// Kernels listed per record in [`print_kernel_profiles`]; the rest are summed in one line.
const KERNELS_SHOWN: usize = 15;

/// Each record's kernels by device time, with their share of the kernels' total; with
/// `say_when_none`, a line for each record without them.
fn print_kernel_profiles(records: &[StepBenchmark], say_when_none: bool) {
    for r in records {
        if r.kernels.is_empty() {
            if say_when_none {
                let (device, dtype) = (&r.device, &r.dtype);
                outln!("\nno kernel profile for {device} {dtype}: only CubeCL devices (wgpu, vulkan, cuda) write one");
            }
            continue;
        }
        let total: f64 = r.kernels.iter().map(|k| k.milliseconds).sum();
        let share = |ms: f64| 100.0 * ms / total.max(f64::MIN_POSITIVE);
        outln!("\nGPU kernels on {} {} (device time over the timed steps, {:.1} ms in all):", r.device, r.dtype, total);
        outln!("  {:<52} {:>11} {:>9} {:>6}", "kernel", "ms", "launches", "share");
        for k in r.kernels.iter().take(KERNELS_SHOWN) {
            outln!("  {:<52} {:>11.2} {:>9} {:>5.1}%", k.name, k.milliseconds, k.launches, share(k.milliseconds));
        }
        let rest = &r.kernels[r.kernels.len().min(KERNELS_SHOWN)..];
        if !rest.is_empty() {
            let (ms, launches) = rest.iter().fold((0.0, 0), |(ms, n), k| (ms + k.milliseconds, n + k.launches));
            let other = format!("{} other kernels", rest.len());
            outln!("  {other:<52} {ms:>11.2} {launches:>9} {:>5.1}%", share(ms));
        }
    }
}

/// Each record's step cost: launches by op family (CubeCL devices), host reads, bytes cast, the
/// device pool's peak.
fn print_step_costs(records: &[StepBenchmark]) {
    for r in records {
        let Some(cost) = &r.cost else { continue };
        outln!("\none optimiser step on {} {}, counted:", r.device, r.dtype);
        if cost.launches.is_empty() {
            outln!("  kernel launches: none counted (only CubeCL devices launch kernels: wgpu, vulkan, cuda)");
        } else {
            let families: Vec<String> = cost.launches.iter().map(|(f, n)| format!("{} {n}", f.name())).collect();
            outln!("  kernel launches: {} ({})", cost.total_launches(), families.join(", "));
            let top: Vec<String> = cost.kernels.iter().take(8).map(|(k, n)| format!("{k} {n}")).collect();
            outln!("  most launched: {}", top.join(", "));
        }
        outln!("  blocking host reads: {}", cost.host_reads);
        let cast = cost.cast_bytes;
        outln!(
            "  bytes cast by the forward pass: {} of weights, {} of activations",
            format_bytes(cast.weights),
            format_bytes(cast.activations)
        );
        if let Some(peak) = cost.pool_peak_bytes {
            outln!("  device memory pool peak: {}", format_bytes(peak));
        }
    }
}

/// Each record's median step by part, with its share of the step.
fn print_breakdowns(records: &[StepBenchmark]) {
    for r in records {
        let ops = r.ops.as_deref().unwrap_or("unknown");
        if r.breakdown.is_empty() {
            outln!("\nno breakdown for {} {}: only the fused ops time themselves (ops: {ops})", r.device, r.dtype);
            continue;
        }
        let total: f64 = r.breakdown.iter().map(|(_, ms)| ms).sum();
        outln!("\nwhere the median step went on {} {} ({ops} ops, {:.1} ms):", r.device, r.dtype, r.step_ms);
        for (part, ms) in &r.breakdown {
            outln!("  {part:<52} {ms:>9.1} ms {:>5.1}%", 100.0 * ms / total.max(f64::MIN_POSITIVE));
        }
    }
}

/// An error unless a file can be written at `path` (its folder exists or can be made).
fn check_writable(path: &PathBuf) -> Result<(), Error> {
    let text = path.as_os_str().to_string_lossy();
    if path.is_dir() || text.ends_with(std::path::MAIN_SEPARATOR) || text.ends_with('/') {
        return Err(Error::file(path, "is a folder; give a file name for the JSON"));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::file(dir, format!("cannot make the folder for {}: {e}", path.display())))?;
    tempfile::Builder::new()
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| Error::file(dir, format!("cannot write {} there: {e}", path.display())))
}

/// An error when an output (`--json`, `--hf-config`) is the file of another output or of an
/// input (`--model`, `--compare`, `--records`): the write would replace it.
fn check_paths(args: &Args, config: &TrainConfig) -> Result<(), Error> {
    let model = Path::new(&config.model.preset);
    let model = (config.model.preset.ends_with(".json") || model.is_file()).then_some(("--model", model));
    let outputs = [("--json", args.json.as_deref()), ("--hf-config", args.hf_config.as_deref())];
    let outputs: Vec<(&str, &Path)> = outputs.into_iter().filter_map(|(name, path)| Some((name, path?))).collect();
    let inputs = model.into_iter().chain(args.compare.iter().map(|p| ("--compare", p.as_path())));
    let inputs: Vec<(&str, &Path)> = inputs.chain(args.records.iter().map(|p| ("--records", p.as_path()))).collect();
    for (i, (name, path)) in outputs.iter().enumerate() {
        for (other, other_path) in outputs[i + 1..].iter().chain(&inputs) {
            if same_file(path, other_path) {
                return Err(ConfigError::Conflict(format!(
                    "{name} and {other} both name {}: writing {name} would replace it; give {name} a file of its own",
                    path.display()
                ))
                .into());
            }
        }
    }
    // Neither replaces a file of the user's named by mistake (a run's model.json, a corpus).
    if let Some(path) = &args.json {
        let is_record = |bytes: &[u8]| std::str::from_utf8(bytes).is_ok_and(|text| parse_records(text).is_ok());
        check_replaceable_file(path, "the bench's records", is_record)
            .map_err(|e| Error::file(path, format!("--json: {e}")))?;
    }
    if let Some(path) = &args.hf_config {
        check_replaceable_file(path, "a Hugging Face config of the bench's", is_bench_hf_config)
            .map_err(|e| Error::file(path, format!("--hf-config: {e}")))?;
    }
    Ok(())
}

/// Whether two paths name the same file: the same file once links are followed where both
/// exist, the same absolute path otherwise.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

/// The ratio table: each of our records against each record of the same shape and precision.
fn compare(ours: &[StepBenchmark], theirs: &[StepBenchmark]) {
    outln!(
        "\n{:<10} {:<10} {:>11}  {:<28} {:>11} {:>7}",
        "device",
        "dtype",
        "tokens/s",
        "against",
        "tokens/s",
        "ratio"
    );
    for a in ours {
        for b in theirs.iter().filter(|b| same_shape(a, b)) {
            let against = format!("{} ({}, {} threads)", b.framework, b.device, b.threads.unwrap_or(0));
            outln!(
                "{:<10} {:<10} {:>11.0}  {against:<28} {:>11.0} {:>6.2}x",
                a.device,
                a.dtype,
                a.tokens_per_second,
                b.tokens_per_second,
                a.tokens_per_second / b.tokens_per_second
            );
        }
    }
    if !ours.iter().any(|a| theirs.iter().any(|b| same_shape(a, b))) {
        outln!("no record to compare with: none has the same model, batch, sequence length and precision");
        for r in ours.iter().take(1).chain(theirs.iter().take(3)) {
            outln!("  {:<28} {}", r.framework, shape_of(r));
        }
    }
    if let Some(cpu) = ours.iter().chain(theirs).find_map(|r| r.cpu.clone()) {
        outln!("CPU: {cpu}");
    }
}

/// Whether two records measured the same model, batch, sequence length and precision.
fn same_shape(a: &StepBenchmark, b: &StepBenchmark) -> bool {
    shape_of(a) == shape_of(b)
}

/// What [`same_shape`] compares, as a line of a report.
fn shape_of(r: &StepBenchmark) -> String {
    format!(
        "{}, batch {} x seq {}, {} layers x d_model {}, vocabulary {}, {} parameters",
        r.dtype, r.batch_size, r.seq_len, r.n_layers, r.d_model, r.vocab_size, r.parameters
    )
}

/// Records from a JSON file holding one record or a list of them.
fn read_records(path: &PathBuf) -> Result<Vec<StepBenchmark>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
    let records = parse_records(&text)
        .map_err(|e| Error::file(path, format!("not a record of the bench or torch_bench.py: {e}")))?;
    if let Some(bad) = records.iter().find(|r| !(r.tokens_per_second > 0.0 && r.tokens_per_second.is_finite())) {
        let message =
            format!("a record of {} has {} tokens/s; a measured rate is above 0", bad.framework, bad.tokens_per_second);
        return Err(Error::file(path, message));
    }
    Ok(records)
}

fn write_json(path: &PathBuf, value: &impl serde::Serialize) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, e))?;
    }
    let text = serde_json::to_string_pretty(value).expect("a record serialises");
    layernorm_scaling::io::write_atomically(path, format!("{text}\n").as_bytes()).map_err(|e| Error::file(path, e))
}

/// The records of a JSON text holding one record or a list of them.
fn parse_records(text: &str) -> Result<Vec<StepBenchmark>, serde_json::Error> {
    match serde_json::from_str::<serde_json::Value>(text)? {
        value @ serde_json::Value::Array(_) => serde_json::from_value(value),
        value => Ok(vec![serde_json::from_value(value)?]),
    }
}

/// The key `--hf-config` adds to the config it writes (transformers keeps unknown keys as
/// attributes): a later bench may replace that file, and no other.
const WRITTEN_BY: (&str, &str) = ("_written_by", "layernorm-scaling bench --hf-config");

/// Whether `bytes` are a config.json that `--hf-config` wrote ([`WRITTEN_BY`]).
fn is_bench_hf_config(bytes: &[u8]) -> bool {
    let config = serde_json::from_slice::<serde_json::Value>(bytes).ok();
    config.is_some_and(|json| json.get(WRITTEN_BY.0).and_then(|v| v.as_str()) == Some(WRITTEN_BY.1))
}
