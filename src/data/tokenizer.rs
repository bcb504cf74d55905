//! Tokenizers: a built-in byte-level one (no files) and any Hugging Face `tokenizer.json`.

use std::path::Path;

use crate::data::{DataError, TokenizerProblem};

/// Turns text into token ids and back.
#[derive(Clone)]
pub enum Tokenizer {
    /// One token per byte (vocabulary 256); byte 0 (NUL) doubles as the end-of-text token.
    Byte,
    /// A Hugging Face tokenizer loaded from a `tokenizer.json` (the `tokenizers` feature).
    #[cfg(feature = "tokenizers")]
    HuggingFace {
        /// The loaded tokenizer.
        inner: Box<tokenizers::Tokenizer>,
        /// The id that separates documents.
        eot: u32,
        /// Where it was loaded from.
        path: String,
        /// The loaded file's size and CRC-32 ([`Tokenizer::identity`]).
        content: String,
    },
}

/// Names of end-of-text / end-of-sequence tokens, in order of preference.
#[cfg(feature = "tokenizers")]
const EOT_NAMES: [&str; 6] = ["<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|im_end|>"];

impl Tokenizer {
    /// `byte` for the built-in tokenizer, otherwise the path of a `tokenizer.json`.
    pub fn from_spec(spec: &str) -> Result<Self, DataError> {
        if spec == "byte" {
            Ok(Tokenizer::Byte)
        } else {
            Self::from_file(spec)
        }
    }

