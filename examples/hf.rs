//! Hugging Face interop from the command line: logits of a model directory, retrofitting
//! LayerNorm Scaling onto a pretrained checkpoint, and exporting a trained run.
//!
//! ```bash
//! # Logits of every position as JSON ([tokens, vocab]), e.g. to compare with transformers.
//! cargo run --release --example hf -- logits --hf-dir path/to/model --tokens 1,2,3 --json
//! # A pretrained Pre-LN model switched to LNS, written as a directory transformers loads.
//! cargo run --release --example hf -- retrofit --hf-dir path/to/model --out runs/model-lns
//! # A run of the train example as a Hugging Face directory.
//! cargo run --release --example hf -- export --checkpoint runs/default --out runs/default-hf
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use burn::tensor::{Int, Tensor, TensorData};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use layernorm_scaling::cli::console::write_result;
use layernorm_scaling::data::Tokenizer;
use layernorm_scaling::hf::{export_hf, export_hf_from, llama_checkpoint_problem, load_hf_model};
use layernorm_scaling::model::retrofit;
use layernorm_scaling::run::{check_tokenizer_identity, is_hf_dir, load_run_model, require_hf_dir, tokenizer_spec};
use layernorm_scaling::{cli, outln, parse_device, ConfigError, Error, NormScheme};

/// Hugging Face model directories: logits, retrofit, export.
#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    command: Command,
    /// Device: auto, flex, wgpu, cuda:N, ...
    #[arg(long, global = true, default_value = "auto")]
    device: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the logits of every position.
    #[command(allow_negative_numbers = true)]
    Logits {
        /// Model directory (config.json + model.safetensors or shards).
        #[arg(long)]
        hf_dir: PathBuf,
        /// Token ids, comma-separated.
        #[arg(long, value_delimiter = ',', required_unless_present = "text", conflicts_with = "text")]
        tokens: Vec<i64>,
        /// Text to encode with the directory's tokenizer.json instead of --tokens.
        #[arg(long)]
        text: Option<String>,
        /// Print `{"input_ids": [...], "logits": [[...], ...]}` (shape [tokens, vocab]).
        #[arg(long)]
        json: bool,
    },
    /// Switch a model to another normalisation scheme (default: LNS), keeping every weight.
    Retrofit {
        /// Model directory to read.
        #[arg(long)]
        hf_dir: PathBuf,
        /// New directory to write (config.json, model.safetensors, tokenizer.json).
        #[arg(long)]
        out: PathBuf,
        /// The scheme: lns, lns:after-attention, pre-ln, ...
        #[arg(long, default_value = "lns")]
        norm: NormScheme,
    },
    /// Write a run of the train example as a Hugging Face directory.
    #[command(allow_negative_numbers = true)]
    Export {
        /// Run directory (model.json + model.bpk).
        #[arg(long)]
        checkpoint: PathBuf,
        /// Export the checkpoint at this optimiser step instead of the final model.
        #[arg(long, conflicts_with = "epoch")]
        step: Option<usize>,
        /// Deprecated: the checkpoint at the end of this validation interval (use --step).
        #[arg(long, hide = true)]
        epoch: Option<usize>,
        /// New directory to write.
        #[arg(long)]
        out: PathBuf,
        /// The tokenizer.json to copy instead of the run's own (e.g. when the path the run
        /// recorded is relative to another folder).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    layernorm_scaling::cli::console::reuse_freed_memory();
    let args = Args::from_arg_matches(&cli::matches(Args::command())).unwrap_or_else(|e| e.exit());
    layernorm_scaling::cli::console::exit_code(run(args))
}

