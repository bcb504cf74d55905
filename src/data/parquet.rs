//! Parquet corpora (FineWeb, FineWeb-Edu, SlimPajama, the Hub's converted datasets): one document
//! per row, its text in one top-level string column (`text`, or the one `--text-field` names).
//!
//! Read with arrow-rs's `parquet` crate through its typed column reader (no arrow): only the text
//! column is decoded, one page at a time, row group after row group, so a shard is never held in
//! memory whole. A null text is skipped; an empty one is passed on, as an empty JSON-lines text is
//! (the token cache keeps no empty document).

use std::fs::File;
use std::path::Path;

use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::column::reader::ColumnReader;
use parquet::errors::ParquetError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::{SchemaDescriptor, Type};

use crate::data::json_lines::show_names;
use crate::data::DataError;

/// Rows decoded at a time (their texts are held until each has been passed on).
const BATCH_ROWS: usize = 1024;

/// Calls `each` with the text of every row of the Parquet file `file` whose `column` is not null,
/// in order. `shown` names the file in errors.
pub fn read_parquet(
    file: &Path,
    shown: &str,
    column: &str,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let opened = File::open(file).map_err(|e| DataError::Corpus(format!("{shown}: {e}")))?;
    let reader = SerializedFileReader::new(opened).map_err(|e| damaged(shown, "", &e))?;
    let index = text_column(reader.metadata().file_metadata().schema_descr(), shown, column)?;
    let groups = reader.num_row_groups();
    let (mut texts, mut levels) = (Vec::new(), Vec::new());
    for group in 0..groups {
        let place = format!(", row group {} of {groups}", group + 1);
        let column_reader = reader
            .get_row_group(group)
            .and_then(|row_group| row_group.get_column_reader(index))
            .map_err(|e| damaged(shown, &place, &e))?;
        let ColumnReader::ByteArrayColumnReader(mut values) = column_reader else {
            return Err(DataError::Corpus(format!("{shown}{place}: the column `{column}` is not a string column")));
        };
        loop {
            texts.clear();
            levels.clear();
            // `texts` receives the non-null values only: a null row has a level and no value.
            let (rows, _, _) = values
                .read_records(BATCH_ROWS, Some(&mut levels), None, &mut texts)
                .map_err(|e| damaged(shown, &place, &e))?;
            if rows == 0 {
                break;
            }
            for text in &texts {
                let text = text.as_utf8().map_err(|e| {
                    DataError::Corpus(format!(
                        "{shown}{place}: a value of the string column `{column}` is not UTF-8 ({e})"
                    ))
                })?;
                each(text)?;
            }
        }
    }
    Ok(())
}

/// The leaf index of the top-level string column `column`, or an error saying what the file has.
fn text_column(schema: &SchemaDescriptor, shown: &str, column: &str) -> Result<usize, DataError> {
    let fields = schema.root_schema().get_fields();
    let choose = "choose the column that holds the text with --text-field";
    let Some(field) = fields.iter().find(|field| field.name() == column) else {
        let names: Vec<String> = fields.iter().map(|field| field.name().to_string()).collect();
        return Err(DataError::Corpus(format!(
            "{shown}: the Parquet file has no column `{column}` (its columns: {}); {choose}",
            show_names(&names)
        )));
    };
    let info = field.get_basic_info();
    if field.is_group() || info.repetition() == Repetition::REPEATED {
        return Err(DataError::Corpus(format!(
            "{shown}: the column `{column}` is nested ({}), not a string column; only top-level string columns are \
             read: {choose}",
            nested_kind(field)
        )));
    }
    let string =
        matches!(info.logical_type_ref(), Some(LogicalType::String)) || info.converted_type() == ConvertedType::UTF8;
    if field.get_physical_type() != PhysicalType::BYTE_ARRAY || !string {
        return Err(DataError::Corpus(format!(
            "{shown}: the column `{column}` holds {}, not strings; {choose}",
            primitive_kind(field)
        )));
    }
    schema.columns().iter().position(|leaf| leaf.path().parts() == [column]).ok_or_else(|| {
        DataError::Corpus(format!(
            "{shown}: the column `{column}` is in the schema but has no data; the file is damaged"
        ))
    })
}

/// What a nested column is, for messages.
fn nested_kind(field: &Type) -> &'static str {
    let info = field.get_basic_info();
    match (info.logical_type_ref(), info.converted_type()) {
        _ if field.is_primitive() => "a repeated field, a list",
        (Some(LogicalType::List), _) | (_, ConvertedType::LIST) => "a list",
        (Some(LogicalType::Map), _) | (_, ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE) => "a map",
        _ => "a struct",
    }
}

/// What a primitive column holds, for messages: its physical type and annotation.
fn primitive_kind(field: &Type) -> String {
    let physical = field.get_physical_type();
    match field.get_basic_info().converted_type() {
        ConvertedType::NONE if physical == PhysicalType::BYTE_ARRAY => {
            "bytes (BYTE_ARRAY without a string annotation: binary data)".to_string()
        }
        ConvertedType::NONE => format!("Parquet {physical} values"),
        annotation => format!("Parquet {physical} values ({annotation})"),
    }
}

/// A file the reader cannot decode (`place` says where in it), with what to do.
fn damaged(shown: &str, place: &str, error: &ParquetError) -> DataError {
    DataError::Corpus(format!(
        "{shown}{place}: not a readable Parquet file ({error}); it is truncated or damaged (an interrupted \
         download?): download it again"
    ))
}
