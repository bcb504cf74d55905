//! What can go wrong with the data, typed: each variant carries its facts and writes its advice
//! once, so that a caller (or a test) tells the problems apart without reading the message.

use std::fmt;
use std::path::PathBuf;

use super::CacheProblem;

/// What went wrong with the data, said so that the user knows what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A tokenizer that cannot be loaded or used.
    #[error("tokenizer: {0}")]
    Tokenizer(TokenizerProblem),
    /// A corpus file or folder that cannot be read as one, at `place`.
    #[error("corpus: {place}: {problem}")]
    Corpus {
        /// The file or folder, and where in it.
        place: Place,
        /// What is wrong there.
        problem: CorpusProblem,
    },
    /// The corpus as a whole cannot be trained on.
    #[error("corpus: {0}")]
    Whole(WholeCorpusProblem),
    /// The token cache in `dir` cannot be written or read, or `dir` (`--cache-dir`) cannot hold one.
    #[error("token cache: {}: {problem}", dir.display())]
    Cache {
        /// The cache's folder.
        dir: PathBuf,
        /// What is wrong with it.
        problem: CacheProblem,
    },
    /// The corpus is too small for the requested split or sequence length.
    #[error("data split: {0}")]
    Split(SplitProblem),
    /// A problem of the validation corpus (`--valid-data`), said as the training corpus's would be.
    #[error("the validation corpus (--valid-data): {0}")]
    Validation(Box<DataError>),
}

impl DataError {
    /// A corpus problem at `place`.
    pub fn corpus(place: impl Into<Place>, problem: CorpusProblem) -> Self {
        DataError::Corpus { place: place.into(), problem }
    }

    /// A corpus file or folder that cannot be read (`error` from the disk or the decompressor);
    /// a missing one is [`CorpusProblem::NotFound`].
    pub fn unreadable(place: impl Into<Place>, error: &std::io::Error) -> Self {
        let problem = match error.kind() {
            std::io::ErrorKind::NotFound => CorpusProblem::NotFound,
            _ => CorpusProblem::Unreadable(error.to_string()),
        };
        DataError::corpus(place, problem)
    }

    /// The corpus problem, wherever it is, when this is one.
    pub fn corpus_problem(&self) -> Option<&CorpusProblem> {
        match self {
            DataError::Corpus { problem, .. } => Some(problem),
            DataError::Validation(inner) => inner.corpus_problem(),
            _ => None,
        }
    }
}

/// Where in the data a problem is: a file or folder and, when known, the spot in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file or folder.
    pub path: PathBuf,
    /// Where in the file, when the problem is at one spot.
    pub at: Option<Spot>,
}

/// A spot in a corpus file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Spot {
    /// A line, from 1.
    Line(usize),
    /// An item of a JSON array, from 1.
    ArrayItem(usize),
    /// A row of a table, from 1.
    Row(usize),
    /// A Parquet row group, from 1, of `of`.
    RowGroup {
        /// The row group.
        group: usize,
        /// How many the file has.
        of: usize,
    },
}

impl Place {
    /// `path` at `spot`.
    pub fn at(path: impl Into<PathBuf>, spot: Spot) -> Self {
        Place { path: path.into(), at: Some(spot) }
    }
}

impl<P: Into<PathBuf>> From<P> for Place {
    fn from(path: P) -> Self {
        Place { path: path.into(), at: None }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        match self.at {
            None => Ok(()),
            Some(Spot::Line(line)) => write!(f, ":{line}"),
            Some(Spot::ArrayItem(item)) => write!(f, ": array item {item}"),
            Some(Spot::Row(row)) => write!(f, ": row {row}"),
            Some(Spot::RowGroup { group, of }) => write!(f, ", row group {group} of {of}"),
        }
    }
}

