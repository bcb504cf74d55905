//! Samples text from a trained run or a Hugging Face model directory (temperature, top-k, top-p, KV cache).
//!
//! ```bash
//! cargo run --release --example generate -- --run runs/default --prompt "the old "
//! cargo run --release --example generate -- --hf-dir path/to/model --prompt "Once upon a time"
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use layernorm_scaling::model::{generate, SamplingConfig};
use layernorm_scaling::parse_device;
use layernorm_scaling::train::load_model_dir;

/// Generate text from a run directory of the train example.
#[derive(Parser, Debug)]
struct Args {
    /// Run directory (holds model.json and model.bpk).
    #[arg(long, required_unless_present = "hf_dir", conflicts_with = "hf_dir")]
    run: Option<PathBuf>,
    /// A Hugging Face model directory (config.json, safetensors, tokenizer.json) instead of a run.
    #[arg(long)]
    hf_dir: Option<PathBuf>,
    /// Use the checkpoint of this epoch instead of the final model.
    #[arg(long)]
    epoch: Option<usize>,
    /// Text to continue.
    #[arg(long, default_value = "the ")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    max_tokens: usize,
    /// Softmax temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f64,
    /// Number of samples.
    #[arg(long, default_value_t = 1)]
    samples: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, default_value = "auto")]
    device: String,
}

fn main() -> ExitCode {
    layernorm_scaling::io::exit_code(run(Args::parse()))
}

fn run(args: Args) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.top_p) || args.temperature < 0.0 {
        return Err("--top-p must be in [0, 1] and --temperature >= 0".into());
    }
    let device = parse_device(&args.device).map_err(|e| e.to_string())?;
    let dir = args.run.as_ref().or(args.hf_dir.as_ref()).ok_or("give --run or --hf-dir")?;
    let loaded = load_model_dir(dir, args.epoch, &device).map_err(|e| e.to_string())?;
    let tokenizer = loaded.tokenizer().map_err(|e| e.to_string())?;
    let model = loaded.model;
    let prompt = tokenizer.encode(&args.prompt).map_err(|e| e.to_string())?;
    if prompt.is_empty() {
        return Err("the prompt is empty after tokenisation; give some text with --prompt".into());
    }
    for sample in 0..args.samples {
        let config = SamplingConfig {
            max_new_tokens: args.max_tokens,
            temperature: args.temperature,
            top_k: (args.top_k > 0).then_some(args.top_k),
            top_p: (args.top_p < 1.0).then_some(args.top_p),
            seed: args.seed + sample as u64,
            stop: None,
        };
        let text = tokenizer.decode(&generate(&model, &prompt, &config)).map_err(|e| e.to_string())?;
        println!("--- sample {}\n{}{}", sample + 1, args.prompt, text);
    }
    Ok(())
}
