#!/usr/bin/env python3
"""Parquet fixtures for the corpus reader's tests (tests/fixtures/parquet/), written by pyarrow.

    python3 -m venv /tmp/pq && /tmp/pq/bin/pip install pyarrow
    /tmp/pq/bin/python scripts/make_parquet_fixture.py [--out tests/fixtures/parquet]

Writes, with pyarrow (an implementation independent of the Rust `parquet` crate that reads them):

- fineweb.parquet: FineWeb's layout (the columns of HuggingFaceFW/fineweb's shards, in their
  order), snappy, pyarrow's defaults (dictionary encoding, data pages v1), three rows per row
  group; one `text` is null (FineWeb has none, but other datasets do);
- content-zstd.parquet: the text in a `content` column of type large_string beside an int64 `id`
  (The Stack's naming), zstd, data pages v2, no dictionary, two rows per row group;
- texts.json: for each file, the text column and its values, row by row (null for a null).

The files are a few KB and deterministic for a given pyarrow version (26.0.1 made the committed ones).
"""

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FINEWEB_TEXTS = [
    "How to make a sourdough starter.\nMix equal parts flour and water, then wait.",
    "The curse of depth: deeper layers of a pre-LN transformer learn less than the first ones.",
    None,
    "Grüße aus Köln — 你好，世界 — emoji 🌍 and a tab\there.",
    "A short one.",
    "Paragraph one.\n\nParagraph two, after a blank line, stays in the same document.",
    "Duplicate text.",
    "Duplicate text.",
]

CONTENT_TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n    println!(\"hello\");\n}\n",
    "",
    "SELECT text FROM documents WHERE id = 3;",
    None,
]


def fineweb_table() -> pa.Table:
    n = len(FINEWEB_TEXTS)
    return pa.table(
        {
            "text": pa.array(FINEWEB_TEXTS, pa.string()),
            "id": [f"<urn:uuid:00000000-0000-0000-0000-{i:012d}>" for i in range(n)],
            "dump": ["CC-MAIN-2024-10"] * n,
            "url": [f"https://example.com/page/{i}" for i in range(n)],
            "date": ["2024-02-21T12:00:00Z"] * n,
            "file_path": ["s3://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/0/warc/0.warc.gz"] * n,
            "language": ["en"] * n,
            "language_score": pa.array([0.9 + i / 100 for i in range(n)], pa.float64()),
            "token_count": pa.array([len((t or "").split()) for t in FINEWEB_TEXTS], pa.int64()),
        }
    )


def content_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(CONTENT_TEXTS)), pa.int64()),
            "content": pa.array(CONTENT_TEXTS, pa.large_string()),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/parquet"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)

    pq.write_table(fineweb_table(), out / "fineweb.parquet", row_group_size=3, compression="snappy")
    pq.write_table(
        content_table(),
        out / "content-zstd.parquet",
        row_group_size=2,
        compression="zstd",
        use_dictionary=False,
        data_page_version="2.0",
    )
    texts = {
        "fineweb.parquet": {"text_field": "text", "texts": FINEWEB_TEXTS},
        "content-zstd.parquet": {"text_field": "content", "texts": CONTENT_TEXTS},
    }
    (out / "texts.json").write_text(json.dumps(texts, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    # Read back with pyarrow: what the Rust test expects is what the files hold.
    for name, entry in texts.items():
        metadata = pq.ParquetFile(out / name).metadata
        read = pq.read_table(out / name).column(entry["text_field"]).to_pylist()
        assert read == entry["texts"], name
        print(f"{name}: {metadata.num_rows} rows in {metadata.num_row_groups} row groups, {(out / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
