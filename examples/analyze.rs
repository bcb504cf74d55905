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

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser};
use indicatif::{ProgressBar, ProgressStyle};
use layernorm_scaling::analysis::{
    analyze, choice_report, longest_choice_tokens, read_choice_file, report_dir, report_labels, write_comparison,
    write_removal_comparison, AnalysisOptions, ChoiceFormat, ChoiceItem, ComparedEncoder, ComparedRun, EncoderReport,
    Report, ReportModel,
};
use layernorm_scaling::data::{tokenize_corpus, CorpusSource, DataError, SequenceDataset, TokenCache, Tokenizer};
use layernorm_scaling::hf::{
    bert_layer_removal, encoder_sequences, is_bert_dir, load_bert_model, BertConfig, BertForMaskedLm, BertTokens,
};
use layernorm_scaling::model::{first_non_finite_parameter, Llama};
use layernorm_scaling::run::{
    load_model_dir, read_tracking_skipping_damage, require_hf_dir, RunIdentity, TrackRecord, TRACKING,
};
use layernorm_scaling::{cli, errln, out, outln, parse_device, ConfigError, Error, LlamaConfig};

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
    #[arg(long, default_value_t = 128)]
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
    layernorm_scaling::console::reuse_freed_memory();
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
    layernorm_scaling::console::exit_code(run(&args, &options, &order))
}

/// A problem with the command line, told as a conflict between the options.
fn usage(message: String) -> Error {
    ConfigError::Conflict(message).into()
}

/// A bar on stderr counting evaluations.
fn progress_bar(what: &'static str) -> impl FnMut(usize, usize) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} evaluations, {elapsed} (eta {eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what);
    move |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        if done == total {
            bar.finish();
        }
    }
}

/// A loaded run, checked before any evaluation starts.
struct LoadedRun {
    dir: PathBuf,
    model: Llama,
    tokenizer: Tokenizer,
    /// The model's config.
    config: LlamaConfig,
    title: String,
    /// What training recorded with `--track-every` (`tracking.jsonl`), if anything.
    tracking: Option<Vec<TrackRecord>>,
}

/// Loads a run directory or a Hugging Face model directory.
fn load(dir: &Path, hf: bool, args: &Args, options: &AnalysisOptions) -> Result<LoadedRun, Error> {
    if hf {
        require_hf_dir(dir)?;
    }
    let device = parse_device(&args.device)?;
    let loaded = load_model_dir(dir, cli::checkpoint_step(dir, args.step, args.epoch)?, &device)?;
    // A diverged or damaged model is refused by `load_model_dir`, before any evaluation.
    let tokenizer = loaded.tokenizer(args.tokenizer.as_deref())?;
    let config = &loaded.config;
    config
        .check_seq_len(args.seq_len, &format!("--seq-len {}", args.seq_len))
        .map_err(|e| usage(format!("{e} ({}); lower --seq-len", dir.display())))?;
    loaded.model.check_layers(&options.layers).map_err(|e| usage(format!("--layers: {e} ({})", dir.display())))?;
    // A damaged line (a write cut short by a full disk) costs its record, not the run's report.
    let tracking = match dir.join(TRACKING).is_file() {
        true => {
            let (records, damaged) = read_tracking_skipping_damage(dir)?;
            if let Some((line, what)) = damaged.first() {
                errln!(
                    "warning: {}: {} damaged line(s) left out (line {line}: {what}); the tracked curves show the \
                     other {} records",
                    dir.join(TRACKING).display(),
                    damaged.len(),
                    records.len()
                );
            }
            Some(records)
        }
        false => None,
    };
    let tracking = tracking.filter(|records| !records.is_empty());
    let title = format!("Diagnostics of {} ({} layers, {})", dir.display(), config.n_layers, config.norm_scheme);
    Ok(LoadedRun { dir: dir.to_path_buf(), model: loaded.model, config: loaded.config, tokenizer, title, tracking })
}

