//! Reading documents from corpus files and folders: text, JSON lines and JSON arrays (each
//! optionally gzip-compressed; C4's `.json.gz` shards) and Parquet, told apart by their content.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::data::byte_readers::{Counted, GzipMembers, TrailingBytes, GZIP_MAGIC};
use crate::data::json_lines::{for_each_line, object_keys, read_json_array, read_json_lines, show_names};
#[cfg(feature = "parquet")]
use crate::data::parquet::read_parquet;
use crate::data::token_file::is_token_file;
use crate::data::{CorpusProblem, DataError, NotParquet};

/// The names a folder's corpus files end with (lowercase).
const CORPUS_ENDINGS: [&str; 8] = [".txt", ".md", ".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet", ".bin"];

/// The first (and last) bytes of a Parquet file.
const PARQUET_MAGIC: &[u8] = b"PAR1";

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a corpus file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Plain text: documents are separated by blank lines.
    Text,
    /// JSON lines: one object per line, one document each.
    JsonLines,
    /// One JSON array of objects, one document each (a file that starts with `[`, unless it is named
    /// `.jsonl`, `.txt` or `.md`).
    JsonArray,
    /// Apache Parquet: one document per row, its string column `text` (`--text-field`). Read
    /// with the `parquet` feature; without it, reading one is an error saying so.
    Parquet,
    /// Token ids, already tokenised (nanoGPT's or llm.c's `.bin`).
    Tokens,
}

/// The files of a `--data` list ([`corpus_files`]), each once, and what was left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CorpusFiles {
    /// The files, in order, each read once (by its canonical path).
    pub files: Vec<PathBuf>,
    /// Files and folders skipped because they were reached before (given twice, or through a
    /// symbolic link, such as a link back to a parent folder or to a sibling): one line each.
    pub skipped: Vec<String>,
}

/// The files a list of paths stands for: files as given, folders expanded (recursively, sorted)
/// to their `.txt`, `.md`, `.jsonl`, `.jsonl.gz`, `.json`, `.json.gz`, `.parquet` and `.bin` files. Hidden
/// files and folders (`.cache`, where `huggingface-cli` keeps its metadata) are skipped. Each file
/// and folder is read once, by its canonical path: one reached again (given twice, or through a
/// symbolic link) is listed in [`CorpusFiles::skipped`]. A pipe or a device is refused (the corpus
/// is read more than once), saying what it is.
pub fn corpus_files(paths: &[PathBuf]) -> Result<CorpusFiles, DataError> {
    let mut walk = Walk::default();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| DataError::unreadable(path, &e))?;
        if !meta.is_dir() {
            walk.file(path, &meta)?;
            continue;
        }
        let found = walk.found;
        if walk.dir(path)? && walk.found == found {
            let endings = CORPUS_ENDINGS.join(", ");
            return Err(DataError::corpus(path, CorpusProblem::EmptyFolder { endings }));
        }
    }
    Ok(walk.listing)
}

/// A walk over files and folders that visits each (by its canonical path) once.
#[derive(Default)]
struct Walk {
    listing: CorpusFiles,
    /// The path each file or folder ([`file_identity`]) was first reached by.
    seen: HashMap<String, PathBuf>,
    /// Corpus files met, those reached twice included.
    found: usize,
}

impl Walk {
    /// Whether `path` is reached for the first time; a second time is recorded as skipped.
    fn first_visit(&mut self, path: &Path, kind: &str) -> Result<bool, DataError> {
        let real = file_identity(path).map_err(|e| DataError::unreadable(path, &e))?;
        if let Some(first) = self.seen.get(&real) {
            self.listing.skipped.push(format!(
                "{}: skipped, the same {kind} as {} (each is read once)",
                path.display(),
                first.display()
            ));
            return Ok(false);
        }
        self.seen.insert(real, path.to_path_buf());
        Ok(true)
    }

    /// Adds a corpus file, once; a pipe or a device is an error.
    fn file(&mut self, path: &Path, meta: &Metadata) -> Result<(), DataError> {
        refuse_special(path, meta)?;
        self.found += 1;
        if self.first_visit(path, "file")? {
            self.listing.files.push(path.to_path_buf());
        }
        Ok(())
    }

    /// Adds the corpus files of a folder, recursively; `false` when the folder was read before.
    fn dir(&mut self, dir: &Path) -> Result<bool, DataError> {
        if !self.first_visit(dir, "folder")? {
            return Ok(false);
        }
        let io = |e: std::io::Error| DataError::unreadable(dir, &e);
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>().map_err(io)?;
        entries.sort();
        for path in entries {
            let name = lowercase_name(&path);
            if name.starts_with('.') {
                continue;
            }
            let meta = std::fs::metadata(&path).map_err(|e| DataError::unreadable(&path, &e))?;
            // A run trained into a folder of its own corpus must not become corpus of the next run.
            if meta.is_dir() && crate::io::is_output_folder(&path) {
                self.listing.skipped.push(format!(
                    "{}: skipped, a run directory or report of this crate (it holds train.json or .contents), not \
                     corpus",
                    path.display()
                ));
            } else if meta.is_dir() && crate::data::TokenCache::is_cache_folder(&path) {
                self.listing.skipped.push(format!(
                    "{}: skipped, a token cache of this crate (a --cache-dir inside the corpus folder), not corpus",
                    path.display()
                ));
            } else if meta.is_dir() {
                self.dir(&path)?;
            } else if CORPUS_ENDINGS.iter().any(|ending| name.ends_with(ending)) {
                self.file(&path, &meta)?;
            }
        }
        Ok(true)
    }
}

