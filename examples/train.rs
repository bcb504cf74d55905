//! Pre-trains a LLaMA model under any normalisation scheme on burn-train.
//!
//! ```bash
//! cargo run --release --example train                         # small LNS model, built-in corpus
//! cargo run --release --example train -- --norm pre-ln --out runs/pre-ln
//! cargo run --release --example train -- --config configs/train/130m-lns.toml --device cuda
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::cli::{self, console};
use layernorm_scaling::model::{generate, SamplingConfig};
use layernorm_scaling::train::{train, Start, TrainConfig};
use layernorm_scaling::{outln, Error};

/// The options of this command itself; every other option (the training settings) is a field of
/// `TrainConfig` (`--steps`, `--norm`, ...) and overrides that field of `--config` (or of the
/// defaults).
#[derive(Parser, Debug)]
#[command(about = "Pre-train a LLaMA model with LayerNorm Scaling or any other normalisation scheme")]
// Negative numbers are values (`--min-lr-ratio -1` gets the range error, not "unknown argument").
#[command(allow_negative_numbers = true)]
struct Args {
    /// Training config file (TOML or JSON), e.g. configs/train/130m-lns.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Replace a run already in --out.
    #[arg(long)]
    overwrite: bool,
}

fn main() -> ExitCode {
    console::reuse_freed_memory();
    let matches = cli::matches(cli::augment(Args::command(), &TrainConfig::default()));
    console::exit_code(run(&matches))
}

fn run(matches: &clap::ArgMatches) -> Result<(), Error> {
    let args = Args::from_arg_matches(matches).unwrap_or_else(|e| e.exit());
    let start = match (args.resume, args.overwrite) {
        (true, _) => Start::Resume,
        (_, true) => Start::Overwrite,
        _ => Start::New,
    };
    let config = cli::train_settings(matches, args.config.as_deref(), start)?;
    cli::say_auto_device(&config.device);
    // Ctrl-C or a scheduler's SIGTERM: say what the run kept and how to go on from it.
    let out = config.output.out.clone();
    console::on_stop_signal(move |signal| layernorm_scaling::train::stopped_note(&out, signal))
        .map_err(|e| Error::Training(format!("cannot watch for SIGINT and SIGTERM: {e}")))?;
    let report = train(&config, start, |event| console::print_event(&event, event.is_notice()))?;
    let (parameters, scheme) = (report.model_config.num_params(), &report.model_config.norm_scheme);
    if report.steps_trained == 0 {
        outln!(
            "\n{} ({parameters} parameters, {scheme}): the final model of step {} is written",
            report.out.display(),
            config.optim.steps
        );
    } else {
        outln!(
            "\ntrained {} ({parameters} parameters, {scheme}) for {} steps, to step {}, in {:.1} s ({:.0} tokens/s)",
            report.out.display(),
            report.steps_trained,
            config.optim.steps,
            report.seconds,
            report.tokens_per_second
        );
    }
    outln!("validation loss {:.4}, perplexity {:.3}", report.valid_loss, report.valid_loss.exp());
    let prompts: Vec<&str> = if config.data.files.is_empty() {
        vec!["the old ", "brackets: ([{", "347+28"]
    } else {
        vec!["The ", "And ", "I "]
    };
    for (index, prompt) in prompts.iter().take(config.output.samples).enumerate() {
        let ids = report.tokenizer.encode(prompt)?;
        let sampling = SamplingConfig {
            max_new_tokens: 80,
            temperature: 0.7,
            seed: index as u64,
            stop: Some(report.tokenizer.eot()),
            ..SamplingConfig::default()
        };
        let new = generate(&report.model, &ids, &sampling);
        let text = report.tokenizer.decode(&new)?;
        outln!("sample {}: {prompt}{}", index + 1, text.trim_end());
    }
    match report.verdict {
        // Saved, but no better than its start (a collapse with finite losses, say).
        Some(reason) => Err(Error::Training(format!("{reason}; the run is in {}", report.out.display()))),
        None => Ok(()),
    }
}
