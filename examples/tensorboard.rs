//! Writes TensorBoard event files for runs trained before the train example wrote them (or with
//! `--tensorboard false`), from their `metrics.jsonl` and `tracking.jsonl`, into each run's
//! `tensorboard/` (replacing what is there). Then `tensorboard --logdir runs` shows them all.
//!
//! ```bash
//! cargo run --release --example tensorboard -- runs/default runs/sweep/*/*
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use layernorm_scaling::tensorboard::write_run_events;
use layernorm_scaling::{outln, Error};

/// Write TensorBoard event files from the records of trained runs.
#[derive(Parser, Debug)]
struct Args {
    /// Run directories of the train example (each holds metrics.jsonl).
    #[arg(required = true, num_args = 1..)]
    runs: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    layernorm_scaling::console::exit_code(run(&args))
}

fn run(args: &Args) -> Result<(), Error> {
    for dir in &args.runs {
        let events = write_run_events(dir)?;
        let replaced = match events.replaced.len() {
            0 => String::new(),
            n => format!(" (replacing {n} older event file{})", if n == 1 { "" } else { "s" }),
        };
        outln!("{}: {} steps -> {}{replaced}", dir.display(), events.steps, events.writer.path().display());
    }
    Ok(())
}
