//! JSON corpora: JSON lines (one object per line, C4's and most datasets' layout) and a JSON
//! array of objects; each object is one document, its text in one string field (`--text-field`).

use std::io::BufRead;
use std::path::Path;

use serde_json::{Map, Value};

use crate::data::{CorpusProblem, DataError, JsonHint, Place, Spot};

/// The field that holds a document's text unless `--text-field` says otherwise.
pub const DEFAULT_TEXT_FIELD: &str = "text";

/// The keys of `line` when it is a JSON object (the sign of a JSON-lines file), else `None`.
pub fn object_keys(line: &str) -> Option<Vec<String>> {
    match serde_json::from_str::<Value>(line.trim()) {
        Ok(Value::Object(object)) => Some(object.keys().cloned().collect()),
        _ => None,
    }
}

/// Names (an object's keys, a table's columns), quoted and comma-separated (the first 12).
pub fn show_names<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    let names: Vec<String> = names.into_iter().map(|name| format!("`{name}`")).collect();
    let more = if names.len() > 12 { format!(", ... ({} in all)", names.len()) } else { String::new() };
    format!("{}{more}", names.iter().take(12).cloned().collect::<Vec<_>>().join(", "))
}

/// Calls `each` with every line of `reader` (without its line end) and its number, from 1. A
/// read that fails (the disk, or damaged gzip data) is an error naming `file`; a line that is
/// not UTF-8 text one naming the line and the byte.
pub(crate) fn for_each_line(
    mut reader: impl BufRead,
    file: &Path,
    each: &mut dyn FnMut(usize, &str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut bytes = Vec::new();
    for number in 1.. {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes).map_err(|e| DataError::unreadable(file, &e))? == 0 {
            break;
        }
        let end = bytes.len() - usize::from(bytes.ends_with(b"\n")) - usize::from(bytes.ends_with(b"\r\n"));
        let line = std::str::from_utf8(&bytes[..end]).map_err(|e| {
            DataError::corpus(Place::at(file, Spot::Line(number)), CorpusProblem::NotUtf8 { byte: e.valid_up_to() + 1 })
        })?;
        each(number, line)?;
    }
    Ok(())
}

/// Calls `each` with the `field` of every line's object; blank lines are skipped. `file` is
/// named in errors, with the line number.
pub fn read_json_lines(
    reader: impl BufRead,
    file: &Path,
    field: &str,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    for_each_line(reader, file, &mut |number, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let place = Place::at(file, Spot::Line(number));
        let value: Value = serde_json::from_str(line).map_err(|e| {
            // An object cut at the line's end: one written over several lines (pretty-printed).
            let hint = if line.trim_start().starts_with('[') {
                Some(JsonHint::Array)
            } else {
                e.is_eof().then_some(JsonHint::SeveralLines)
            };
            DataError::corpus(place.clone(), CorpusProblem::NotJsonLine { error: e.to_string(), hint })
        })?;
        let Value::Object(object) = value else {
            return Err(DataError::corpus(place, CorpusProblem::LineNotAnObject { found: kind(&value) }));
        };
        each(text_of(&object, field, place)?)
    })
}

/// Calls `each` with the `field` of every object of a JSON array (the whole file is parsed).
pub fn read_json_array(
    reader: impl BufRead,
    file: &Path,
    field: &str,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let items: Vec<Value> = serde_json::from_reader(reader).map_err(|e| {
        if e.is_io() {
            // Not the JSON's fault: the disk's, or the gzip data's around it.
            return DataError::corpus(file, CorpusProblem::Unreadable(e.to_string()));
        }
        DataError::corpus(file, CorpusProblem::NotJsonArray { error: e.to_string(), cut_short: e.is_eof() })
    })?;
    for (index, item) in items.iter().enumerate() {
        let place = Place::at(file, Spot::ArrayItem(index + 1));
        let Value::Object(object) = item else {
            return Err(DataError::corpus(place, CorpusProblem::ItemNotAnObject { found: kind(item) }));
        };
        each(text_of(object, field, place)?)?;
    }
    Ok(())
}

/// The string `field` of `object`; `place` names the object in errors.
fn text_of<'a>(object: &'a Map<String, Value>, field: &str, place: Place) -> Result<&'a str, DataError> {
    let problem = match object.get(field) {
        Some(Value::String(text)) => return Ok(text),
        Some(other) => CorpusProblem::FieldNotText { field: field.into(), found: kind(other) },
        None => CorpusProblem::NoField { field: field.into(), keys: show_names(object.keys()) },
    };
    Err(DataError::corpus(place, problem))
}

/// What a JSON value is, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
