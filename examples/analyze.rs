//! Diagnostics of a trained run: layer-wise variance, angular distance, identity ratio and the
//! perplexity drop of removing each layer, written as a report directory (JSON, CSV, Markdown).
//!
//! ```bash
//! cargo run --release --example analyze -- --run runs/default
//! cargo run --release --example analyze -- --run runs/shakespeare-lns --data ../shared/data/tinyshakespeare.txt
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use layernorm_scaling::analysis::{analyze, choice_report, read_choice_items};
use layernorm_scaling::data::{tokenize_corpus, CorpusSource, PackedDataset, Tokenizer};
use layernorm_scaling::parse_device;
use layernorm_scaling::train::load_run_model;

/// Analyse a run directory of the train example.
#[derive(Parser, Debug)]
struct Args {
    /// Run directory (holds model.json and model.bpk).
    #[arg(long)]
    run: PathBuf,
    /// Analyse the checkpoint of this epoch instead of the final model.
    #[arg(long)]
    epoch: Option<usize>,
    /// Evaluation text: files, folders, JSONL or JSONL.gz (default: fresh built-in documents).
    #[arg(long, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Batches per perplexity evaluation.
    #[arg(long, default_value_t = 8)]
    batches: usize,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, default_value = "auto")]
    device: String,
    /// ARC-style multiple-choice JSONL (question, choices, answer) to score, with and without each layer.
    #[arg(long)]
    choices: Option<PathBuf>,
    /// Report directory (default: <run>/analysis).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    layernorm_scaling::io::exit_code(run(Args::parse()))
}

fn run(args: Args) -> Result<(), String> {
    if args.seq_len == 0 || args.batch_size == 0 || args.batches == 0 {
        return Err("--seq-len, --batch-size and --batches must be at least 1".into());
    }
    let device = parse_device(&args.device).map_err(|e| e.to_string())?;
    let (model, info) = load_run_model(&args.run, args.epoch, &device).map_err(|e| e.to_string())?;
    if args.seq_len > info.model.max_seq_len {
        return Err(format!("--seq-len {} exceeds the model's max_seq_len {}", args.seq_len, info.model.max_seq_len));
    }
    let tokenizer = Tokenizer::from_spec(&info.tokenizer).map_err(|e| e.to_string())?;
    let source = if args.data.is_empty() {
        CorpusSource::Builtin { n_docs: 2000, seed: 0xa11a }
    } else {
        CorpusSource::Files(args.data.clone())
    };
    let cache_root = args.run.join(".token-cache");
    let cache = Arc::new(tokenize_corpus(&source, &tokenizer, &cache_root).map_err(|e| e.to_string())?);
    let docs: Vec<usize> = (0..cache.n_docs()).collect();
    let data = PackedDataset::new(cache, &docs, args.seq_len);

    let layers = model.n_layers();
    let mut progress = |done: usize, total: usize| eprint!("\rperplexity evaluations: {done}/{total}");
    let choices = match &args.choices {
        Some(path) => Some(read_choice_items(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut report = analyze(&model, &data, args.batch_size, args.batches, &mut progress).map_err(|e| e.to_string())?;
    eprintln!();
    if let Some(items) = &choices {
        let mut progress = |done: usize, total: usize| eprint!("\rmultiple-choice evaluations: {done}/{total}");
        report.multiple_choice = Some(choice_report(&model, &tokenizer, items, &mut progress).map_err(|e| e.to_string())?);
        eprintln!();
    }
    let out = args.out.unwrap_or_else(|| args.run.join("analysis"));
    let title = format!("Diagnostics of {} ({layers} layers, {})", args.run.display(), info.model.norm_scheme);
    report.write(&out, &title).map_err(|e| format!("cannot write the report to {}: {e}", out.display()))?;
    print!("{}", report.summary(&title));
    println!("\nreport written to {}", out.display());
    Ok(())
}
