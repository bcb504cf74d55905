//! Pre-trains a LLaMA model under any normalisation scheme on burn-train.
//!
//! ```bash
//! cargo run --release --example train                         # small LNS model, built-in corpus
//! cargo run --release --example train -- --norm pre-ln --out runs/pre-ln
//! cargo run --release --example train -- --config configs/train/130m-lns.toml --device cuda
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use layernorm_scaling::model::{generate, SamplingConfig};
use layernorm_scaling::train::{train, OptimizerKind, Start, TrainConfig};

/// Every option overrides the same field of `--config` (or of the defaults).
#[derive(Parser, Debug)]
#[command(about = "Pre-train a LLaMA model with LayerNorm Scaling or any other normalisation scheme")]
// Negative numbers are values (`--min-lr-ratio -1` gets the range error, not "unknown argument").
#[command(allow_negative_numbers = true)]
struct Args {
    /// Training config file (TOML or JSON), e.g. configs/train/130m-lns.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model preset (tiny-8l, tiny, 9m, ..., 7b) or model JSON file [default: tiny-8l].
    #[arg(long)]
    model: Option<String>,
    /// Number of layers (overrides the model's).
    #[arg(long)]
    layers: Option<usize>,
    /// Normalisation scheme: lns, pre-ln, post-ln, deepnorm, mix-ln[:F], scaled-init, ...
    #[arg(long)]
    norm: Option<String>,
    /// Device: auto, flex, ndarray, wgpu, wgpu-cpu, vulkan, cuda:N, tch, ...
    #[arg(long)]
    device: Option<String>,
    /// Text files, folders, JSONL or JSONL.gz shards (default: the built-in corpus).
    #[arg(long, num_args = 1..)]
    data: Option<Vec<PathBuf>>,
    /// `byte` or a Hugging Face tokenizer.json.
    #[arg(long)]
    tokenizer: Option<String>,
    #[arg(long)]
    seq_len: Option<usize>,
    #[arg(long)]
    batch_size: Option<usize>,
    /// Micro-batches per optimiser step.
    #[arg(long)]
    grad_accum: Option<usize>,
    /// Optimiser steps.
    #[arg(long)]
    steps: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Linear warmup steps [default: a tenth of --steps, at most 40].
    #[arg(long)]
    warmup: Option<usize>,
    /// Final learning rate as a fraction of the peak.
    #[arg(long)]
    min_lr_ratio: Option<f64>,
    /// adamw or adam.
    #[arg(long)]
    optimizer: Option<String>,
    #[arg(long)]
    weight_decay: Option<f64>,
    /// Clip gradients to this global norm.
    #[arg(long)]
    clip_grad_norm: Option<f64>,
    #[arg(long)]
    seed: Option<u64>,
    /// Train in bfloat16 (where the device supports it).
    #[arg(long)]
    bf16: bool,
    /// Run directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Replace a run already in --out.
    #[arg(long)]
    overwrite: bool,
    /// Validate every N steps [default: 100, or at the end of a shorter run].
    #[arg(long)]
    eval_every: Option<usize>,
    /// Checkpoint every N steps, a multiple of --eval-every [default: at every validation].
    #[arg(long)]
    save_every: Option<usize>,
    /// Peak TFLOP/s of the device, to report MFU.
    #[arg(long)]
    peak_tflops: Option<f64>,
    /// Samples to generate at the end.
    #[arg(long)]
    samples: Option<usize>,
    /// Log a line every N steps.
    #[arg(long)]
    log_every: Option<usize>,
    /// Start from a Hugging Face model directory or a run directory (its shape replaces --model/--layers).
    #[arg(long)]
    init_from: Option<PathBuf>,
    /// Record per-layer variance and gradient norms every N steps (tracking.jsonl; plotted by analyze).
    #[arg(long)]
    track_every: Option<usize>,
}

fn main() -> ExitCode {
    layernorm_scaling::io::exit_code(run(Args::parse()))
}

fn config_from(args: &Args) -> Result<TrainConfig, String> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_file(path).map_err(|e| e.to_string())?,
        None => TrainConfig::default(),
    };
    macro_rules! set {
        ($($field:ident),*) => { $( if let Some(value) = &args.$field { config.$field = value.clone().into(); } )* };
    }
    set!(model, device, tokenizer, seq_len, batch_size, grad_accum, steps, lr, min_lr_ratio);
    set!(weight_decay, seed, out, samples, log_every);
    for (field, value) in [
        (&mut config.warmup, args.warmup),
        (&mut config.eval_every, args.eval_every),
        (&mut config.save_every, args.save_every),
    ] {
        if value.is_some() {
            *field = value;
        }
    }
    if args.layers.is_some() {
        config.layers = args.layers;
    }
    if args.norm.is_some() {
        config.norm = args.norm.clone();
    }
    if let Some(data) = &args.data {
        config.data = data.clone();
    }
    if args.clip_grad_norm.is_some() {
        config.clip_grad_norm = args.clip_grad_norm;
    }
    if args.init_from.is_some() {
        config.init_from = args.init_from.clone();
    }
    if args.track_every.is_some() {
        config.track_every = args.track_every;
    }
    if args.peak_tflops.is_some() {
        config.peak_tflops = args.peak_tflops;
    }
    if let Some(optimizer) = &args.optimizer {
        config.optimizer = match optimizer.as_str() {
            "adamw" => OptimizerKind::Adamw,
            "adam" => OptimizerKind::Adam,
            other => return Err(format!("unknown optimizer `{other}`; expected adamw or adam")),
        };
    }
    if args.bf16 {
        config.bf16 = true;
    }
    Ok(config)
}

fn run(args: Args) -> Result<(), String> {
    let config = config_from(&args)?;
    let start = match (args.resume, args.overwrite) {
        (true, _) => Start::Resume,
        (_, true) => Start::Overwrite,
        _ => Start::New,
    };
    let result = train(&config, start);
    let report = result.map_err(|e| e.to_string())?;
    let (parameters, scheme) = (report.model_config.num_params(), &report.model_config.norm_scheme);
    if report.steps_trained == 0 {
        println!(
            "\n{} ({parameters} parameters, {scheme}): the final model of step {} is written",
            report.out.display(),
            config.steps
        );
    } else {
        println!(
            "\ntrained {} ({parameters} parameters, {scheme}) for {} steps, to step {}, in {:.1} s ({:.0} tokens/s)",
            report.out.display(),
            report.steps_trained,
            config.steps,
            report.seconds,
            report.tokens_per_second
        );
    }
    println!("validation loss {:.4}, perplexity {:.3}", report.valid_loss, report.valid_loss.exp());
    let prompts: Vec<&str> =
        if config.data.is_empty() { vec!["the old ", "brackets: ([{", "347+28"] } else { vec!["The ", "And ", "I "] };
    for (index, prompt) in prompts.iter().take(config.samples).enumerate() {
        let ids = report.tokenizer.encode(prompt).map_err(|e| e.to_string())?;
        let sampling = SamplingConfig {
            max_new_tokens: 80,
            temperature: 0.7,
            seed: index as u64,
            stop: Some(report.tokenizer.eot()),
            ..SamplingConfig::default()
        };
        let new = generate(&report.model, &ids, &sampling);
        let text = report.tokenizer.decode(&new).map_err(|e| e.to_string())?;
        println!("sample {}: {prompt}{}", index + 1, text.trim_end());
    }
    Ok(())
}
