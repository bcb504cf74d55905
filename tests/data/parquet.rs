//! Parquet corpora (the `parquet` feature): files written here with the `parquet` crate's own
//! writer, and fixtures written by pyarrow (`scripts/make_parquet_fixture.py`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use layernorm_scaling::data::{
    corpus_files, file_format, tokenize_corpus, CorpusProblem, CorpusSource, FileFormat, NotParquet, Spot, Tokenizer,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use super::{cached_texts, corpus_problem, documents_of, documents_with_field, problem_of};

/// The test files' columns: a nullable `text`, an `id` and a `title`.
const SCHEMA: &str =
    "message document { optional binary text (STRING); required int64 id; required binary title (STRING); }";

/// How a test file is written.
struct Layout {
    codec: Compression,
    dictionary: bool,
    version: WriterVersion,
    rows_per_group: usize,
}

/// Writes `texts` (with `id` = the row's index and `title` = "title {index}") as a Parquet file of
/// row groups of `layout.rows_per_group` rows, in pages of at most 100 rows.
fn write_parquet(path: &Path, texts: &[Option<String>], layout: &Layout) {
    let properties = WriterProperties::builder()
        .set_compression(layout.codec)
        .set_dictionary_enabled(layout.dictionary)
        .set_writer_version(layout.version)
        .set_write_batch_size(100)
        .set_data_page_row_count_limit(100)
        .build();
    let schema = Arc::new(parse_message_type(SCHEMA).unwrap());
    let mut writer =
        SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, properties.into()).unwrap();
    for (group, rows) in texts.chunks(layout.rows_per_group).enumerate() {
        let first = group * layout.rows_per_group;
        let values: Vec<ByteArray> = rows.iter().flatten().map(|text| ByteArray::from(text.as_str())).collect();
        let levels: Vec<i16> = rows.iter().map(|text| i16::from(text.is_some())).collect();
        let ids: Vec<i64> = (first..first + rows.len()).map(|id| id as i64).collect();
        let titles: Vec<ByteArray> = ids.iter().map(|id| ByteArray::from(format!("title {id}").as_str())).collect();
        let mut row_group = writer.next_row_group().unwrap();
        let mut column = row_group.next_column().unwrap().unwrap();
        column.typed::<ByteArrayType>().write_batch(&values, Some(&levels), None).unwrap();
        column.close().unwrap();
        let mut column = row_group.next_column().unwrap().unwrap();
        column.typed::<Int64Type>().write_batch(&ids, None, None).unwrap();
        column.close().unwrap();
        let mut column = row_group.next_column().unwrap().unwrap();
        column.typed::<ByteArrayType>().write_batch(&titles, None, None).unwrap();
        column.close().unwrap();
        row_group.close().unwrap();
    }
    writer.close().unwrap();
}

/// A Parquet file with the schema `schema` and no rows (what is wrong with it is in the schema).
fn write_schema_only(path: &Path, schema: &str) {
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let properties = WriterProperties::builder().build().into();
    SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, properties).unwrap().close().unwrap();
}

/// 2500 texts: every 7th is null, every 11th empty, the others distinct, some with newlines and
/// non-ASCII characters.
fn sample_texts() -> Vec<Option<String>> {
    (0..2500)
        .map(|i| match (i % 7, i % 11) {
            (3, _) => None,
            (_, 5) => Some(String::new()),
            _ if i % 2 == 0 => Some(format!("document {i}: Grüße, 你好\nsecond line")),
            _ => Some(format!("document {i}")),
        })
        .collect()
}

/// The problem of reading `path`'s column `field`, which must be about the file as a whole.
fn error_of(path: &Path, field: &str) -> CorpusProblem {
    problem_of(documents_with_field(path, field).unwrap_err(), path.file_name().unwrap().to_str().unwrap())
}

