//! Lists the model presets with their sizes, or writes them as JSON config files.
//!
//! ```bash
//! cargo run --example presets                      # the table
//! cargo run --example presets -- --write configs/models
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::cli::console::write_result;
use layernorm_scaling::{cli, Error, LlamaConfig};

/// The model presets with their sizes (the table is printed on standard output).
#[derive(Parser, Debug)]
#[command(name = "presets")]
struct Args {
    /// Also write each preset as `<name>.json` into this folder (made if missing).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// With `--write`, replace `<name>.json` files that differ from the preset (edited by hand).
    #[arg(long, requires = "write")]
    overwrite: bool,
}

fn main() -> ExitCode {
    let args = Args::from_arg_matches(&cli::matches(Args::command())).unwrap_or_else(|e| e.exit());
    layernorm_scaling::cli::console::exit_code(run(args.write.as_deref(), args.overwrite))
}

/// Prints the table; with `write_dir`, writes `<name>.json` there (the folder made if missing).
/// A file there that differs from its preset is replaced only with `overwrite`: it may be the
/// user's own edit.
fn run(write_dir: Option<&Path>, overwrite: bool) -> Result<(), Error> {
    if let Some(dir) = write_dir {
        refuse_edited_presets(dir, overwrite)?;
        if let Some(problem) = layernorm_scaling::io::folder_path_problem(dir) {
            return Err(Error::file(dir, format!("cannot make the folder: {problem}")));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot make the folder: {e}")))?;
    }
    write_result(format_args!(
        "{:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
        "preset", "d_model", "d_ff", "layers", "heads", "parameters"
    ))?;
    for name in LlamaConfig::preset_names() {
        let config = LlamaConfig::preset(name)?;
        write_result(format_args!(
            "{name:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
            config.d_model,
            config.d_ff,
            config.n_layers,
            config.n_heads,
            config.num_params()
        ))?;
        if let Some(dir) = write_dir {
            config.to_file(dir.join(format!("{name}.json")))?;
        }
    }
    Ok(())
}

/// Refuses when `dir` holds a `<preset>.json` whose model differs from the preset (or that is
/// not a model file), naming each such file: without `overwrite` any of them, with it only those
/// that are symbolic links (writing would replace the file the link leads to, outside `dir`).
fn refuse_edited_presets(dir: &Path, overwrite: bool) -> Result<(), Error> {
    let (mut edited, mut links) = (Vec::new(), Vec::new());
    for name in LlamaConfig::preset_names() {
        let path = dir.join(format!("{name}.json"));
        let Ok(meta) = path.symlink_metadata() else { continue };
        if meta.is_dir() {
            return Err(Error::file(&path, "is a folder where the preset's file goes: move it, or write elsewhere"));
        }
        let same = LlamaConfig::from_file(&path).is_ok_and(|config| Ok(config) == LlamaConfig::preset(name));
        match (same, meta.file_type().is_symlink()) {
            (true, _) => {}
            (false, true) => links.push(path.display().to_string()),
            (false, false) => edited.push(path.display().to_string()),
        }
    }
    if !links.is_empty() {
        return Err(Error::file(
            dir,
            format!(
                "{} are symbolic links to files that differ from the presets, which writing would replace; remove \
                 the links, or write into another folder",
                links.join(", ")
            ),
        ));
    }
    if edited.is_empty() || overwrite {
        return Ok(());
    }
    Err(Error::file(
        dir,
        format!(
            "{} differ from the presets (edited by hand?) and would be replaced; move them away, write into \
             another folder, or add --overwrite to replace them",
            edited.join(", ")
        ),
    ))
}