/// What tells files apart: the device and inode on Unix (a hard link or a bind mount of a file
/// is the same file, as a symbolic link is), the canonical path elsewhere.
fn file_identity(path: &Path) -> std::io::Result<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok(format!("{}:{}", meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    Ok(std::fs::canonicalize(path)?.display().to_string())
}

/// Refuses what is not a regular file: a corpus is read more than once (checksummed for the token
/// cache, then tokenised), which a pipe cannot be; `/dev/null` is an empty corpus.
fn refuse_special(path: &Path, meta: &Metadata) -> Result<(), DataError> {
    if meta.is_file() {
        return Ok(());
    }
    let problem = if std::fs::canonicalize(path).is_ok_and(|real| real == Path::new("/dev/null")) {
        CorpusProblem::NullDevice
    } else if is_fifo(meta) {
        CorpusProblem::Pipe
    } else {
        CorpusProblem::Device
    };
    Err(DataError::corpus(path, problem))
}

#[cfg(unix)]
fn is_fifo(meta: &Metadata) -> bool {
    std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type())
}

#[cfg(not(unix))]
fn is_fifo(_meta: &Metadata) -> bool {
    false
}

fn lowercase_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default()
}

/// The file, buffered, its first bytes read (in [`BufReader::buffer`]); the bytes read from the
/// disk are added to `count`.
fn open_raw(file: &Path, count: &Arc<AtomicU64>) -> Result<BufReader<Counted<File>>, DataError> {
    let io = |e: std::io::Error| DataError::unreadable(file, &e);
    let mut raw = BufReader::new(Counted { inner: File::open(file).map_err(io)?, count: count.clone() });
    raw.fill_buf().map_err(io)?;
    Ok(raw)
}

/// The file's content, decompressed when it is gzip (by its first bytes or a `.gz` name), without
/// a leading UTF-8 byte order mark (some editors write one; it is not part of the text). Bytes
/// after the gzip data are ignored, as `gzip -d` does, and noted in `trailing`.
fn open(file: &Path, count: &Arc<AtomicU64>, trailing: &TrailingBytes) -> Result<Box<dyn BufRead>, DataError> {
    let raw = open_raw(file, count)?;
    let named_gz = lowercase_name(file).ends_with(".gz");
    let gzip = raw.buffer().starts_with(GZIP_MAGIC);
    if named_gz && !gzip {
        return Err(DataError::corpus(file, CorpusProblem::NotGzip { empty: raw.buffer().is_empty() }));
    }
    let mut content: Box<dyn Read> =
        if gzip { Box::new(GzipMembers::new(raw, trailing.clone())) } else { Box::new(raw) };
    let mut head = Vec::with_capacity(UTF8_BOM.len());
    content.by_ref().take(UTF8_BOM.len() as u64).read_to_end(&mut head).map_err(|e| DataError::unreadable(file, &e))?;
    if head == UTF8_BOM {
        head.clear();
    }
    Ok(Box::new(BufReader::new(Cursor::new(head).chain(content))))
}

/// The first byte of `reader` that is not white space (consumed up to it), `None` when there is none.
fn first_byte(reader: &mut dyn BufRead) -> std::io::Result<Option<u8>> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(None);
        }
        let (len, found) = match buffer.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(at) => (at, Some(buffer[at])),
            None => (buffer.len(), None),
        };
        reader.consume(len);
        if found.is_some() {
            return Ok(found);
        }
    }
}

/// Whether a name (its `.gz` stripped) says JSON: `.json` or `.jsonl`.
fn named_json(name: &str) -> bool {
    name.ends_with(".json") || name.ends_with(".jsonl")
}

