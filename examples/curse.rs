//! The curse of depth at a glance: builds the same deep model under several normalisation
//! schemes and prints the variance of the hidden state after every block.
//!
//! ```bash
//! cargo run --release --example curse
//! cargo run --release --example curse -- --layers 48 --schemes pre-ln,lns,scaled-init,mix-ln
//! cargo run --release --example curse -- --plot assets/curse-of-depth.png   # also draw it (PNG)
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use burn::tensor::{Device, Distribution, Int, Tensor};
use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::analysis::variance_chart;
use layernorm_scaling::cli::console::write_result;
use layernorm_scaling::measure::token_variance;
use layernorm_scaling::{cli, errln, outln, parse_device, ConfigError, Error, LlamaConfig, NormScheme};

/// Layer-wise output variance of a randomly initialised LLaMA, per normalisation scheme.
#[derive(Parser, Debug)]
// Negative numbers are values (`--layers -1` gets clap's message about the number, not "unknown argument").
#[command(allow_negative_numbers = true)]
struct Args {
    /// Model preset whose width, feed-forward size and heads are used (tiny, 9m, 20m, ..., 7b).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Number of layers (overrides the preset's).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Comma-separated schemes: pre-ln, lns, lns:after-ffn, post-ln, deepnorm, mix-ln, scaled-init, ...
    #[arg(long, value_delimiter = ',', default_value = "pre-ln,lns")]
    schemes: Vec<String>,
    /// Device: auto, flex, ndarray, wgpu, wgpu-cpu, cuda:N, tch, ...
    #[arg(long, default_value = "auto")]
    device: String,
    /// Sequences in the batch (at most 1024: the hidden state after every block is kept).
    #[arg(long, default_value_t = 4, value_parser = cli::size(1..=1024))]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Random seed for the weights and the tokens.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also draw the variances as a PNG line chart (one curve per scheme, log scale) at this path.
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn main() -> ExitCode {
    layernorm_scaling::cli::console::reuse_freed_memory();
    let args = Args::from_arg_matches(&cli::matches(Args::command())).unwrap_or_else(|e| e.exit());
    layernorm_scaling::cli::console::exit_code(run(args))
}

fn run(args: Args) -> Result<(), Error> {
    cli::say_auto_device(&args.device);
    let device = parse_device(&args.device)?;
    let schemes = args.schemes.iter().map(|s| s.parse::<NormScheme>()).collect::<Result<Vec<_>, _>>()?;
    let base = LlamaConfig { n_layers: args.layers, ..LlamaConfig::preset(&args.preset)? };
    base.validate()?;
    if args.seq_len == 0 {
        return Err(ConfigError::Zero { field: "seq-len" }.into());
    }
    let what = format!("--seq-len {}", args.seq_len);
    let fix = format!("give --seq-len in 1..={} (or a preset with a longer context)", base.max_seq_len);
    base.check_seq_len(args.seq_len, &what, &fix)?;
    base.check_trace_fits(args.batch, args.seq_len, &device)?;
    if let Some(path) = &args.plot {
        check_plot_path(path)?;
    }
    let started = Instant::now();
    outln!(
        "{}-layer model (d_model {}, {} parameters) on {device:?}, {} x {} random tokens",
        base.n_layers,
        base.d_model,
        base.num_params(),
        args.batch,
        args.seq_len
    );

    // Progress on standard error: a deep model's init and trace take minutes each.
    let mut columns = Vec::new();
    for (i, scheme) in schemes.iter().enumerate() {
        let measured = Instant::now();
        errln!("[{}/{}] {scheme}: building the model and tracing its hidden states...", i + 1, schemes.len());
        columns.push(layer_variances(&base.clone().with_norm_scheme(scheme.clone()), &args, &device)?);
        errln!("[{}/{}] {scheme}: done in {:.1} s", i + 1, schemes.len(), measured.elapsed().as_secs_f64());
    }

    // The table is the program's result: a write that fails (a full disk) is an error.
    let mut header = format!("\n{:>5}", "layer");
    for scheme in &schemes {
        header += &format!(" {:>14}", scheme.to_string());
    }
    write_result(format_args!("{header}"))?;
    let step = (base.n_layers / 16).max(1);
    for layer in (0..=base.n_layers).filter(|l| l % step == 0 || *l == base.n_layers) {
        let mut row = format!("{layer:>5}");
        for column in &columns {
            row += &format!(" {:>14.4e}", column[layer]);
        }
        write_result(format_args!("{row}"))?;
    }
    write_result(format_args!("\ngrowth of the variance from the embedding (layer 0) to the last layer:"))?;
    for (scheme, column) in schemes.iter().zip(&columns) {
        write_result(format_args!("  {:>18}: x{:.1}", scheme.to_string(), column[base.n_layers] / column[0]))?;
    }
    if let Some(path) = &args.plot {
        let labels: Vec<String> = schemes.iter().map(ToString::to_string).collect();
        let title = format!(
            "Variance of the hidden state at initialisation ({} layers, d_model {})",
            base.n_layers, base.d_model
        );
        variance_chart(title, labels.iter().map(String::as_str).zip(columns.iter().map(Vec::as_slice)))
            .write_png(path)
            .map_err(|error| Error::file(path, error))?;
        outln!("wrote {}", path.display());
    }
    outln!("({:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

/// Variance of the hidden state entering block 1 and leaving each block.
fn layer_variances(config: &LlamaConfig, args: &Args, device: &Device) -> Result<Vec<f64>, ConfigError> {
    device.seed(args.seed);
    let model = config.init(device)?;
    let tokens: Tensor<2, Int> =
        Tensor::<2>::random([args.batch, args.seq_len], Distribution::Uniform(0.0, config.vocab_size as f64), device)
            .int();
    let trace = model.forward_trace(tokens);
    Ok(trace.hidden.iter().map(token_variance).collect())
}

/// An error unless `path` can take the PNG chart: named `.png` (a `.jpg` would hold PNG bytes),
/// and new or an earlier PNG (never a model, a corpus or notes named by mistake).
fn check_plot_path(path: &Path) -> Result<(), Error> {
    let png = path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("png"));
    if !png {
        return Err(Error::file(path, "--plot writes a PNG image: give a path ending in .png"));
    }
    layernorm_scaling::io::check_replaceable_file(path, "a chart this crate drew", layernorm_scaling::io::is_our_chart)
        .map_err(|e| Error::file(path, format!("--plot: {e}")))
}
