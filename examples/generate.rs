//! Samples text from a trained run or a Hugging Face model directory (temperature, top-k, top-p, KV cache).
//!
//! ```bash
//! cargo run --release --example generate -- --run runs/default --prompt "the old "
//! cargo run --release --example generate -- --hf-dir path/to/model --prompt "Once upon a time"
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::cli::console::write_result;
use layernorm_scaling::model::{generate, SamplingConfig};
use layernorm_scaling::run::{load_model_dir, require_hf_dir};
use layernorm_scaling::{cli, parse_device, ConfigError, Error};

/// Generate text from a run directory of the train example.
#[derive(Parser, Debug)]
// Negative numbers are values (`--top-p -0.5` gets the range error, not "unknown argument").
#[command(allow_negative_numbers = true)]
struct Args {
    /// Run directory (holds model.json and model.bpk).
    #[arg(long, required_unless_present = "hf_dir", conflicts_with = "hf_dir")]
    run: Option<PathBuf>,
    /// A Hugging Face model directory (config.json, safetensors, tokenizer.json) instead of a run.
    #[arg(long)]
    hf_dir: Option<PathBuf>,
    /// Use the checkpoint at this optimiser step instead of the final model.
    #[arg(long, conflicts_with = "epoch")]
    step: Option<usize>,
    /// Deprecated: the checkpoint at the end of this validation interval (use --step).
    #[arg(long, hide = true)]
    epoch: Option<usize>,
    /// The tokenizer.json to use instead of the model's own (e.g. when the path the run recorded
    /// is relative to another folder).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Text to continue.
    #[arg(long, default_value = "the ")]
    prompt: String,
    /// Number of samples, at most 100000 (sample `i` draws with seed `--seed + i`).
    #[arg(long, default_value_t = 1, value_parser = cli::size(1..=100_000))]
    samples: usize,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, default_value = "auto")]
    device: String,
}

fn main() -> ExitCode {
    layernorm_scaling::cli::console::reuse_freed_memory();
    let matches = cli::matches(cli::augment(Args::command(), &SamplingConfig::default()));
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let sampling = cli::overridden(SamplingConfig::default(), &matches).unwrap_or_else(|e| e.exit());
    layernorm_scaling::cli::console::exit_code(run(&args, &sampling))
}

fn run(args: &Args, sampling: &SamplingConfig) -> Result<(), Error> {
    sampling.validate()?;
    cli::say_auto_device(&args.device);
    let device = parse_device(&args.device)?;
    let hf_dir = args.hf_dir.as_deref().map(require_hf_dir).transpose()?;
    let dir = args.run.as_ref().or(hf_dir.as_ref()).expect("clap requires --run or --hf-dir");
    let loaded = load_model_dir(dir, cli::checkpoint_step(dir, args.step, args.epoch)?, &device)?;
    let tokenizer = loaded.tokenizer(args.tokenizer.as_deref())?;
    let model = loaded.model;
    // A pretrained model's prompt starts as transformers' does (with `<s>`); a run of ours was
    // trained on documents without special tokens.
    let prompt = if hf_dir.is_some() && args.tokenizer.is_none() {
        tokenizer.encode_with_special_tokens(&args.prompt)?
    } else {
        tokenizer.encode(&args.prompt)?
    };
    if prompt.is_empty() {
        return Err(ConfigError::Conflict(
            "the prompt is empty after tokenisation; give some text with --prompt".into(),
        )
        .into());
    }
    // The prompt and every generated token must fit in the model's context (a Mistral model's
    // sliding window included): refused here, before any token is generated.
    let max_seq_len = loaded.config.max_seq_len;
    if prompt.len() > max_seq_len || (prompt.len() == max_seq_len && sampling.max_new_tokens > 0) {
        return Err(ConfigError::Conflict(format!(
            "the prompt is {} tokens, but the model's context holds {} (`max_seq_len`) with room for the next \
             token: give a shorter --prompt",
            prompt.len(),
            max_seq_len
        ))
        .into());
    }
    let room = loaded.config.max_seq_len.saturating_sub(prompt.len());
    let what = format!("--max-tokens {} after a prompt of {} tokens", sampling.max_new_tokens, prompt.len());
    let fix = format!("give --max-tokens in 0..={room}, or a shorter --prompt");
    loaded.config.check_seq_len(prompt.len().saturating_add(sampling.max_new_tokens), &what, &fix)?;
    for sample in 0..args.samples {
        let config = SamplingConfig { seed: sampling.seed.wrapping_add(sample as u64), ..sampling.clone() };
        let text = tokenizer.decode(&generate(&model, &prompt, &config))?;
        write_result(format_args!("--- sample {}\n{}{}", sample + 1, args.prompt, text))?;
    }
    Ok(())
}
