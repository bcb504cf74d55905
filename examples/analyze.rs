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
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use layernorm_scaling::analysis::{
    analyze, choice_report, read_choice_items, unique_labels, write_comparison, AnalysisOptions, ChoiceItem,
    ComparedRun, Report,
};
use layernorm_scaling::data::{tokenize_corpus, CorpusSource, PackedDataset, Tokenizer};
use layernorm_scaling::io::check_replaceable_dir;
use layernorm_scaling::model::{first_non_finite_parameter, Llama};
use layernorm_scaling::parse_device;
use layernorm_scaling::train::{is_hf_dir, load_model_dir, read_tracking, TrackRecord, TRACKING_FILE};

/// Analyse run directories of the train example.
#[derive(Parser, Debug)]
struct Args {
    /// Run directories (each holds model.json and model.bpk); two or more models give a comparison.
    #[arg(long, num_args = 1.., required_unless_present = "hf_dir")]
    run: Vec<PathBuf>,
    /// Hugging Face model directories (config.json, safetensors, tokenizer.json), analysed like runs.
    #[arg(long, num_args = 1..)]
    hf_dir: Vec<PathBuf>,
    /// Legend labels of the runs (default: the run directories' names).
    #[arg(long, num_args = 1..)]
    label: Vec<String>,
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
    /// Layers to remove one at a time for the pruning drop, e.g. 1,4,8 (default: every layer).
    #[arg(long, value_delimiter = ',')]
    layers: Vec<usize>,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, default_value = "auto")]
    device: String,
    /// ARC-style multiple-choice JSONL (question, choices, answer) to score, with and without each layer.
    #[arg(long)]
    choices: Option<PathBuf>,
    /// Report directory (default: <run>/analysis for one run; required for a comparison).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    layernorm_scaling::io::exit_code(run(Args::parse()))
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
    title: String,
    /// What training recorded with `--track-every` (`tracking.jsonl`), if anything.
    tracking: Option<Vec<TrackRecord>>,
}

/// Loads a run directory or a Hugging Face model directory.
fn load(dir: &Path, hf: bool, args: &Args) -> Result<LoadedRun, String> {
    if hf && !is_hf_dir(dir) {
        return Err(format!("--hf-dir {}: no config.json there; is it a Hugging Face model directory?", dir.display()));
    }
    let device = parse_device(&args.device).map_err(|e| e.to_string())?;
    let cannot = |e: layernorm_scaling::ConfigError| format!("cannot load {}: {e}", dir.display());
    let loaded = load_model_dir(dir, args.epoch, &device).map_err(cannot)?;
    // A report of a diverged model would be NaNs throughout: refuse it instead.
    if let Some(param) = first_non_finite_parameter(&loaded.model) {
        return Err(format!(
            "cannot analyse {}: the weight `{param}` holds NaN or infinite values, so the run diverged; \
             analyse an earlier checkpoint (--epoch N) or train again (e.g. with a lower learning rate)",
            dir.display()
        ));
    }
    let tokenizer = loaded.tokenizer().map_err(cannot)?;
    let config = &loaded.config;
    if args.seq_len > config.max_seq_len {
        return Err(format!(
            "--seq-len {} exceeds the max_seq_len {} of {}",
            args.seq_len,
            config.max_seq_len,
            dir.display()
        ));
    }
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(format!(
            "the tokenizer of {} has {} tokens but the model's vocabulary only {}",
            dir.display(),
            tokenizer.vocab_size(),
            config.vocab_size
        ));
    }
    loaded.model.check_layers(&args.layers).map_err(|e| format!("--layers: {e} ({})", dir.display()))?;
    let tracking = if dir.join(TRACKING_FILE).is_file() { Some(read_tracking(dir)?) } else { None };
    let tracking = tracking.filter(|records| !records.is_empty());
    let title = format!("Diagnostics of {} ({} layers, {})", dir.display(), config.n_layers, config.norm_scheme);
    Ok(LoadedRun { dir: dir.to_path_buf(), model: loaded.model, tokenizer, title, tracking })
}