/// The evaluation text (`--data`, or fresh built-in documents) tokenised by `tokenizer` and
/// checked against a model vocabulary of `vocab_size`.
fn evaluation_tokens(args: &Args, tokenizer: &Tokenizer, vocab_size: usize) -> Result<Arc<TokenCache>, Error> {
    let source = if args.data.is_empty() {
        CorpusSource::Builtin { n_docs: 2000, seed: 0xa11a }
    } else {
        CorpusSource::Files { paths: args.data.clone(), text_field: args.text_field.clone() }
    };
    let cache_root = std::env::temp_dir().join("layernorm-scaling-token-cache");
    let cache = Arc::new(tokenize_corpus(&source, tokenizer, &cache_root)?);
    for warning in cache.warnings() {
        errln!("warning: {warning}");
    }
    cache.check_vocabulary(tokenizer, vocab_size)?;
    Ok(cache)
}

fn report_of(
    run: &LoadedRun,
    args: &Args,
    options: &AnalysisOptions,
    choices: Option<&[ChoiceItem]>,
) -> Result<Report, Error> {
    let cache = evaluation_tokens(args, &run.tokenizer, run.config.vocab_size)?;
    let docs: Vec<usize> = (0..cache.n_docs()).collect();
    let data = SequenceDataset::new(cache, &docs, args.seq_len);
    errln!("{}", run.title);
    let mut report = analyze(&run.model, &data, options, &mut progress_bar("perplexity"))?;
    if let Some(items) = choices {
        let mut bar = progress_bar("multiple choice");
        report.multiple_choice = Some(choice_report(&run.model, &run.tokenizer, items, &options.layers, &mut bar)?);
    }
    report.tracking = run.tracking.clone();
    Ok(report)
}

/// The sequences an encoder scores when `--sequences` is not given.
const DEFAULT_ENCODER_SEQUENCES: usize = 8;

/// A loaded BERT-style encoder, checked before any evaluation starts.
struct LoadedEncoder {
    dir: PathBuf,
    model: BertForMaskedLm,
    config: BertConfig,
    tokenizer: Tokenizer,
    tokens: BertTokens,
    title: String,
}

/// Loads the BERT-style encoder of the Hugging Face directory `dir` and checks the options against it.
fn load_encoder(dir: &Path, args: &Args, options: &AnalysisOptions) -> Result<LoadedEncoder, Error> {
    if args.step.is_some() || args.epoch.is_some() {
        return Err(usage(format!(
            "--step picks a checkpoint of a run; {} is a Hugging Face encoder, which has only its weights",
            dir.display()
        )));
    }
    let device = parse_device(&args.device)?;
    let (model, config) = load_bert_model(dir, &device).map_err(|e| Error::file(dir, e))?;
    if let Some(parameter) = first_non_finite_parameter(&model) {
        let advice = format!("the weights of {} are damaged; download the model again", dir.display());
        return Err(Error::NonFinite { parameter, advice });
    }
    let tokenizer_path = args.tokenizer.clone().unwrap_or_else(|| dir.join("tokenizer.json"));
    if !tokenizer_path.is_file() {
        return Err(Error::file(
            &tokenizer_path,
            format!("no such file: the encoder {} needs its tokenizer.json; give it with --tokenizer", dir.display()),
        ));
    }
    let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
    let tokens = BertTokens::of(&tokenizer).map_err(|e| Error::file(&tokenizer_path, e))?;
    if args.seq_len < 3 || args.seq_len > model.max_positions() {
        return Err(usage(format!(
            "--seq-len {}: the encoder {} takes sequences of 3 to {} tokens ([CLS] and [SEP] included)",
            args.seq_len,
            dir.display(),
            model.max_positions()
        )));
    }
    model.check_layers(&options.layers).map_err(|e| usage(format!("--layers: {e} ({})", dir.display())))?;
    let title = format!("Layer removal of {} (Post-LN encoder, {} layers)", dir.display(), config.num_hidden_layers);
    Ok(LoadedEncoder { dir: dir.to_path_buf(), model, config, tokenizer, tokens, title })
}