    /// Loads a Hugging Face `tokenizer.json`; its end-of-text token is the first of
    /// `<|endoftext|>`, `</s>`, `<|end_of_text|>`, `<eos>`, `[SEP]`, `<|im_end|>` that it knows.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, DataError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let problem = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => TokenizerProblem::IsFolder { path: shown },
            Ok(_) => return Self::load_hugging_face(path, shown),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TokenizerProblem::NotFound { path: shown },
            // It may well exist: say why it cannot be reached (a folder on the way not readable).
            Err(e) => TokenizerProblem::Unreadable { path: shown, error: e.to_string() },
        };
        Err(DataError::Tokenizer(problem))
    }

    #[cfg(feature = "tokenizers")]
    fn load_hugging_face(path: &Path, shown: String) -> Result<Self, DataError> {
        // Read once: the checksum is of the very bytes parsed.
        let bytes = std::fs::read(path).map_err(|e| {
            DataError::Tokenizer(TokenizerProblem::Unreadable { path: shown.clone(), error: e.to_string() })
        })?;
        let content = format!("{}:crc32={:08x}", bytes.len(), crc32fast::hash(&bytes));
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
            DataError::Tokenizer(TokenizerProblem::Invalid { path: shown.clone(), error: e.to_string() })
        })?;
        let eot = EOT_NAMES.iter().find_map(|name| inner.token_to_id(name)).ok_or_else(|| {
            DataError::Tokenizer(TokenizerProblem::NoEndOfText { path: shown.clone(), names: EOT_NAMES.join(" ") })
        })?;
        Ok(Tokenizer::HuggingFace { inner: Box::new(inner), eot, path: shown, content })
    }

    #[cfg(not(feature = "tokenizers"))]
    fn load_hugging_face(_path: &Path, shown: String) -> Result<Self, DataError> {
        Err(DataError::Tokenizer(TokenizerProblem::NoTokenizersFeature { path: shown }))
    }

    /// The number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Byte => 256,
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, .. } => inner.get_vocab_size(true),
        }
    }

    /// The number of ids of the tokenizer's own vocabulary, without the added tokens that text
    /// rarely holds: t5-base has 32,000 (the paper's vocabulary) and 100 `<extra_id_N>` sentinels
    /// above them, 32,100 in all. A model needs at least this many; a corpus that does produce a
    /// larger id is refused when it is tokenised.
    pub fn base_vocab_size(&self) -> usize {
        match self {
            Tokenizer::Byte => 256,
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, eot, .. } => inner.get_vocab_size(false).max(*eot as usize + 1),
        }
    }

    /// Refuses a model vocabulary of `vocab_size` ids that cannot hold [`base_vocab_size`](Self::base_vocab_size).
    pub fn check_fits(&self, vocab_size: usize) -> Result<(), DataError> {
        let needed = self.base_vocab_size();
        if needed > vocab_size {
            return Err(DataError::Tokenizer(TokenizerProblem::VocabularyTooSmall { needed, vocab_size }));
        }
        Ok(())
    }

    /// The text of token `id`, for messages (`None` for an id it does not have).
    pub fn token_text(&self, id: u32) -> Option<String> {
        match self {
            Tokenizer::Byte => u8::try_from(id).ok().map(|b| format!("{:?}", b as char)),
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, .. } => inner.id_to_token(id),
        }
    }

    /// The id of the token written `token` (a special token such as `[MASK]`), if the tokenizer
    /// has one; the byte tokenizer has none.
    #[cfg_attr(not(feature = "tokenizers"), allow(unused_variables))]
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            Tokenizer::Byte => None,
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, .. } => inner.token_to_id(token),
        }
    }

    /// The token placed between documents.
    pub fn eot(&self) -> u32 {
        match self {
            Tokenizer::Byte => 0,
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { eot, .. } => *eot,
        }
    }

    /// A short description that identifies the tokenizer (for caches and run configs).
    pub fn describe(&self) -> String {
        match self {
            Tokenizer::Byte => "byte".to_string(),
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { path, .. } => format!("tokenizer.json:{path}:{}", self.vocab_size()),
        }
    }

    /// What decides the tokens, by content (keys the token cache and the data fingerprint): `byte`,
    /// or a `tokenizer.json`'s size and CRC-32 and vocabulary size, wherever the file lies.
    pub fn identity(&self) -> String {
        match self {
            Tokenizer::Byte => "byte".to_string(),
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { content, .. } => format!("tokenizer.json:{content}:{}", self.vocab_size()),
        }
    }

    /// Token ids of `text`, without special tokens. NUL bytes are dropped by the byte tokenizer.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, DataError> {
        self.encode_with(text, false)
    }

    /// Token ids of `text` as transformers' `tokenizer(text)` gives them: with the special tokens
    /// the tokenizer's post-processor adds (LLaMA's `<s>`). For a prompt to a pretrained model,
    /// which saw them in training; the byte tokenizer has none.
    pub fn encode_with_special_tokens(&self, text: &str) -> Result<Vec<u32>, DataError> {
        self.encode_with(text, true)
    }

    #[cfg_attr(not(feature = "tokenizers"), allow(unused_variables))]
    fn encode_with(&self, text: &str, special_tokens: bool) -> Result<Vec<u32>, DataError> {
        match self {
            Tokenizer::Byte => Ok(text.bytes().filter(|&b| b != 0).map(u32::from).collect()),
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, path, .. } => inner
                .encode(text, special_tokens)
                .map(|encoding| encoding.get_ids().to_vec())
                .map_err(|e| failed(path, "encode", &e)),
        }
    }

    /// Token ids of each text, as [`encode`](Tokenizer::encode); a Hugging Face tokenizer encodes
    /// the batch in parallel.
    pub fn encode_batch(&self, texts: &[String]) -> Result<Vec<Vec<u32>>, DataError> {
        match self {
            Tokenizer::Byte => texts.iter().map(|text| self.encode(text)).collect(),
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, path, .. } => inner
                .encode_batch(texts.iter().map(String::as_str).collect(), false)
                .map(|encodings| encodings.iter().map(|e| e.get_ids().to_vec()).collect())
                .map_err(|e| failed(path, "encode", &e)),
        }
    }

    /// The text of `ids` (invalid UTF-8 from the byte tokenizer is replaced, end-of-text shown as a newline).
    pub fn decode(&self, ids: &[u32]) -> Result<String, DataError> {
        match self {
            Tokenizer::Byte => {
                let bytes: Vec<u8> = ids.iter().map(|&id| if id == 0 { b'\n' } else { id.min(255) as u8 }).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            #[cfg(feature = "tokenizers")]
            Tokenizer::HuggingFace { inner, path, .. } => {
                inner.decode(ids, true).map_err(|e| failed(path, "decode", &e))
            }
        }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({})", self.describe())
    }
}

/// The tokenizer at `path` failed to `what` ("encode" or "decode").
#[cfg(feature = "tokenizers")]
fn failed(path: &str, what: &'static str, error: &dyn std::fmt::Display) -> DataError {
    DataError::Tokenizer(TokenizerProblem::Failed { path: path.into(), what, error: error.to_string() })
}
