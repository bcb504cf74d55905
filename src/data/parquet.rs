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
use crate::data::{CorpusProblem, DataError, Place, Spot};

/// Rows decoded at a time (their texts are held until each has been passed on).
const BATCH_ROWS: usize = 1024;

/// Calls `each` with the text of every row of the Parquet file `file` whose `column` is not null,
/// in order.
pub fn read_parquet(
    file: &Path,
    column: &str,
    each: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let opened = File::open(file).map_err(|e| DataError::unreadable(file, &e))?;
    let reader = SerializedFileReader::new(opened).map_err(|e| damaged(file.into(), &e))?;
    let problem = |problem| DataError::corpus(file, problem);
    let index = text_column(reader.metadata().file_metadata().schema_descr(), column).map_err(problem)?;
    let groups = reader.num_row_groups();
    let (mut texts, mut levels) = (Vec::new(), Vec::new());
    for group in 0..groups {
        let place = Place::at(file, Spot::RowGroup { group: group + 1, of: groups });
        let column_reader = reader
            .get_row_group(group)
            .and_then(|row_group| row_group.get_column_reader(index))
            .map_err(|e| damaged(place.clone(), &e))?;
        let ColumnReader::ByteArrayColumnReader(mut values) = column_reader else {
            let kind = "another physical type".to_string();
            return Err(DataError::corpus(place, CorpusProblem::NotStringColumn { column: column.into(), kind }));
        };
        loop {
            texts.clear();
            levels.clear();
            // `texts` receives the non-null values only: a null row has a level and no value.
            let (rows, _, _) = values
                .read_records(BATCH_ROWS, Some(&mut levels), None, &mut texts)
                .map_err(|e| damaged(place.clone(), &e))?;
            if rows == 0 {
                break;
            }
            for text in &texts {
                let text = text.as_utf8().map_err(|e| {
                    let problem = CorpusProblem::ValueNotUtf8 { column: column.into(), error: e.to_string() };
                    DataError::corpus(place.clone(), problem)
                })?;
                each(text)?;
            }
        }
    }
    Ok(())
}

/// The leaf index of the top-level string column `column`, or what the file has instead.
fn text_column(schema: &SchemaDescriptor, column: &str) -> Result<usize, CorpusProblem> {
    let fields = schema.root_schema().get_fields();
    let Some(field) = fields.iter().find(|field| field.name() == column) else {
        let names: Vec<String> = fields.iter().map(|field| field.name().to_string()).collect();
        return Err(CorpusProblem::NoColumn { column: column.into(), columns: show_names(&names) });
    };
    let info = field.get_basic_info();
    if field.is_group() || info.repetition() == Repetition::REPEATED {
        return Err(CorpusProblem::NestedColumn { column: column.into(), kind: nested_kind(field) });
    }
    let string =
        matches!(info.logical_type_ref(), Some(LogicalType::String)) || info.converted_type() == ConvertedType::UTF8;
    if field.get_physical_type() != PhysicalType::BYTE_ARRAY || !string {
        return Err(CorpusProblem::NotStringColumn { column: column.into(), kind: primitive_kind(field) });
    }
    schema
        .columns()
        .iter()
        .position(|leaf| leaf.path().parts() == [column])
        .ok_or_else(|| CorpusProblem::ColumnWithoutData { column: column.into() })
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

/// A file the reader cannot decode at `place`.
fn damaged(place: Place, error: &ParquetError) -> DataError {
    DataError::corpus(place, CorpusProblem::DamagedParquet { error: error.to_string() })
}