/// What `file` holds, decided by its content: a `.bin` file holds tokens; a file that starts
/// with `PAR1` is Parquet, whatever its name (a `.parquet` file that does not is refused). A `.txt`
/// or `.md` file is text (refused with a hint when its first line is a JSON object). Any other
/// file whose first character (white space and a UTF-8 byte order mark aside) is `{` holds JSON
/// lines, `[` a JSON array (JSON lines for a `.jsonl` name); other `.json` and `.jsonl` files are
/// JSON lines, the rest text. No size limit: a first record of any length decides the same.
pub fn file_format(file: &Path) -> Result<FileFormat, DataError> {
    if is_token_file(file) {
        return Ok(FileFormat::Tokens);
    }
    let name = lowercase_name(file);
    let uncounted = Arc::default();
    let head = open_raw(file, &uncounted)?;
    if head.buffer().starts_with(PARQUET_MAGIC) {
        return Ok(FileFormat::Parquet);
    }
    if name.ends_with(".parquet") {
        let why = if head.buffer().starts_with(b"version https://git-lfs") {
            NotParquet::LfsPointer
        } else if head.buffer().is_empty() {
            NotParquet::Empty
        } else {
            NotParquet::Damaged
        };
        return Err(DataError::corpus(file, CorpusProblem::NotParquet { why }));
    }
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    let io = |e: std::io::Error| DataError::unreadable(file, &e);
    let mut content = open(file, &uncounted, &TrailingBytes::default())?;
    let first = first_byte(&mut content).map_err(io)?;
    if name.ends_with(".txt") || name.ends_with(".md") {
        let mut line = Vec::new();
        if first == Some(b'{') {
            content.read_until(b'\n', &mut line).map_err(io)?;
        }
        if let Some(keys) = object_keys(&String::from_utf8_lossy(&line)) {
            return Err(DataError::corpus(file, CorpusProblem::LooksLikeJsonLines { keys: show_names(&keys) }));
        }
        return Ok(FileFormat::Text);
    }
    Ok(match first {
        Some(b'{') => FileFormat::JsonLines,
        Some(b'[') if !name.ends_with(".jsonl") => FileFormat::JsonArray,
        _ if named_json(name) => FileFormat::JsonLines,
        _ => FileFormat::Text,
    })
}

/// Calls `each` with every document of `file`, in order, as [`file_format`] finds it:
///
/// - JSON lines: one document per line, the string field `text_field` of its object;
/// - a JSON array: one document per object, its `text_field`;
/// - Parquet: one document per row, its string column `text_field`; null values are skipped;
///   streamed a page at a time (the `parquet` feature; without it, an error saying so);
/// - text: documents are separated by blank lines (paragraphs); each keeps its inner newlines.
///
/// Gzip-compressed files are decompressed, every member of them; bytes after the last member
/// that start no other are ignored, as `gzip -d` ignores "trailing garbage"
/// ([`read_documents_counting`] says so). A token file (`.bin`) holds no text: an error.
pub fn read_documents(
    file: &Path,
    text_field: &str,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    read_documents_counting(file, text_field, &Arc::default(), &mut |_| {}, each)
}

/// [`read_documents`], adding the bytes read from the disk to `read` as it goes (a Parquet
/// file's are not counted), and telling `warn` what was read otherwise than as written (trailing
/// bytes after a gzip file's data, named with their offset), once the file is read.
pub fn read_documents_counting(
    file: &Path,
    text_field: &str,
    read: &Arc<AtomicU64>,
    warn: &mut dyn FnMut(String),
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    // A file read as JSON for its first character, not its name, may be text after all.
    let by_content = |error: DataError| match error {
        DataError::Corpus { place, problem } if !named_json(lowercase_name(file).trim_end_matches(".gz")) => {
            DataError::Corpus { place, problem: CorpusProblem::JsonByContent(Box::new(problem)) }
        }
        other => other,
    };
    let trailing = TrailingBytes::default();
    match file_format(file)? {
        FileFormat::JsonLines => {
            read_json_lines(open(file, read, &trailing)?, file, text_field, each).map_err(by_content)?
        }
        FileFormat::JsonArray => {
            read_json_array(open(file, read, &trailing)?, file, text_field, each).map_err(by_content)?
        }
        FileFormat::Text => read_paragraphs(open(file, read, &trailing)?, file, each)?,
        FileFormat::Parquet => read_parquet(file, text_field, each)?,
        FileFormat::Tokens => return Err(DataError::corpus(file, CorpusProblem::TokensNotText)),
    }
    if let Some((at, count)) = trailing.get() {
        warn(format!(
            "{}: {count} trailing byte{} after the gzip data at offset {at} ignored (as `gzip -d` ignores \
             trailing garbage); the documents before them are read",
            file.display(),
            if count == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// Without the `parquet` feature: the error that says how to read Parquet.
#[cfg(not(feature = "parquet"))]
fn read_parquet(
    file: &Path,
    _column: &str,
    _each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    Err(DataError::corpus(file, CorpusProblem::NoParquetFeature))
}

/// Text: one document per paragraph (lines up to a blank line).
fn read_paragraphs(
    reader: impl BufRead,
    file: &Path,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut paragraph = String::new();
    for_each_line(reader, file, &mut |_, line| {
        if line.trim().is_empty() {
            if !paragraph.is_empty() {
                each(&paragraph)?;
                paragraph.clear();
            }
        } else {
            if !paragraph.is_empty() {
                paragraph.push('\n');
            }
            paragraph.push_str(line);
        }
        Ok(())
    })?;
    if !paragraph.is_empty() {
        each(&paragraph)?;
    }
    Ok(())
}