#[test]
fn parquet_files_read_exactly_their_non_null_texts_in_order_whatever_their_codec_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let texts = sample_texts();
    let expected: Vec<String> = texts.iter().flatten().cloned().collect();
    let layouts = [
        ("snappy.parquet", Compression::SNAPPY, true, WriterVersion::PARQUET_1_0, 1000),
        ("000_00000", Compression::ZSTD(ZstdLevel::default()), false, WriterVersion::PARQUET_2_0, 1500),
        ("gzip.txt", Compression::GZIP(Default::default()), true, WriterVersion::PARQUET_2_0, 2500),
        ("lz4.data", Compression::LZ4_RAW, false, WriterVersion::PARQUET_1_0, 700),
    ];
    for (name, codec, dictionary, version, rows_per_group) in layouts {
        let path = dir.path().join(name);
        write_parquet(&path, &texts, &Layout { codec, dictionary, version, rows_per_group });
        assert_eq!(file_format(&path).unwrap(), FileFormat::Parquet, "{name}");
        let docs = documents_of(&path).unwrap();
        assert_eq!(docs.len(), expected.len(), "{name}: one document per non-null text");
        assert!(docs == expected, "{name}: the documents are the texts, in order");
        // Another column is another corpus: `--text-field title`.
        let titles: Vec<String> = (0..texts.len()).map(|i| format!("title {i}")).collect();
        assert!(documents_with_field(&path, "title").unwrap() == titles, "{name}");
    }

    // Through the token cache: the documents are exactly the texts (an empty one adds nothing),
    // here from two files in order; another text field builds another cache.
    let files = vec![dir.path().join("snappy.parquet"), dir.path().join("000_00000")];
    let cache =
        tokenize_corpus(&CorpusSource::files(files.clone()), &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
    let non_empty: Vec<&String> = expected.iter().filter(|text| !text.is_empty()).collect();
    let twice: Vec<&String> = non_empty.iter().chain(&non_empty).copied().collect();
    assert!(cached_texts(&cache).iter().eq(twice), "the cache holds the texts, nothing else");
    let titles = CorpusSource::Files { paths: files, text_field: "title".into() };
    let titles = tokenize_corpus(&titles, &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
    assert_eq!(cached_texts(&titles)[..2], ["title 0", "title 1"]);
    assert_eq!(titles.n_docs(), 2 * texts.len());
    assert_ne!(cache.content_fingerprint(), titles.content_fingerprint());
}

#[test]
fn a_wrong_column_or_a_damaged_file_is_refused_saying_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard.parquet");
    let texts = sample_texts();
    let layout = Layout {
        codec: Compression::SNAPPY,
        dictionary: true,
        version: WriterVersion::PARQUET_1_0,
        rows_per_group: 1000,
    };
    write_parquet(&path, &texts, &layout);

    let no_column =
        |column: &str, columns: &str| CorpusProblem::NoColumn { column: column.into(), columns: columns.into() };
    assert_eq!(error_of(&path, "content"), no_column("content", "`text`, `id`, `title`"));
    let int64 = CorpusProblem::NotStringColumn { column: "id".into(), kind: "Parquet INT64 values".into() };
    assert_eq!(error_of(&path, "id"), int64);

    let odd = dir.path().join("odd.parquet");
    let holds = |name: &str, kind: &str| CorpusProblem::NotStringColumn { column: name.into(), kind: kind.into() };
    let nested = |name: &str, kind| CorpusProblem::NestedColumn { column: name.into(), kind };
    let cases = [
        ("optional binary blob;", holds("blob", "bytes (BYTE_ARRAY without a string annotation: binary data)")),
        ("optional int32 day (DATE);", holds("day", "Parquet INT32 values (DATE)")),
        ("optional group meta { optional binary text (STRING); }", nested("meta", "a struct")),
        (
            "optional group tags (LIST) { repeated group list { optional binary element (STRING); } }",
            nested("tags", "a list"),
        ),
        ("repeated binary words (STRING);", nested("words", "a repeated field, a list")),
    ];
    for (column, expected) in cases {
        write_schema_only(&odd, &format!("message document {{ {column} }}"));
        let name = match &expected {
            CorpusProblem::NotStringColumn { column, .. } | CorpusProblem::NestedColumn { column, .. } => column,
            _ => unreachable!(),
        };
        assert_eq!(error_of(&odd, name), expected);
    }
    // A nested column's leaves are not columns of their own.
    write_schema_only(&odd, "message document { optional group meta { optional binary text (STRING); } }");
    assert_eq!(error_of(&odd, "text"), no_column("text", "`meta`"));

    // An interrupted download: cut anywhere, even after the first 4 bytes, it is still Parquet
    // (by its magic) and refused as damaged, never read as text.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.parquet");
    for keep in [bytes.len() - 1, bytes.len() / 2, 4] {
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        assert_eq!(file_format(&cut).unwrap(), FileFormat::Parquet);
        let problem = problem_of(documents_of(&cut).unwrap_err(), "cut.parquet");
        assert!(matches!(problem, CorpusProblem::DamagedParquet { .. }), "{problem}");
    }
    // Damaged pages (the footer intact): an error naming the row group, no panic.
    let mut damaged = bytes.clone();
    damaged[4..bytes.len() / 2].iter_mut().for_each(|byte| *byte = !*byte);
    std::fs::write(&cut, &damaged).unwrap();
    let (name, at, problem) = corpus_problem(documents_of(&cut).unwrap_err());
    assert_eq!((name.as_str(), at), ("cut.parquet", Some(Spot::RowGroup { group: 1, of: 3 })));
    assert!(matches!(problem, CorpusProblem::DamagedParquet { .. }), "{problem}");

    // A `.parquet` name without Parquet's magic: a Git LFS pointer, or something else.
    let pointer = dir.path().join("000_00000.parquet");
    std::fs::write(&pointer, "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 2048\n").unwrap();
    let problem = problem_of(file_format(&pointer).unwrap_err(), "000_00000.parquet");
    assert_eq!(problem, CorpusProblem::NotParquet { why: NotParquet::LfsPointer });
    std::fs::write(&pointer, "").unwrap();
    let problem = problem_of(documents_of(&pointer).unwrap_err(), "000_00000.parquet");
    assert_eq!(problem, CorpusProblem::NotParquet { why: NotParquet::Empty });
}

