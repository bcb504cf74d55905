//! A run's logs of records, one JSON line each (`metrics.jsonl`, `tracking.jsonl`): rewritten
//! whole when a training starts (keeping what a resumed checkpoint covers), then appended to.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A log of records open for appending. Each write starts where the last whole record ends, so
/// a write that failed part-way (a full disk) is overwritten by the next, then cut back: records
/// never run together. (The file is opened for writing, not appending, which on Windows could
/// not be cut.)
#[derive(Debug)]
pub struct RecordLog {
    path: PathBuf,
    file: File,
    /// The file's length after the last whole record.
    whole: u64,
    /// Whether a write failed since: the file may end in part of a record.
    torn: bool,
}

impl RecordLog {
    /// Replaces the file at `path` with `kept`, one line each (atomically: a crash leaves the old
    /// file or the new one), and opens it for appending.
    pub fn restart<T: Serialize>(path: &Path, kept: &[T]) -> std::io::Result<Self> {
        crate::io::write_atomically(path, json_lines(kept)?.as_bytes())?;
        let file = OpenOptions::new().write(true).open(path)?;
        let whole = file.metadata()?.len();
        Ok(Self { path: path.to_path_buf(), file, whole, torn: false })
    }

    /// Appends `records`, one line each, in one write, after the last whole record. After a
    /// failed write, what it left past that point is cut off.
    pub fn append<T: Serialize>(&mut self, records: &[T]) -> std::io::Result<()> {
        let text = json_lines(records)?;
        let written = self.file.seek(SeekFrom::Start(self.whole)).and_then(|_| self.file.write_all(text.as_bytes()));
        if let Err(error) = written {
            self.torn = true;
            return Err(error);
        }
        self.whole += text.len() as u64;
        if self.torn {
            self.file.set_len(self.whole)?;
            self.torn = false;
        }
        Ok(())
    }

    /// Makes what was appended durable (a crash after this loses none of it).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Keeps `text`, what `metrics.jsonl` in the run directory `dir` held before a restart drops
/// part of it (from a damaged line on), beside it as `metrics.jsonl.damaged` (atomically);
/// returns that path. A copy kept by an earlier restart stays: `text` goes after it.
pub fn keep_damaged_metrics(dir: &Path, text: &str) -> std::io::Result<PathBuf> {
    let kept_as = dir.join(super::METRICS_DAMAGED);
    let mut kept = match std::fs::read_to_string(&kept_as) {
        Ok(earlier) => earlier,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    if !kept.is_empty() && !kept.ends_with('\n') {
        kept.push('\n');
    }
    kept.push_str(text);
    crate::io::write_atomically(&kept_as, kept.as_bytes())?;
    Ok(kept_as)
}

impl Drop for RecordLog {
    /// A log whose last write failed part-way ends at its last whole record, as far as the disk
    /// lets it.
    fn drop(&mut self) {
        if self.torn {
            let _ = self.file.set_len(self.whole);
        }
    }
}

/// `records` as JSON lines, each ended by `\n`.
fn json_lines<T: Serialize>(records: &[T]) -> std::io::Result<String> {
    let mut text = String::new();
    for record in records {
        text.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_keeps_only_what_it_is_given_and_appends_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
        let mut log = RecordLog::restart(&path, &[serde_json::json!({"a": 1})]).unwrap();
        log.append(&[serde_json::json!({"a": 4}), serde_json::json!({"a": 5})]).unwrap();
        log.sync().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n{\"a\":4}\n{\"a\":5}\n");
        let empty: [u8; 0] = [];
        RecordLog::restart(&path, &empty).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        let kept_as = keep_damaged_metrics(dir.path(), "{\"a\":1}\n{\"a\n").unwrap();
        assert_eq!(kept_as, dir.path().join("metrics.jsonl.damaged"));
        assert_eq!(std::fs::read_to_string(&kept_as).unwrap(), "{\"a\":1}\n{\"a\n");
        // A second damaged restart keeps the first copy, and its own after it.
        keep_damaged_metrics(dir.path(), "{\"b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&kept_as).unwrap(), "{\"a\":1}\n{\"a\n{\"b\n");
    }

    #[test]
    fn a_record_after_a_failed_write_starts_where_the_last_whole_one_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut log = RecordLog::restart(&path, &[serde_json::json!({"a": 1})]).unwrap();
        // What a write cut short by a full disk leaves: part of a record, and the error.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"a\": 2, \"b").unwrap();
        log.torn = true;
        log.append(&[serde_json::json!({"a": 3})]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n{\"a\":3}\n");
        // Torn again, and closed: the log ends at its last whole record.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"a\"").unwrap();
        log.torn = true;
        drop(log);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n{\"a\":3}\n");
    }
}
