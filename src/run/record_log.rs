//! A run's logs of records, one JSON line each (`metrics.jsonl`, `tracking.jsonl`): rewritten
//! whole when a training starts (keeping what a resumed checkpoint covers), then appended to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A log of records open for appending.
#[derive(Debug)]
pub struct RecordLog {
    path: PathBuf,
    file: File,
}

impl RecordLog {
    /// Replaces the file at `path` with `kept`, one line each (atomically: a crash leaves the old
    /// file or the new one), and opens it for appending.
    pub fn restart<T: Serialize>(path: &Path, kept: &[T]) -> std::io::Result<Self> {
        crate::io::write_atomically(path, json_lines(kept)?.as_bytes())?;
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Self { path: path.to_path_buf(), file })
    }

    /// Appends `records`, one line each, in one write.
    pub fn append<T: Serialize>(&mut self, records: &[T]) -> std::io::Result<()> {
        self.file.write_all(json_lines(records)?.as_bytes())
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
    }
}