/// The pyarrow fixtures and their texts, row by row (`None` for a null).
fn pyarrow_fixtures() -> Vec<(PathBuf, String, Vec<Option<String>>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet");
    let texts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("texts.json")).unwrap()).unwrap();
    let texts = texts.as_object().unwrap();
    assert_eq!(texts.len(), 2);
    texts
        .iter()
        .map(|(name, entry)| {
            let field = entry["text_field"].as_str().unwrap().to_string();
            let rows = entry["texts"].as_array().unwrap().iter().map(|text| text.as_str().map(String::from)).collect();
            (dir.join(name), field, rows)
        })
        .collect()
}

#[test]
fn pyarrow_files_read_exactly_the_texts_the_script_wrote() {
    for (path, field, rows) in pyarrow_fixtures() {
        let expected: Vec<String> = rows.iter().flatten().cloned().collect();
        assert!(rows.iter().any(Option::is_none), "{}: the fixture has a null to skip", path.display());
        assert_eq!(documents_with_field(&path, &field).unwrap(), expected, "{}", path.display());
    }
}

#[test]
fn a_downloaded_folder_reads_its_parquet_shards_and_not_the_hidden_files() {
    let (fixture, _, rows) = pyarrow_fixtures().into_iter().find(|(_, field, _)| field == "text").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // What `huggingface-cli download HuggingFaceFW/fineweb --include "sample/10BT/000_00000.parquet"` leaves.
    let root = dir.path().join("fineweb");
    let shard = root.join("sample/10BT/000_00000.parquet");
    let metadata = root.join(".cache/huggingface/download/sample/10BT");
    std::fs::create_dir_all(shard.parent().unwrap()).unwrap();
    std::fs::create_dir_all(&metadata).unwrap();
    std::fs::copy(&fixture, &shard).unwrap();
    std::fs::copy(&fixture, metadata.join("000_00000.parquet")).unwrap();
    std::fs::write(metadata.join("000_00000.parquet.metadata"), "0123\n").unwrap();
    std::fs::copy(&fixture, root.join(".hidden.parquet")).unwrap();
    assert_eq!(corpus_files(std::slice::from_ref(&root)).unwrap().files, [shard]);

    let cache = tokenize_corpus(&CorpusSource::files(vec![root]), &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
    let expected: Vec<String> = rows.into_iter().flatten().filter(|text| !text.is_empty()).collect();
    assert_eq!(cached_texts(&cache), expected);
}