/// Why a tokenizer cannot be loaded or used; `path` is the `tokenizer.json` as given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum TokenizerProblem {
    /// The path is a folder.
    #[error("{path}: a folder, not a file; {GIVE_TOKENIZER} (the tokenizer.json inside the folder, if it holds one)")]
    IsFolder { path: String },
    /// Nothing is at the path.
    #[error("{path}: no such file; {GIVE_TOKENIZER}")]
    NotFound { path: String },
    /// The file cannot be read: `error` says why.
    #[error("{path}: cannot read it: {error}")]
    Unreadable { path: String, error: String },
    /// The file is not a tokenizer the `tokenizers` crate reads.
    #[error("{path}: not a valid tokenizer.json: {error}")]
    Invalid { path: String, error: String },
    /// The tokenizer knows none of the end-of-text tokens (`names`).
    #[error("{path}: has none of the end-of-text tokens {names}")]
    NoEndOfText { path: String, names: String },
    /// This build cannot read a `tokenizer.json`.
    #[error(
        "{path}: a tokenizer.json needs the `tokenizers` cargo feature of layernorm-scaling; rebuild with \
         `--features tokenizers`, or use the `byte` tokenizer"
    )]
    NoTokenizersFeature { path: String },
    /// The model's vocabulary is smaller than the tokenizer's.
    #[error(
        "the tokenizer has {needed} tokens but the model's vocabulary is {vocab_size}; use a model config with \
         vocab_size >= {needed}"
    )]
    VocabularyTooSmall { needed: usize, vocab_size: usize },
    /// `what` (a text the caller names) encodes to no token.
    #[error("{what} encodes to no token")]
    EncodesToNothing { what: String },
    /// The tokenizer failed to encode or decode (`what`: "encode" or "decode").
    #[error("{path}: cannot {what}: {error}")]
    Failed { path: String, what: &'static str, error: String },
    /// An encoder's tokenizer without BERT's special tokens (`missing`).
    #[error(
        "has no {missing} token: an encoder's pseudo-perplexity needs BERT's [CLS], [SEP] and [MASK]; give the \
         model's own tokenizer.json (--tokenizer)"
    )]
    NoBertTokens { missing: String },
}

/// What to give for a tokenizer.
const GIVE_TOKENIZER: &str = "give `byte` or the path of a Hugging Face tokenizer.json";

/// What is wrong with a corpus file or folder (the [`Place`] beside it says which).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum CorpusProblem {
    /// Nothing is at the path.
    #[error("no such file or folder")]
    NotFound,
    /// The disk (or a decompressor) refused a read: `0` says why.
    #[error("{0}")]
    Unreadable(String),
    /// A folder without corpus files (`endings` lists the names looked for).
    #[error(
        "the folder has no corpus file (none named {endings}; hidden files and folders, such as `.cache/`, are \
         skipped): give the files, or a folder that holds them"
    )]
    EmptyFolder { endings: String },
    /// `/dev/null`.
    #[error(
        "the null device, which is always empty: there is no document to train on; give files or folders that \
         hold the corpus (or no --data for the built-in corpus)"
    )]
    NullDevice,
    /// A pipe, which can be read only once.
    #[error(
        "a pipe (a FIFO, such as `<(...)` gives), not a file: a corpus is read more than once (checksummed for \
         the token cache, then tokenised) and a pipe only once; write it to a file (`... > corpus.txt`) and give that"
    )]
    Pipe,
    /// A device or a socket.
    #[error("a device or a socket, not a regular file: give files or folders that hold the corpus")]
    Device,
    /// A `.gz` file that is empty (`empty`) or holds no gzip data.
    #[error("named .gz but {}", if *empty { EMPTY_DOWNLOAD } else { NOT_GZIP })]
    NotGzip { empty: bool },
    /// A `.parquet` file that does not start with `PAR1`: `why` says what it is instead.
    #[error("named .parquet but does not start with Parquet's `PAR1`; {why}")]
    NotParquet { why: NotParquet },
    /// A `.txt` or `.md` file whose first line is a JSON object (with `keys`).
    #[error(
        "looks like JSON lines, not text: its first line is a JSON object (keys {keys}); name it .jsonl (.jsonl.gz \
         when compressed) to train on one field of each line (`text`, or the one --text-field names)"
    )]
    LooksLikeJsonLines { keys: String },
    /// A token file where text was wanted.
    #[error("a token file (already tokenised) holds no text documents; train on it with --data")]
    TokensNotText,
    /// A Parquet file, in a build without the `parquet` feature.
    #[error(
        "a Parquet file, and this build reads no Parquet: build with the `parquet` feature (`cargo run --release \
         --features parquet --example train -- ...`)"
    )]
    NoParquetFeature,
    /// A line that is not UTF-8; `byte` is the first bad byte of the line, from 1.
    #[error("not UTF-8 text (byte {byte} of the line is not UTF-8); save the file as UTF-8")]
    NotUtf8 { byte: usize },
    /// A JSON-lines line that does not parse (`error`); `hint` says what it looks like, if anything.
    #[error(
        "not a JSON object (a JSON-lines file holds one object per line): {error}{}",
        hint.map_or("", JsonHint::advice)
    )]
    NotJsonLine { error: String, hint: Option<JsonHint> },
    /// A JSON-lines line that is JSON but not an object (`found` says what it is).
    #[error("not a JSON object (a JSON-lines file holds one object per line) but {found}")]
    LineNotAnObject { found: &'static str },
    /// An item of a JSON array that is not an object (`found` says what it is).
    #[error("{found}, not a JSON object")]
    ItemNotAnObject { found: &'static str },
    /// A JSON file that is not an array of objects (`error`); `cut_short` when it ends inside the array.
    #[error(
        "not a JSON array of objects ({error}){}; a JSON corpus file holds JSON lines (one object per line) or one \
         array of objects",
        if *cut_short { "; the file ends inside the array: it was cut short (download it again)" } else { "" }
    )]
    NotJsonArray { error: String, cut_short: bool },
    /// The object's text field is not a string.
    #[error("the field `{field}` is {found}, not a string of text; choose the text field with --text-field")]
    FieldNotText { field: String, found: &'static str },
    /// The object has no text field (`keys` it has).
    #[error(
        "the object has no field `{field}` (its keys: {keys}); choose the field that holds the text with --text-field"
    )]
    NoField { field: String, keys: String },
    /// A problem of a file read as JSON for its first character (`{` or `[`), not its name.
    #[error("{0} (read as JSON because its first character is `{{` or `[`; if the file is text, name it .txt)")]
    JsonByContent(Box<CorpusProblem>),
    /// The Parquet file has no column `column` (`columns` it has).
    #[error("the Parquet file has no column `{column}` (its columns: {columns}); {CHOOSE_COLUMN}")]
    NoColumn { column: String, columns: String },
    /// The text column is nested (`kind`: a list, a map, a struct).
    #[error(
        "the column `{column}` is nested ({kind}), not a string column; only top-level string columns are read: \
         {CHOOSE_COLUMN}"
    )]
    NestedColumn { column: String, kind: &'static str },
    /// The text column holds `kind`, not strings.
    #[error("the column `{column}` holds {kind}, not strings; {CHOOSE_COLUMN}")]
    NotStringColumn { column: String, kind: String },
    /// A value of the text column is not UTF-8.
    #[error("a value of the string column `{column}` is not UTF-8 ({error})")]
    ValueNotUtf8 { column: String, error: String },
    /// The column is in the schema and nowhere else.
    #[error("the column `{column}` is in the schema but has no data; the file is damaged")]
    ColumnWithoutData { column: String },
    /// The Parquet reader cannot decode the file.
    #[error(
        "not a readable Parquet file ({error}); it is truncated or damaged (an interrupted download?): download it \
         again"
    )]
    DamagedParquet { error: String },
    /// A token file without tokens.
    #[error("the token file holds no tokens")]
    NoTokens,
    /// A token file whose size or header does not fit its layout.
    #[error("{0}")]
    TokenLayout(TokenLayoutProblem),
    /// A token file made with another tokenizer: token `position` is `id`.
    #[error(
        "token {position} is id {id}, outside the tokenizer's vocabulary of {vocab_size} ids: the file was made with \
         another tokenizer; give that tokenizer's tokenizer.json with --tokenizer (GPT-2's for nanoGPT's and llm.c's \
         GPT-2 data)"
    )]
    TokenOutsideTokenizer { position: u64, id: u32, vocab_size: usize },
}

