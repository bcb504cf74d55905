//! Reading documents from text files, folders, and JSONL / JSONL.gz shards (C4's layout).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use crate::data::DataError;

/// The files a list of paths stands for: files as given, folders expanded (recursively, sorted)
/// to their `.txt`, `.md`, `.jsonl` and `.jsonl.gz` files.
pub fn corpus_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let before = files.len();
            collect_dir(path, &mut files)?;
            if files.len() == before {
                return Err(DataError::Corpus(format!(
                    "{}: the folder has no .txt, .md, .jsonl or .jsonl.gz file",
                    path.display()
                )));
            }
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            return Err(DataError::Corpus(format!("{}: no such file or folder", path.display())));
        }
    }
    Ok(files)
}

fn collect_dir(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), DataError> {
    let io = |e: std::io::Error| DataError::Corpus(format!("{}: {e}", dir.display()));
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>().map_err(io)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_dir(&path, files)?;
        } else if is_corpus_file(&path) {
            files.push(path);
        }
    }
    Ok(())
}

fn is_corpus_file(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    [".txt", ".md", ".jsonl", ".jsonl.gz"].iter().any(|ext| name.ends_with(ext))
}

fn is_jsonl(path: &Path) -> bool {
    let name = path.to_string_lossy().to_lowercase();
    name.ends_with(".jsonl") || name.ends_with(".jsonl.gz")
}

/// Calls `each` with every document of `file`, in order.
///
/// - JSONL (optionally gzip-compressed): one document per line, the `text` field of its object.
/// - Text: documents are separated by blank lines (paragraphs); each keeps its inner newlines.
pub fn read_documents(file: &Path, each: &mut dyn FnMut(&str) -> Result<(), DataError>) -> Result<(), DataError> {
    let shown = file.display().to_string();
    let io = |e: std::io::Error| DataError::Corpus(format!("{shown}: {e}"));
    let raw: Box<dyn Read> = Box::new(File::open(file).map_err(io)?);
    let reader: Box<dyn Read> = if shown.to_lowercase().ends_with(".gz") { Box::new(GzDecoder::new(raw)) } else { raw };
    let reader = BufReader::new(reader);
    if is_jsonl(file) {
        for (number, line) in reader.lines().enumerate() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| DataError::Corpus(format!("{shown}:{}: not a JSON object: {e}", number + 1)))?;
            let text = value.get("text").and_then(|t| t.as_str()).ok_or_else(|| {
                DataError::Corpus(format!("{shown}:{}: the object has no string field `text`", number + 1))
            })?;
            each(text)?;
        }
    } else {
        let mut paragraph = String::new();
        for line in reader.lines() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                if !paragraph.is_empty() {
                    each(&paragraph)?;
                    paragraph.clear();
                }
            } else {
                if !paragraph.is_empty() {
                    paragraph.push('\n');
                }
                paragraph.push_str(&line);
            }
        }
        if !paragraph.is_empty() {
            each(&paragraph)?;
        }
    }
    Ok(())
}
