//! Checksums beside files (`<file>.sum`: CRC-32 and length), which tell a complete file from one
//! cut short, overwritten or never finished.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::write_atomically;

/// The CRC-32 and length of a file's content, read in chunks (never the whole file in memory).
pub fn file_crc32(path: &Path) -> std::io::Result<(u32, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            read => read?,
        };
        if n == 0 {
            return Ok((hasher.finalize(), len));
        }
        hasher.update(&buffer[..n]);
        len += n as u64;
    }
}

/// [`write_atomically`], with the checksum ([`write_sum`]) beside it. The old checksum goes
/// first, so that a kill at any moment leaves the file with its own checksum or with none
/// (which [`verify_sum`] reports as [`SumError::NoSum`]), never beside another's.
pub fn write_atomically_with_sum(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::remove_file(sum_path(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    write_atomically(path, bytes)?;
    write_sum(path)
}

/// The checksum file written beside `path`: `<path>.sum`.
pub fn sum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sum");
    PathBuf::from(name)
}

/// Writes `<path>.sum` (atomically) with the CRC-32 and length of `path`: call it once `path` is
/// complete, so that [`verify_sum`] tells a complete file from one cut short or overwritten.
pub fn write_sum(path: &Path) -> std::io::Result<()> {
    let (crc32, bytes) = file_crc32(path)?;
    write_atomically(&sum_path(path), format!("crc32 {crc32:08x} bytes {bytes}\n").as_bytes())
}

/// Why a file failed [`verify_sum`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SumError {
    /// The file does not exist.
    Missing,
    /// The file exists but its `.sum` does not: its writing never finished.
    NoSum,
    /// The content does not match the `.sum`: cut short, overwritten or corrupt.
    Mismatch(String),
}

impl std::fmt::Display for SumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "the file is missing"),
            Self::NoSum => write!(f, "its writing never finished (no .sum beside it)"),
            Self::Mismatch(what) => write!(f, "it is corrupt or cut short ({what})"),
        }
    }
}

/// Checks `bytes`, read whole from `path`, against the `<path>.sum` that [`write_sum`] wrote:
/// what is then used is exactly what was checked, even if the file is replaced meanwhile.
pub fn verify_sum_of(path: &Path, bytes: &[u8]) -> Result<(), SumError> {
    let expected = std::fs::read_to_string(sum_path(path)).map_err(|_| SumError::NoSum)?;
    let actual = format!("crc32 {:08x} bytes {}", crc32fast::hash(bytes), bytes.len());
    if expected.trim() == actual {
        Ok(())
    } else {
        Err(SumError::Mismatch(format!("{actual}, expected {}", expected.trim())))
    }
}

/// Checks `path` against the `<path>.sum` that [`write_sum`] wrote.
pub fn verify_sum(path: &Path) -> Result<(), SumError> {
    if !path.is_file() {
        return Err(SumError::Missing);
    }
    let expected = std::fs::read_to_string(sum_path(path)).map_err(|_| SumError::NoSum)?;
    let (crc32, bytes) = file_crc32(path).map_err(|e| SumError::Mismatch(format!("cannot read it: {e}")))?;
    let actual = format!("crc32 {crc32:08x} bytes {bytes}");
    if expected.trim() == actual {
        Ok(())
    } else {
        Err(SumError::Mismatch(format!("{actual}, expected {}", expected.trim())))
    }
}