fn report_of(run: &LoadedRun, args: &Args, choices: Option<&[ChoiceItem]>) -> Result<Report, String> {
    let source = if args.data.is_empty() {
        CorpusSource::Builtin { n_docs: 2000, seed: 0xa11a }
    } else {
        CorpusSource::Files(args.data.clone())
    };
    let cache_root = std::env::temp_dir().join("layernorm-scaling-token-cache");
    let cache = Arc::new(tokenize_corpus(&source, &run.tokenizer, &cache_root).map_err(|e| e.to_string())?);
    let docs: Vec<usize> = (0..cache.n_docs()).collect();
    let data = PackedDataset::new(cache, &docs, args.seq_len);
    let options = AnalysisOptions { batch_size: args.batch_size, batches: args.batches, layers: args.layers.clone() };
    eprintln!("{}", run.title);
    let mut report =
        analyze(&run.model, &data, &options, &mut progress_bar("perplexity")).map_err(|e| e.to_string())?;
    if let Some(items) = choices {
        let mut bar = progress_bar("multiple choice");
        report.multiple_choice =
            Some(choice_report(&run.model, &run.tokenizer, items, &args.layers, &mut bar).map_err(|e| e.to_string())?);
    }
    report.tracking = run.tracking.clone();
    Ok(report)
}

fn run(args: Args) -> Result<(), String> {
    if args.seq_len == 0 || args.batch_size == 0 || args.batches == 0 {
        return Err("--seq-len, --batch-size and --batches must be at least 1".into());
    }
    let sources: Vec<(&PathBuf, bool)> =
        args.run.iter().map(|dir| (dir, false)).chain(args.hf_dir.iter().map(|dir| (dir, true))).collect();
    if !args.label.is_empty() && args.label.len() != sources.len() {
        return Err(format!(
            "{} --label values for {} models; give one per --run/--hf-dir or none",
            args.label.len(),
            sources.len()
        ));
    }
    let out = match (&args.out, sources.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [(dir, _)]) if !is_hf_dir(dir) => dir.join("analysis"),
        (None, [_]) => {
            return Err(
                "analysing a Hugging Face directory needs --out DIR (the model directory is left untouched)".into()
            )
        }
        (None, _) => return Err("comparing several models needs --out DIR for the comparison report".into()),
    };
    let marker = if sources.len() == 1 { "report.json" } else { "comparison.json" };
    check_replaceable_dir(&out, marker).map_err(|e| format!("--out: {e}"))?;
    // An existing `--out` is replaced whole: it must not hold a model being analysed, and it is
    // named by its absolute path (`--out .` would otherwise name the replaced directory).
    let out = if out.exists() { out.canonicalize().map_err(|e| format!("--out {}: {e}", out.display()))? } else { out };
    for (dir, _) in &sources {
        if dir.canonicalize().is_ok_and(|dir| dir.starts_with(&out)) {
            return Err(format!(
                "--out {} holds the model {}, which writing the report would replace",
                out.display(),
                dir.display()
            ));
        }
    }
    // Everything that can be wrong with the input is found before the first evaluation.
    let runs = sources.iter().map(|(dir, hf)| load(dir, *hf, &args)).collect::<Result<Vec<_>, _>>()?;
    let choices = match &args.choices {
        Some(path) => Some(read_choice_items(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let reports = runs.iter().map(|run| report_of(run, &args, choices.as_deref())).collect::<Result<Vec<_>, _>>()?;

    if runs.len() == 1 {
        let (run, report) = (&runs[0], &reports[0]);
        report.write(&out, &run.title).map_err(|e| format!("cannot write the report to {}: {e}", out.display()))?;
        print!("{}", report.summary(&run.title));
    } else {
        let names: Vec<String> = if args.label.is_empty() {
            runs.iter()
                .map(|r| r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
                .collect()
        } else {
            args.label.clone()
        };
        let compared: Vec<ComparedRun> = unique_labels(&names)
            .into_iter()
            .zip(runs.iter().zip(reports))
            .map(|(label, (run, report))| ComparedRun { label, title: run.title.clone(), report })
            .collect();
        write_comparison(&compared, &out)
            .map_err(|e| format!("cannot write the comparison to {}: {e}", out.display()))?;
        print!("{}", std::fs::read_to_string(out.join("comparison.md")).unwrap_or_default());
    }
    println!("\nreport written to {}", out.display());
    Ok(())
}
