//! Diagnostics of trained runs: layer-wise variance, angular distance, identity ratio, the
//! perplexity (and multiple-choice accuracy) drop of removing each layer, and what training
//! recorded with `--track-every`, written as a report directory (JSON, CSV, PNG figures, Markdown).
//! Several `--run`s give one comparison report with the curves overlaid.
//!
//! ```bash
//! cargo run --release --example analyze -- --run runs/default
//! cargo run --release --example analyze -- --run runs/shakespeare-lns --data ../shared/data/tinyshakespeare.txt
//! cargo run --release --example analyze -- --run runs/pre-ln runs/lns --out runs/comparison
//! cargo run --release --example analyze -- --hf-dir path/to/model --data some.txt --out runs/model-analysis
//! cargo run --release --example analyze -- --run runs/pre-ln --hf-dir path/to/bert-large --out runs/figure-2
//! ```
//!
//! A BERT-style encoder given to `--hf-dir` is scored by masked-token pseudo-perplexity with each
//! layer removed: beside decoders, the report is the paper's figure 2 (Post-LN against Pre-LN).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use indicatif::{ProgressBar, ProgressStyle};
use layernorm_scaling::analysis::{
    AnalysisEvent, AnalysisOptions, AnalysisRequest, ChoiceFormat, ChoiceSet, ModelSource, DEFAULT_SEQ_LEN,
};
use layernorm_scaling::{cli, errln, out, outln, Error};

/// Analyse run directories of the train example.
#[derive(Parser, Debug)]
// Negative numbers are values (`--batches -1` gets clap's message about the number, not "unknown argument").
#[command(allow_negative_numbers = true)]
struct Args {
    /// Run directories (each holds model.json and model.bpk); two or more models give a comparison.
    #[arg(long, num_args = 1.., required_unless_present = "hf_dir")]
    run: Vec<PathBuf>,
    /// Hugging Face model directories (config.json, safetensors, tokenizer.json): decoders are
    /// analysed like runs, BERT-style encoders by their pseudo-perplexity with each layer removed.
    #[arg(long, num_args = 1..)]
    hf_dir: Vec<PathBuf>,
    /// Legend labels of the models, in the order the command line gives them (--run and --hf-dir
    /// together) (default: the shortest ends of their paths that differ, e.g. `pre-ln/seed-1`
    /// and `lns/seed-1`).
    #[arg(long, num_args = 1..)]
    label: Vec<String>,
    /// Analyse the checkpoint at this optimiser step instead of the final model.
    #[arg(long, conflicts_with = "epoch")]
    step: Option<usize>,
    /// Deprecated: the checkpoint at the end of this validation interval (use --step).
    #[arg(long, hide = true)]
    epoch: Option<usize>,
    /// Evaluation data, as `train --data` reads it: text, JSON lines or JSON (either gzip), Parquet
    /// (the `parquet` feature), or token files (.bin) (default: fresh built-in documents).
    #[arg(long, num_args = 1..)]
    data: Vec<PathBuf>,
    /// The tokenizer.json to use instead of the models' own (e.g. when the path a run recorded is
    /// relative to another folder).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The JSON field or Parquet column that holds each document's text.
    #[arg(long, default_value = "text")]
    text_field: String,
    /// Tokens per sequence.
    #[arg(long, default_value_t = DEFAULT_SEQ_LEN)]
    seq_len: usize,
    /// Sequences an encoder's pseudo-perplexity scores (default 8). Each scored token is a
    /// forward pass of its own: an encoder costs about sequences x seq-len x (layers + 1) passes.
    #[arg(long)]
    sequences: Option<usize>,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, default_value = "auto")]
    device: String,
    /// A multiple-choice set to score, with and without each layer, with lm-evaluation-harness's
    /// prompt and metrics: ARC-style, HellaSwag, PIQA (with its X-labels.lst) or MMLU rows, as JSON
    /// lines, JSON or Parquet, or MMLU's <subject>_test.csv (see docs/diagnostics.md).
    #[arg(long)]
    choices: Option<PathBuf>,
    /// The layout of --choices: arc, hellaswag, piqa or mmlu (default: the one its first row shows).
    #[arg(long, requires = "choices")]
    choices_format: Option<ChoiceFormat>,
    /// Report directory (default: <run>/analysis for one run; required for a comparison).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    layernorm_scaling::cli::console::reuse_freed_memory();
    let matches = cli::matches(cli::augment(Args::command(), &AnalysisOptions::default()));
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let options = cli::overridden(AnalysisOptions::default(), &matches).unwrap_or_else(|e| e.exit());
    // The models in the order the command line gives them, whichever option names each: labels
    // and the report's columns follow it.
    let position = |id: &str| matches.indices_of(id).map(Iterator::collect::<Vec<usize>>).unwrap_or_default();
    let mut order: Vec<(usize, bool, usize)> =
        position("run").into_iter().enumerate().map(|(i, at)| (at, false, i)).collect();
    order.extend(position("hf_dir").into_iter().enumerate().map(|(i, at)| (at, true, i)));
    order.sort_unstable();
    let order: Vec<(bool, usize)> = order.into_iter().map(|(_, hf, i)| (hf, i)).collect();
    layernorm_scaling::cli::console::exit_code(run(request(args, options, &order)))
}

/// What the analysis says, on stderr: its warnings and notes, each model's title, and bars
/// counting the evaluations of each stage of each model (a new bar where a stage starts).
fn on_stderr() -> impl FnMut(AnalysisEvent) {
    let mut current: Option<(String, ProgressBar)> = None;
    move |event| {
        let (stage, done, total) = match event {
            AnalysisEvent::Warning(warning) => return errln!("warning: {warning}"),
            AnalysisEvent::Note(note) => return errln!("note: {note}"),
            AnalysisEvent::Model(title) => return errln!("{title}"),
            AnalysisEvent::Progress { stage, done, total } => (stage, done, total),
            other => return errln!("{other:?}"),
        };
        let starts = current.as_ref().is_none_or(|(name, bar)| name != stage || bar.is_finished());
        if starts {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} evaluations, {elapsed} (eta {eta})")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_message(stage.to_string());
            current = Some((stage.to_string(), bar));
        }
        let Some((_, bar)) = &current else { return };
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        if done == total {
            bar.finish();
        }
    }
}

/// The command line as an analysis: the models in the order `order` gives them, each `(is
/// --hf-dir, index in its list)`.
fn request(args: Args, options: AnalysisOptions, order: &[(bool, usize)]) -> AnalysisRequest {
    let models = order
        .iter()
        .map(|&(hf, i)| match hf {
            true => ModelSource::Hf(args.hf_dir[i].clone()),
            false => ModelSource::Run(args.run[i].clone()),
        })
        .collect();
    AnalysisRequest {
        models,
        labels: args.label,
        step: args.step,
        epoch: args.epoch,
        data: args.data,
        text_field: args.text_field,
        tokenizer: args.tokenizer,
        cache_dir: None,
        seq_len: args.seq_len,
        sequences: args.sequences,
        device: args.device,
        choices: args.choices.map(|path| ChoiceSet { path, format: args.choices_format }),
        out: args.out,
        options,
    }
}

fn run(request: AnalysisRequest) -> Result<(), Error> {
    cli::say_auto_device(&request.device);
    let mut on_event = on_stderr();
    let analysis = request.prepare(&mut on_event)?;
    for note in analysis.notes() {
        outln!("{note}");
    }
    let out = analysis.out().to_path_buf();
    let summary = analysis.run(&mut on_event)?;
    out!("{summary}");
    outln!("\nreport written to {}", out.display());
    Ok(())
}