/// The pseudo-perplexity of `encoder` on the evaluation text with each layer removed.
fn encoder_report(encoder: &LoadedEncoder, args: &Args, options: &AnalysisOptions) -> Result<EncoderReport, Error> {
    let cache = evaluation_tokens(args, &encoder.tokenizer, encoder.config.vocab_size)?;
    let wanted = args.sequences.unwrap_or(DEFAULT_ENCODER_SEQUENCES);
    let sequences = encoder_sequences(&cache, encoder.tokens, args.seq_len, wanted)?;
    if sequences.len() < wanted {
        errln!(
            "warning: the evaluation text holds {} sequences of {} tokens, fewer than {wanted}",
            sequences.len(),
            args.seq_len
        );
    }
    errln!("{}", encoder.title);
    let mut bar = progress_bar("pseudo-perplexity");
    let removal = bert_layer_removal(&encoder.model, &sequences, encoder.tokens.mask, &options.layers, &mut bar)?;
    Ok(EncoderReport::new(&encoder.dir, encoder.config.clone(), args.seq_len, removal))
}

/// `order`: the models as the command line gives them, each `(is --hf-dir, index in its list)`.
fn run(args: &Args, options: &AnalysisOptions, order: &[(bool, usize)]) -> Result<(), Error> {
    if args.seq_len == 0 || args.sequences == Some(0) {
        return Err(usage("--seq-len and --sequences must be at least 1".into()));
    }
    options.validate().map_err(|e| match e {
        ConfigError::Zero { field } => usage(format!("--{} must be at least 1", field.replace('_', "-"))),
        ConfigError::LayerTwice { .. } => usage(format!("--layers: {e}")),
        other => other.into(),
    })?;
    // `--hf-dir org/name` names a model of the local Hugging Face cache: its folder from here on.
    let hf_dirs: Vec<PathBuf> = args.hf_dir.iter().map(|dir| require_hf_dir(dir)).collect::<Result<_, _>>()?;
    // Every model in the order given, with its kind and the path as given.
    let models: Vec<(&PathBuf, Kind)> = order
        .iter()
        .map(|&(hf, i)| match hf {
            true => (&hf_dirs[i], if is_bert_dir(&hf_dirs[i]) { Kind::Encoder } else { Kind::HfDecoder }),
            false => (&args.run[i], Kind::Run),
        })
        .collect();
    let given: Vec<&PathBuf> = order.iter().map(|&(hf, i)| if hf { &args.hf_dir[i] } else { &args.run[i] }).collect();
    let has_encoder = models.iter().any(|(_, kind)| *kind == Kind::Encoder);
    let has_decoder = models.iter().any(|(_, kind)| *kind != Kind::Encoder);
    if args.choices.is_some() && !has_decoder {
        return Err(usage(
            "--choices scores decoders (a continuation's likelihood); the models given are all BERT-style encoders"
                .into(),
        ));
    }
    let described: Vec<ReportModel> = models
        .iter()
        .zip(&given)
        .map(|((dir, kind), given)| ReportModel { dir, given, is_run: *kind == Kind::Run })
        .collect();
    let labels = report_labels(&args.label, &described)?;
    let out = report_dir(args.out.as_deref(), &described)?;
    // What each run directory holds now: a training that replaces it meanwhile is caught before
    // the report is written (it was written beside the new run, describing the old model).
    let identities: Vec<RunIdentity> = models.iter().map(|(dir, _)| RunIdentity::of(dir)).collect();
    // Everything that can be wrong with the input is found before the first evaluation.
    let mut runs = Vec::new();
    let mut encoders = Vec::new();
    for ((dir, kind), label) in models.iter().zip(labels) {
        match kind {
            Kind::Encoder => encoders.push((label, load_encoder(dir, args, options)?)),
            _ => runs.push((label, load(dir, *kind == Kind::HfDecoder, args, options)?)),
        }
    }
    // Perplexity is per token of each model's own tokenizer: across tokenizers it compares nothing.
    let tokenizers: Vec<String> = runs.iter().map(|(_, run)| run.tokenizer.identity()).collect();
    if tokenizers.iter().any(|identity| *identity != tokenizers[0]) {
        let named: Vec<String> =
            runs.iter().map(|(label, run)| format!("{label}: {}", run.tokenizer.describe())).collect();
        errln!(
            "warning: the models use different tokenizers ({}): their perplexities and losses are per token of \
             different tokens, so they cannot be compared with each other; their depth diagnostics can",
            named.join("; ")
        );
    }
    // After loading, so that a damaged config.json is named as such, not taken for a decoder's.
    if args.sequences.is_some() && !has_encoder {
        return Err(usage("--sequences counts an encoder's sequences; no --hf-dir is a BERT-style encoder".into()));
    }
    let choices = match &args.choices {
        Some(path) => {
            // Named as the multiple-choice set, not as a corpus.
            let (format, items) = read_choice_file(path, args.choices_format).map_err(|e| match e {
                DataError::Corpus(message) => usage(format!("--choices: {message}")),
                other => other.into(),
            })?;
            if !format.has_acc_norm() {
                outln!("--choices: {format}'s choices are one letter each, so acc_norm equals acc: read acc");
            }
            Some(items)
        }
        None => None,
    };
    // Each question and choice runs whole through each model: it must fit in the model's context.
    for (run, items) in runs.iter().filter_map(|(_, run)| Some((run, choices.as_deref()?))) {
        let longest = longest_choice_tokens(&run.tokenizer, items)?;
        run.config
            .check_seq_len(longest, "--choices (its longest question with a choice)")
            .map_err(|e| usage(format!("{e} ({}); shorten the questions", run.dir.display())))?;
    }
    let mut compared = Vec::new();
    for (label, run) in &runs {
        let report = report_of(run, args, options, choices.as_deref())?;
        compared.push(ComparedRun { label: label.clone(), title: run.title.clone(), report });
    }
    let mut compared_encoders = Vec::new();
    for (label, encoder) in &encoders {
        let report = encoder_report(encoder, args, options)?;
        compared_encoders.push(ComparedEncoder { label: label.clone(), title: encoder.title.clone(), report });
    }

    if let Some(((dir, _), _)) =
        models.iter().zip(&identities).find(|((dir, _), before)| RunIdentity::of(dir) != **before)
    {
        return Err(Error::file(
            dir,
            "changed while it was analysed (a training replaced or rewrote the run): nothing was written; run \
             analyze again once that training is done",
        ));
    }
    let written = |e: std::io::Error| Error::file(&out, format!("cannot write the report: {e}"));
    match (compared.as_slice(), compared_encoders.as_slice()) {
        ([run], []) => {
            run.report.write(&out, &run.title).map_err(written)?;
            out!("{}", run.report.summary(&run.title));
        }
        ([], [encoder]) => {
            encoder.report.write(&out, &encoder.title).map_err(written)?;
            out!("{}", encoder.report.summary(&encoder.title));
        }
        (_, []) => {
            write_comparison(&compared, &out).map_err(written)?;
            out!("{}", std::fs::read_to_string(out.join("comparison.md")).unwrap_or_default());
        }
        _ => {
            write_removal_comparison(&compared, &compared_encoders, &out).map_err(written)?;
            out!("{}", std::fs::read_to_string(out.join("comparison.md")).unwrap_or_default());
        }
    }
    outln!("\nreport written to {}", out.display());
    Ok(())
}

/// What a model directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A run directory of the train example.
    Run,
    /// A Hugging Face decoder (LLaMA, Mistral, Qwen2).
    HfDecoder,
    /// A Hugging Face BERT-style encoder.
    Encoder,
}