/// What to do about a text column.
const CHOOSE_COLUMN: &str = "choose the column that holds the text with --text-field";
const EMPTY_DOWNLOAD: &str = "it is empty (0 bytes; an interrupted download?): download it again";
const NOT_GZIP: &str = "it does not start with gzip's bytes (1f 8b), so it is not gzip-compressed: rename it \
                        without .gz if it holds the text itself, or download it again";

/// What a `.parquet` file that is not Parquet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotParquet {
    /// A Git LFS pointer.
    LfsPointer,
    /// An empty file.
    Empty,
    /// Anything else.
    Damaged,
}

impl fmt::Display for NotParquet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotParquet::LfsPointer => {
                "it is a Git LFS pointer: fetch the file itself (`git lfs pull`, or `huggingface-cli download`)"
            }
            NotParquet::Empty => EMPTY_DOWNLOAD,
            NotParquet::Damaged => "the file is damaged or not Parquet: download it again",
        })
    }
}

/// What a JSON-lines line that does not parse looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonHint {
    /// It starts with `[`.
    Array,
    /// It ends inside an object: one written over several lines.
    SeveralLines,
}

impl JsonHint {
    fn advice(self) -> &'static str {
        match self {
            JsonHint::Array => {
                "; this looks like a JSON array: a file of JSON lines holds one object per line, an array of objects \
                 goes in a file named .json"
            }
            JsonHint::SeveralLines => {
                "; this looks like an object written over several lines: a JSON corpus file holds one object per line \
                 (JSON lines), or one array of objects (`[{...}, {...}]`) in a file named .json"
            }
        }
    }
}

