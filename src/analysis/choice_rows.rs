//! The rows of a multiple-choice file, each with the place it came from (`file:line`, or
//! `file: row N` where a row has no line of its own): JSON lines, a JSON array, a Parquet file
//! (the Hub's exports, with the `parquet` feature) or a CSV file without a header (MMLU's own).

use std::path::Path;

use serde_json::Value;

use super::choice_file_error::{ChoiceFileError, ChoiceProblem};
use crate::data::{Place, Spot};

/// One row of a file: its fields and where it is, for messages.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// The file, and the line or row (1-based).
    pub place: Place,
    /// A JSON object for JSON and Parquet rows; a list of strings for CSV rows.
    pub value: Value,
}

/// Every row of `path`, read by its extension: `.csv` (no header: each row a list of strings),
/// `.parquet`, else JSON (a whole-file array when it starts with `[`, else one object per line).
pub(crate) fn read_rows(path: &Path) -> Result<Vec<Row>, ChoiceFileError> {
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

fn read_json(path: &Path) -> Result<Vec<Row>, ChoiceFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(path, &e))?;
    if text.trim_start().starts_with('[') {
        let values: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| ChoiceFileError::new(path, ChoiceProblem::NotJsonArray(e.to_string())))?;
        return Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Row { place: Place::at(path, Spot::Row(i + 1)), value })
            .collect());
    }
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let place = Place::at(path, Spot::Line(index + 1));
        let value = serde_json::from_str(line)
            .map_err(|e| ChoiceFileError::new(place.clone(), ChoiceProblem::NotJsonObject(e.to_string())))?;
        rows.push(Row { place, value });
    }
    Ok(rows)
}

/// A file that cannot be read.
fn unreadable(path: &Path, error: &std::io::Error) -> ChoiceFileError {
    ChoiceFileError::new(path, ChoiceProblem::Unreadable(error.to_string()))
}

/// A CSV file without a header, with the standard quoting (a quoted field may hold commas,
/// newlines and doubled quotes); each row's place is the line it starts on.
fn read_csv(path: &Path) -> Result<Vec<Row>, ChoiceFileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_path(path)
        .map_err(|e| ChoiceFileError::new(path, ChoiceProblem::Unreadable(e.to_string())))?;
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let place = Place { path: path.into(), at: e.position().map(|p| Spot::Line(p.line() as usize)) };
            ChoiceFileError::new(place, ChoiceProblem::NotCsv(e.to_string()))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let value = Value::Array(record.iter().map(|field| Value::String(field.to_string())).collect());
        rows.push(Row { place: Place::at(path, Spot::Line(line as usize)), value });
    }
    Ok(rows)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet_rows(path: &Path) -> Result<Vec<Row>, ChoiceFileError> {
    Err(ChoiceFileError::new(path, ChoiceProblem::NoParquetFeature))
}

/// Every row of a Parquet file, as a JSON object (lists and structs nested as JSON).
#[cfg(feature = "parquet")]
fn read_parquet_rows(path: &Path) -> Result<Vec<Row>, ChoiceFileError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let bad = |e: &dyn std::fmt::Display| ChoiceFileError::new(path, ChoiceProblem::DamagedParquet(e.to_string()));
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, &e))?;
    let reader = SerializedFileReader::new(file).map_err(|e| bad(&e))?;
    let mut rows = Vec::new();
    for (index, row) in reader.get_row_iter(None).map_err(|e| bad(&e))?.enumerate() {
        let row = row.map_err(|e| bad(&e))?;
        rows.push(Row { place: Place::at(path, Spot::Row(index + 1)), value: parquet_row(&row) });
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
