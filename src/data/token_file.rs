//! Memory-mapped files of little-endian token ids: the pre-tokenised corpora of nanoGPT
//! (headerless `uint16`) and llm.c (a header of 256 `int32`, then `uint16` or `uint32` tokens),
//! and the token cache's own `tokens.bin` (headerless `u32`).

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::data::{CorpusProblem, DataError, TokenLayoutProblem};

/// The first `int32` of an llm.c token file.
pub const LLMC_MAGIC: u32 = 20240520;

/// llm.c's header: 256 little-endian `int32` (magic, version, token count, then zeros).
const LLMC_HEADER_BYTES: usize = 256 * 4;

/// How a token file lays out its tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenLayout {
    /// nanoGPT's `prepare.py`: `uint16` tokens, no header.
    NanoGpt,
    /// llm.c: the 1024-byte header, then `uint16` (version 1) or `uint32` (version 2) tokens.
    LlmC {
        /// The header's version.
        version: u32,
    },
    /// The token cache's `tokens.bin`: `u32` tokens, no header.
    Cache,
}

impl TokenLayout {
    /// Bytes before the first token.
    fn header_bytes(self) -> usize {
        match self {
            TokenLayout::LlmC { .. } => LLMC_HEADER_BYTES,
            TokenLayout::NanoGpt | TokenLayout::Cache => 0,
        }
    }

    /// Bytes per token.
    fn width(self) -> usize {
        match self {
            TokenLayout::NanoGpt | TokenLayout::LlmC { version: 1 } => 2,
            TokenLayout::LlmC { .. } | TokenLayout::Cache => 4,
        }
    }
}

/// Whether `path` names a pre-tokenised corpus file (`.bin`).
pub fn is_token_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("bin"))
}

/// A memory-mapped token file.
#[derive(Debug)]
pub struct TokenFile {
    /// `None` for an empty file (an empty file cannot be mapped).
    map: Option<Mmap>,
    layout: TokenLayout,
    n_tokens: u64,
}

impl TokenFile {
    /// Opens a nanoGPT or llm.c token file: llm.c's when it starts with the magic number
    /// 20240520, nanoGPT's otherwise. A size or header that does not fit the layout, or a file
    /// without tokens, is an error naming the file.
    pub fn open(path: &Path) -> Result<Self, DataError> {
        let bad = |problem| DataError::corpus(path, CorpusProblem::TokenLayout(problem));
        let map = map_file(path).map_err(|e| DataError::unreadable(path, &e))?;
        let bytes = map.as_deref().unwrap_or(&[]);
        let layout = match bytes.first_chunk::<4>().map(|magic| u32::from_le_bytes(*magic)) {
            Some(LLMC_MAGIC) => TokenLayout::LlmC { version: llmc_header(bytes).map_err(bad)?.0 },
            _ => TokenLayout::NanoGpt,
        };
        let file = Self::from_map(map, layout).map_err(bad)?;
        if file.n_tokens == 0 {
            return Err(DataError::corpus(path, CorpusProblem::NoTokens));
        }
        Ok(file)
    }

    /// Opens a file in the token cache's layout; the error says what does not fit.
    pub(crate) fn open_cache(path: &Path) -> Result<Self, String> {
        let map = map_file(path).map_err(|e| e.to_string())?;
        Self::from_map(map, TokenLayout::Cache).map_err(|e| e.to_string())
    }

    fn from_map(map: Option<Mmap>, layout: TokenLayout) -> Result<Self, TokenLayoutProblem> {
        let bytes = map.as_deref().unwrap_or(&[]);
        let body = bytes.len().saturating_sub(layout.header_bytes());
        match layout {
            TokenLayout::NanoGpt if !bytes.len().is_multiple_of(2) => {
                return Err(TokenLayoutProblem::OddBytes { bytes: bytes.len() })
            }
            TokenLayout::LlmC { version } => {
                let (_, count) = llmc_header(bytes)?;
                let expected = count as u64 * layout.width() as u64;
                if body as u64 != expected {
                    let count = count as usize;
                    let header = LLMC_HEADER_BYTES;
                    return Err(TokenLayoutProblem::CountMismatch { version, count, expected, header, body });
                }
            }
            TokenLayout::Cache if !bytes.len().is_multiple_of(4) => {
                return Err(TokenLayoutProblem::PartialToken { bytes: bytes.len() })
            }
            _ => {}
        }
        Ok(Self { n_tokens: (body / layout.width()) as u64, map, layout })
    }

    /// The file's layout.
    pub fn layout(&self) -> TokenLayout {
        self.layout
    }

    /// Number of tokens.
    pub fn n_tokens(&self) -> u64 {
        self.n_tokens
    }

    /// Copies tokens `[start, start + out.len())` into `out`.
    pub fn read(&self, start: u64, out: &mut [u32]) {
        let width = self.layout.width();
        let from = self.layout.header_bytes() + start as usize * width;
        let bytes = &self.map.as_deref().unwrap_or(&[])[from..from + out.len() * width];
        for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(width)) {
            *slot = token(chunk);
        }
    }

    /// Every token, in order.
    pub fn tokens(&self) -> impl Iterator<Item = u32> + '_ {
        let bytes = &self.map.as_deref().unwrap_or(&[])[self.layout.header_bytes()..];
        bytes.chunks_exact(self.layout.width()).map(token)
    }
}

/// The token of a 2- or 4-byte little-endian chunk.
fn token(chunk: &[u8]) -> u32 {
    match *chunk {
        [a, b] => u16::from_le_bytes([a, b]) as u32,
        [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
        _ => unreachable!("tokens are 2 or 4 bytes"),
    }
}

/// The version and token count of an llm.c header.
fn llmc_header(bytes: &[u8]) -> Result<(u32, u32), TokenLayoutProblem> {
    if bytes.len() < LLMC_HEADER_BYTES {
        return Err(TokenLayoutProblem::ShortHeader {
            magic: LLMC_MAGIC,
            bytes: bytes.len(),
            header: LLMC_HEADER_BYTES,
        });
    }
    let int = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    match int(1) {
        version @ (1 | 2) => Ok((version, int(2))),
        version => Err(TokenLayoutProblem::UnknownVersion { version }),
    }
}

/// Maps a file read-only; `None` when it is empty.
fn map_file(path: &Path) -> std::io::Result<Option<Mmap>> {
    let file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: the mapping is only read. Token caches are written to a temporary folder and renamed,
    // never modified in place; a corpus file must not be rewritten while a run reads it (as with
    // any file a program reads).
    unsafe { Mmap::map(&file) }.map(Some)
}
