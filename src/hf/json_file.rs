//! The JSON files of a model folder (`config.json`, the shard index), read with errors that name
//! the file.

use std::path::Path;

use serde_json::Value;

use super::HfError;

/// The JSON file at `path`, parsed.
pub(crate) fn read_json(path: &Path) -> Result<Value, HfError> {
    let text = std::fs::read_to_string(path).map_err(|error| HfError::Io { path: path.to_path_buf(), error })?;
    serde_json::from_str(&text).map_err(|e| HfError::NotJson { path: path.to_path_buf(), error: e.to_string() })
}