/// How a token file's size or header does not fit its layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum TokenLayoutProblem {
    /// A nanoGPT file of an odd number of bytes.
    #[error(
        "{bytes} bytes, an odd number: a nanoGPT token file (a .bin without llm.c's header) holds 2-byte uint16 \
         tokens; the file is truncated or not a token file"
    )]
    OddBytes { bytes: usize },
    /// A file shorter than llm.c's header.
    #[error(
        "starts with llm.c's magic number {magic} but has {bytes} bytes, fewer than llm.c's {header}-byte header; the \
         file is truncated"
    )]
    ShortHeader { magic: u32, bytes: usize, header: usize },
    /// An llm.c header of a version this crate does not read.
    #[error("llm.c token file of unknown version {version} (known: 1, uint16 tokens; 2, uint32 tokens)")]
    UnknownVersion { version: u32 },
    /// An llm.c header whose token count does not fit the file's size.
    #[error(
        "llm.c header (version {version}) says {count} tokens ({expected} bytes after the {header}-byte header) but \
         the file has {body} bytes after it; the file is truncated or was not written by llm.c"
    )]
    CountMismatch { version: u32, count: usize, expected: u64, header: usize, body: usize },
    /// A token cache file that is not whole 4-byte tokens.
    #[error("{bytes} bytes, not a whole number of 4-byte tokens")]
    PartialToken { bytes: usize },
}

/// What makes the corpus as a whole unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum WholeCorpusProblem {
    /// No document holds text.
    #[error("the corpus has no text (no non-empty document)")]
    NoText,
    /// Token files given beside text files.
    #[error(
        "{} is a pre-tokenised token file but {} is not: a corpus is either text (tokenised here) or token files, \
         not both; give --data only the .bin files or only the others",
        tokens.display(),
        text.display()
    )]
    MixedTokensAndText { tokens: PathBuf, text: PathBuf },
    /// No token file was given.
    #[error("no token file given")]
    NoTokenFiles,
    /// The corpus holds token `id` (shown as `text`), which the model's vocabulary does not.
    #[error(
        "the corpus holds token id {id} ({text}), outside the model's vocabulary of {vocab_size}: use a model config \
         with vocab_size > {id}, or remove that text from the corpus"
    )]
    OutsideModelVocabulary { id: u32, text: String, vocab_size: usize },
    /// The validation file `valid` is the training file `train` (`copy`: by content, not by link).
    #[error(
        "the validation corpus overlaps the training one: {} (--valid-data) is {} (--data){}; validate on documents \
         the model does not train on (C4's c4-validation.*.json.gz for its c4-train shards)",
        valid.display(),
        train.display(),
        if *copy { " by content (a copy)" } else { "" }
    )]
    ValidationOverlaps { valid: PathBuf, train: PathBuf, copy: bool },
    /// A file changed while it was tokenised.
    #[error("a data file changed while it was being tokenised: run again once the data is written")]
    ChangedWhileRead,
    /// The thread that read the corpus stopped: `0` says how.
    #[error("{0}")]
    ReaderStopped(&'static str),
}

/// Why the data cannot be split into the sequences asked for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's doc says what its fields are
pub enum SplitProblem {
    /// A validation fraction outside (0, 1).
    #[error("the validation fraction must be in (0, 1), got {0}")]
    BadFraction(f64),
    /// Fewer than 2 documents.
    #[error(
        "the corpus has {0} document(s); a train/validation split needs at least 2 (text files are split into \
         documents at blank lines, token files after each end-of-text token)"
    )]
    TooFewDocuments(usize),
    /// A split (`training` or `validation`) without one sequence of `seq_len + 1` tokens.
    #[error(
        "the {split} split has {tokens} tokens, fewer than one sequence of {seq_len} + 1; use more data, a shorter \
         --seq-len or a {} --valid-fraction (now {valid_fraction})",
        if *split == "training" { "smaller" } else { "larger" }
    )]
    SplitTooShort { split: &'static str, tokens: u64, seq_len: usize, valid_fraction: f64 },
    /// A corpus (`what`) without one sequence: `short` says of what.
    #[error("{what} has {tokens} tokens, {short}: give more data or a shorter --seq-len")]
    CorpusTooShort { what: &'static str, tokens: u64, short: String },
    /// `--valid-tokens` asks for more targets than the validation sequences hold.
    #[error(
        "--valid-tokens {asked} is more than the validation documents hold: {available} target tokens in \
         {sequences} sequences of {seq_len}; lower --valid-tokens, or give more validation data"
    )]
    TooFewValidTokens { asked: u64, available: u64, sequences: usize, seq_len: usize },
    /// Evaluation data without one full sequence.
    #[error("the evaluation data holds no full sequence; give more text or a shorter --seq-len")]
    NoFullSequence,
    /// An encoder's `--seq-len` below 3.
    #[error("--seq-len {0}: an encoder's sequence needs at least 3 tokens ([CLS], one token to score, [SEP])")]
    EncoderSeqLen(usize),
    /// An encoder's evaluation text of `tokens`, fewer than one sequence body.
    #[error(
        "the evaluation text holds {tokens} tokens, fewer than one sequence of {body} (--seq-len {seq_len} less \
         [CLS] and [SEP]); give more text (--data) or a lower --seq-len"
    )]
    EncoderTextTooShort { tokens: u64, body: u64, seq_len: usize },
}
