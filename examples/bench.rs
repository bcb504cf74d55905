//! Times a training step (forward, backward, AdamW) of any model on every compiled-in device, in
//! f32 and bf16 where the device has it, and compares the figures with PyTorch's.
//!
//! ```bash
//! cargo run --release --example bench -- --model 9m --seq-len 256 --batch-size 8 --hf-config runs/bench/9m.json
//! python3 scripts/torch_bench.py --config runs/bench/9m.json --seq-len 256 --batch-size 8 --json runs/bench/torch.json
//! cargo run --release --example bench -- --model 9m --seq-len 256 --batch-size 8 --compare runs/bench/torch.json
//! ```
//!
//! Each (device, precision) pair runs in a process of its own: a device takes one precision per
//! process, and the peak memory is then that pair's alone.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::memory::format_bytes;
use layernorm_scaling::train::{benchmark_step, model_config, StepBenchmark, TrainConfig};
use layernorm_scaling::{cli, compiled_backends, outln, parse_device, Error};

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
    layernorm_scaling::memory::reuse_freed_memory();
    let matches = cli::matches(cli::augment(Args::command(), &TrainConfig::default()));
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config = cli::overridden(TrainConfig::default(), &matches).unwrap_or_else(|e| e.exit());
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    layernorm_scaling::console::exit_code(run(&args, &config, given("device"), given("bf16")))
}

fn run(args: &Args, config: &TrainConfig, device_given: bool, dtype_given: bool) -> Result<(), Error> {
    config.validate()?;
    if args.single {
        let device = parse_device(&config.device)?;
        let record = benchmark_step(config, &device, args.warmup_iters, args.iters)?;
        outln!("{RECORD}{}", serde_json::to_string(&record).expect("a record serialises"));
        return Ok(());
    }
    let model = model_config(config)?;
    let theirs = args.compare.iter().map(read_records).collect::<Result<Vec<_>, _>>()?.concat();
    if let Some(path) = &args.records {
        let records = read_records(path)?;
        if args.breakdown {
            print_breakdowns(&records);
        }
        compare(&records, &theirs);
        return Ok(());
    }
    // Output paths are checked before minutes of measuring.
    for path in args.json.iter().chain(&args.hf_config) {
        check_writable(path)?;
    }
    if let Some(path) = &args.hf_config {
        let json = layernorm_scaling::hf::hf_config_json(&model)?;
        write_json(path, &json)?;
        outln!("wrote {} (the model's Hugging Face config.json)", path.display());
    }
    let devices: Vec<String> = if device_given {
        config.device.split(',').map(|d| d.trim().to_string()).collect()
    } else {
        compiled_backends().into_iter().map(String::from).collect()
    };
    for device in &devices {
        parse_device(device)?;
    }
    let dtypes: Vec<bool> = if dtype_given { vec![config.bf16] } else { vec![false, true] };
    outln!(
        "training step of {} layers x d_model {} ({} parameters, {}), batch {} x seq {}; median of {} steps; {} ops",
        model.n_layers,
        model.d_model,
        model.num_params(),
        model.norm_scheme,
        config.batch_size,
        config.seq_len,
        args.iters,
        layernorm_scaling::fused::current_path().name()
    );
    outln!(
        "{:<10} {:<5} {:>10} {:>11} {:>10} {:>8} {:>7}",
        "device",
        "dtype",
        "step ms",
        "tokens/s",
        "peak mem",
        "TFLOP/s",
        "MFU"
    );
    let (mut records, mut failures) = (Vec::new(), Vec::new());
    for device in &devices {
        for &bf16 in &dtypes {
            let dtype = if bf16 { "bf16" } else { "f32" };
            match measure(device, bf16) {
                Ok(record) => {
                    print_record(&record);
                    records.push(record);
                }
                // Asked for explicitly, a pair that cannot run is an error; by default it is skipped.
                Err(reason) if device_given && dtype_given => return Err(Error::Training(reason)),
                Err(reason) => {
                    outln!("{device:<10} {dtype:<5} skipped: {reason}");
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
    if let Some(path) = &args.json {
        write_json(path, &records)?;
        outln!("wrote {}", path.display());
    }
    if !theirs.is_empty() {
        compare(&records, &theirs);
    }
    Ok(())
}

/// Runs this bench again for one device and precision, and reads the record it prints.
fn measure(device: &str, bf16: bool) -> Result<StepBenchmark, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .args(["--device", device, "--bf16", if bf16 { "true" } else { "false" }, "--single"])
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|line| line.strip_prefix(RECORD));
    match (output.status.success(), line) {
        (true, Some(line)) => serde_json::from_str(line).map_err(|e| e.to_string()),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it failed without a message");
            Err(last.trim_start_matches("error: ").to_string())
        }
    }
}

fn print_record(r: &StepBenchmark) {
    let memory = r.peak_memory_bytes.map_or("-".into(), format_bytes);
    let mfu = r.mfu.map_or("-".into(), |m| format!("{:.1}%", 100.0 * m));
    outln!(
        "{:<10} {:<5} {:>10.1} {:>11.0} {:>10} {:>8.3} {:>7}",
        r.device,
        r.dtype,
        r.step_ms,
        r.tokens_per_second,
        memory,
        r.tflops,
        mfu
    );
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
            outln!("  {part:<50} {ms:>9.1} ms {:>5.1}%", 100.0 * ms / total.max(f64::MIN_POSITIVE));
        }
    }
}

/// An error unless a file can be written at `path` (its folder exists or can be made).
fn check_writable(path: &PathBuf) -> Result<(), Error> {
    if path.is_dir() {
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

/// The ratio table: each of our records against each record of the same shape and precision.
fn compare(ours: &[StepBenchmark], theirs: &[StepBenchmark]) {
    outln!("\n{:<10} {:<5} {:>11}  {:<28} {:>11} {:>7}", "device", "dtype", "tokens/s", "against", "tokens/s", "ratio");
    for a in ours {
        for b in theirs.iter().filter(|b| same_shape(a, b)) {
            let against = format!("{} ({}, {} threads)", b.framework, b.device, b.threads.unwrap_or(0));
            outln!(
                "{:<10} {:<5} {:>11.0}  {against:<28} {:>11.0} {:>6.2}x",
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
    }
    if let Some(cpu) = ours.iter().chain(theirs).find_map(|r| r.cpu.clone()) {
        outln!("CPU: {cpu}");
    }
}

/// Whether two records measured the same model, batch, sequence length and precision.
fn same_shape(a: &StepBenchmark, b: &StepBenchmark) -> bool {
    (a.dtype.as_str(), a.batch_size, a.seq_len, a.n_layers, a.d_model, a.vocab_size)
        == (b.dtype.as_str(), b.batch_size, b.seq_len, b.n_layers, b.d_model, b.vocab_size)
}

/// Records from a JSON file holding one record or a list of them.
fn read_records(path: &PathBuf) -> Result<Vec<StepBenchmark>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
    let invalid = |e: serde_json::Error| Error::file(path, format!("not a record of the bench or torch_bench.py: {e}"));
    match serde_json::from_str::<serde_json::Value>(&text).map_err(invalid)? {
        value @ serde_json::Value::Array(_) => serde_json::from_value(value).map_err(invalid),
        value => Ok(vec![serde_json::from_value(value).map_err(invalid)?]),
    }
}

fn write_json(path: &PathBuf, value: &impl serde::Serialize) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, e))?;
    }
    let text = serde_json::to_string_pretty(value).expect("a record serialises");
    layernorm_scaling::io::write_atomically(path, format!("{text}\n").as_bytes()).map_err(|e| Error::file(path, e))
}
