//! The rows of a multiple-choice file, each with the place it came from (`file:line`, or
//! `file: row N` where a row has no line of its own): JSON lines, a JSON array, a Parquet file
//! (the Hub's exports, with the `parquet` feature) or a CSV file without a header (MMLU's own).

use std::path::Path;

use serde_json::Value;

use crate::data::DataError;

/// One row of a file: its fields and where it is, for messages.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// `file:line` or `file: row N` (1-based).
    pub place: String,
    /// A JSON object for JSON and Parquet rows; a list of strings for CSV rows.
    pub value: Value,
}

/// The file's name as messages show it.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Every row of `path`, read by its extension: `.csv` (no header: each row a list of strings),
/// `.parquet`, else JSON (a whole-file array when it starts with `[`, else one object per line).
pub(crate) fn read_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    match extension(path).as_str() {
        "csv" => read_csv(path),
        "parquet" => read_parquet_rows(path),
        _ => read_json(path),
    }
}

/// The lower-case extension of `path` ("" when none).
pub(crate) fn extension(path: &Path) -> String {
    path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default()
}

fn read_json(path: &Path) -> Result<Vec<Row>, DataError> {
    let shown = shown(path);
    let text = std::fs::read_to_string(path).map_err(|e| DataError::Corpus(format!("{shown}: {e}")))?;
    if text.trim_start().starts_with('[') {
        let values: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| DataError::Corpus(format!("{shown}: not a JSON array of objects: {e}")))?;
        return Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Row { place: format!("{shown}: row {}", i + 1), value })
            .collect());
    }
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let place = format!("{shown}:{}", index + 1);
        let value =
            serde_json::from_str(line).map_err(|e| DataError::Corpus(format!("{place}: not a JSON object: {e}")))?;
        rows.push(Row { place, value });
    }
    Ok(rows)
}

/// A CSV file without a header, with the standard quoting (a quoted field may hold commas,
/// newlines and doubled quotes); each row's place is the line it starts on.
fn read_csv(path: &Path) -> Result<Vec<Row>, DataError> {
    let shown = shown(path);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_path(path)
        .map_err(|e| DataError::Corpus(format!("{shown}: {e}")))?;
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| match e.position() {
            Some(position) => DataError::Corpus(format!("{shown}:{}: not CSV: {e}", position.line())),
            None => DataError::Corpus(format!("{shown}: not CSV: {e}")),
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let value = Value::Array(record.iter().map(|field| Value::String(field.to_string())).collect());
        rows.push(Row { place: format!("{shown}:{line}"), value });
    }
    Ok(rows)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    Err(DataError::Corpus(format!(
        "{}: reading Parquet needs the `parquet` feature of layernorm-scaling (or export the rows as JSON lines)",
        shown(path)
    )))
}

/// Every row of a Parquet file, as a JSON object (lists and structs nested as JSON).
#[cfg(feature = "parquet")]
fn read_parquet_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let shown = shown(path);
    let bad = |e: &dyn std::fmt::Display| DataError::Corpus(format!("{shown}: not a readable Parquet file: {e}"));
    let file = std::fs::File::open(path).map_err(|e| DataError::Corpus(format!("{shown}: {e}")))?;
    let reader = SerializedFileReader::new(file).map_err(|e| bad(&e))?;
    let mut rows = Vec::new();
    for (index, row) in reader.get_row_iter(None).map_err(|e| bad(&e))?.enumerate() {
        let row = row.map_err(|e| bad(&e))?;
        rows.push(Row { place: format!("{shown}: row {}", index + 1), value: parquet_row(&row) });
    }
    Ok(rows)
}

#[cfg(feature = "parquet")]
fn parquet_row(row: &parquet::record::Row) -> Value {
    Value::Object(row.get_column_iter().map(|(name, field)| (name.clone(), parquet_field(field))).collect())
}

/// The JSON value of a Parquet field: the scalar types datasets use, lists and structs; other
/// types (dates, decimals, maps, bytes) as their text.
#[cfg(feature = "parquet")]
fn parquet_field(field: &parquet::record::Field) -> Value {
    use parquet::record::Field;
    match field {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(n) => (*n).into(),
        Field::Short(n) => (*n).into(),
        Field::Int(n) => (*n).into(),
        Field::Long(n) => (*n).into(),
        Field::UByte(n) => (*n).into(),
        Field::UShort(n) => (*n).into(),
        Field::UInt(n) => (*n).into(),
        Field::ULong(n) => (*n).into(),
        Field::Float(x) => f64::from(*x).into(),
        Field::Double(x) => (*x).into(),
        Field::Str(s) => Value::String(s.clone()),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(parquet_field).collect()),
        Field::Group(row) => parquet_row(row),
        other => Value::String(other.to_string()),
    }
}
