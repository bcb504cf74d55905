//! Writes TensorBoard event files for runs trained before the train example wrote them (or with
//! `--tensorboard false`), from their `metrics.jsonl` and `tracking.jsonl`, into each run's
//! `tensorboard/` (replacing what is there). Then `tensorboard --logdir runs` shows them all.
//!
//! ```bash
//! cargo run --release --example tensorboard -- runs/default runs/sweep/*/seed-*
//! ```

use std::path::{Path, PathBuf};
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
    // Every run is tried; the exit code says whether all of them were written.
    let mut failed = false;
    for dir in &args.runs {
        if let Err(e) = convert(dir) {
            layernorm_scaling::errln!("error: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn convert(dir: &Path) -> Result<(), Error> {
    let events = write_run_events(dir)?;
    let steps = match events.steps {
        Some((first, last)) => format!("steps {first} to {last}"),
        None => "no steps".into(),
    };
    let replaced = match events.replaced.len() {
        0 => String::new(),
        n => format!(" (replacing {n} older event file{})", if n == 1 { "" } else { "s" }),
    };
    outln!("{}: {steps} -> {}{replaced}", dir.display(), events.writer.path().display());
    Ok(())
}