fn run(args: Args) -> Result<(), Error> {
    cli::say_auto_device(&args.device);
    let device = parse_device(&args.device)?;
    match args.command {
        Command::Logits { hf_dir, tokens, text, json } => {
            let hf_dir = hf_model_dir(&hf_dir, "`generate --run DIR` runs a run's model")?;
            let loaded = load_hf_model(&hf_dir, &device)?;
            let ids: Vec<i64> = match text {
                // As transformers' `tokenizer(text)`: with the post-processor's `<s>`.
                Some(text) => {
                    loaded.tokenizer()?.encode_with_special_tokens(&text)?.into_iter().map(i64::from).collect()
                }
                None => tokens,
            };
            let vocab = loaded.config.vocab_size as i64;
            if ids.is_empty() {
                return Err(ConfigError::Conflict("no tokens to run: give --tokens or --text".into()).into());
            }
            // Past its max_seq_len (a Mistral model's sliding window) transformers computes otherwise.
            let what = format!("{} tokens", ids.len());
            let fix = format!("give at most {} tokens", loaded.config.max_seq_len);
            loaded.config.check_seq_len(ids.len(), &what, &fix)?;
            if let Some(bad) = ids.iter().find(|&&id| id < 0 || id >= vocab) {
                let message = format!("token id {bad} is outside the vocabulary 0..{vocab}");
                return Err(ConfigError::Conflict(message).into());
            }
            let n = ids.len();
            let input = Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [1, n]), &device);
            let logits: Vec<f32> = loaded
                .model
                .forward(input)
                .into_data()
                .convert::<f32>()
                .try_into_vec()
                .expect("logits converted to f32");
            let rows: Vec<&[f32]> = logits.chunks(vocab as usize).collect();
            if json {
                write_result(format_args!("{}", serde_json::json!({"input_ids": ids, "logits": rows})))?;
            } else {
                for (position, (id, row)) in ids.iter().zip(&rows).enumerate() {
                    let mut order: Vec<usize> = (0..row.len()).collect();
                    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                    let top: Vec<String> = order.iter().take(5).map(|&t| format!("{t}:{:.3}", row[t])).collect();
                    write_result(format_args!("position {position} (token {id}): top logits {}", top.join(" ")))?;
                }
            }
            Ok(())
        }
        Command::Retrofit { hf_dir, out, norm } => {
            let source = hf_model_dir(
                &hf_dir,
                &format!("a run retrofits with `train --init-from {} --norm SCHEME --out NEW_DIR`", hf_dir.display()),
            )?;
            // Its own input as output: that is replaced only when a retrofit wrote it (`.contents`).
            if layernorm_scaling::io::same_folder(&source, &out)
                && !out.join(layernorm_scaling::io::CONTENTS_FILE).is_file()
            {
                return Err(ConfigError::Conflict(format!(
                    "--out {} is the model directory being read (--hf-dir): choose a new output directory",
                    out.display()
                ))
                .into());
            }
            let loaded = load_hf_model(&source, &device)?;
            let from = loaded.config.norm_scheme.clone();
            let (model, config) = retrofit(loaded.model, &loaded.config, norm)?;
            // The output is a Hugging Face directory: a scheme it cannot hold is refused with the
            // command that does retrofit onto it (into a run directory).
            if let Some(problem) = llama_checkpoint_problem(&config)? {
                let tokenizer = tokenizer_option(&source.join("tokenizer.json"), config.vocab_size);
                return Err(ConfigError::Conflict(format!(
                    "`hf retrofit` writes a Hugging Face LLaMA directory, and {problem}. To train a `{}` model from \
                     these weights, retrofit them into a run directory: `cargo run --release --example train -- \
                     --init-from {}{tokenizer} --norm {} --out NEW_DIR`",
                    config.norm_scheme,
                    hf_dir.display(),
                    config.norm_scheme
                ))
                .into());
            }
            export_hf_from(&model, &config, &out, loaded.tokenizer.as_deref(), Some(&source))?;
            outln!(
                "{}: {} layers retrofitted from {from} to {}; written to {}",
                hf_dir.display(),
                config.n_layers,
                config.norm_scheme,
                out.display()
            );
            let tokenizer = tokenizer_option(&out.join("tokenizer.json"), config.vocab_size);
            outln!(
                "continue training with: cargo run --release --example train -- --init-from {}{tokenizer}",
                out.display()
            );
            Ok(())
        }
        Command::Export { checkpoint, step, epoch, out, tokenizer } => {
            let step = cli::checkpoint_step(&checkpoint, step, epoch)?;
            let (model, info) = load_run_model(&checkpoint, step, &device)?;
            // A tokenizer that cannot be found is an error, not an export without it.
            let spec = tokenizer_spec(Some(&info.tokenizer), tokenizer.as_deref())?;
            if info.tokenizer == "byte" && spec != "byte" {
                return Err(ConfigError::Conflict(format!(
                    "the run was trained on bytes (the byte tokenizer): exported with {spec} its weights would be \
                     read with other ids; leave --tokenizer unset"
                ))
                .into());
            }
            let loaded_tokenizer = Tokenizer::from_spec(&spec)?;
            loaded_tokenizer.check_fits(info.model.vocab_size)?;
            check_tokenizer_identity(&loaded_tokenizer, &spec, info.tokenizer_identity.as_deref())?;
            let tokenizer = (spec != "byte").then(|| PathBuf::from(spec));
            export_hf(&model, &info.model, &out, tokenizer.as_deref())?;
            outln!("{} ({}) exported to {}", checkpoint.display(), info.model.norm_scheme, out.display());
            if tokenizer.is_none() {
                outln!("note: the run uses the byte tokenizer (ids = UTF-8 bytes); no tokenizer.json was written");
            }
            // transformers' `tokenizer(text)` adds what the post-processor adds; the run never saw it.
            if loaded_tokenizer.encode_with_special_tokens("a")? != loaded_tokenizer.encode("a")? {
                outln!(
                    "note: this tokenizer adds special tokens (such as <s>) to a text, which the run never saw in \
                     training (its documents were encoded without them): prompt the export with \
                     tokenizer(text, add_special_tokens=False)"
                );
            }
            Ok(())
        }
    }
}

/// The `--tokenizer` option a training from a model directory of `vocab_size` needs: its
/// `tokenizer.json`; none when it has none and the byte tokenizer (train's default) fits (an
/// exported byte-level run); else a placeholder the user must fill in.
fn tokenizer_option(tokenizer: &std::path::Path, vocab_size: usize) -> String {
    if tokenizer.is_file() {
        format!(" --tokenizer {}", tokenizer.display())
    } else if Tokenizer::Byte.base_vocab_size() <= vocab_size {
        String::new()
    } else {
        " --tokenizer PATH/TO/ITS/tokenizer.json (the model directory has none)".to_string()
    }
}

/// `dir` as a Hugging Face model directory (a cache name resolved), or an error naming what it
/// is instead: a run directory of the train example gets `for_a_run`, the command that reads it.
fn hf_model_dir(dir: &std::path::Path, for_a_run: &str) -> Result<PathBuf, Error> {
    if dir.join("model.json").is_file() && !is_hf_dir(dir) {
        return Err(Error::file(
            dir,
            format!("--hf-dir: a run directory of the train example, not a Hugging Face model directory; {for_a_run}"),
        ));
    }
    require_hf_dir(dir)
}
