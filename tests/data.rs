//! Data: tokenizers, corpus readers, the token cache, packing, the split, the built-in corpus.

mod common;
use common::edited;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use common::cpu;
use layernorm_scaling::data::{
    builtin_documents, corpus_files, file_format, read_documents, split_documents, tokenize_corpus,
    train_valid_datasets, CacheProblem, CorpusProblem, CorpusSource, DataError, FileFormat, JsonHint, LmBatcher, Place,
    SequenceDataset, SequenceMode, SplitProblem, Spot, TokenCache, TokenFile, TokenLayout, TokenLayoutProblem,
    TokenWindow, Tokenizer, TokenizerProblem, WholeCorpusProblem, LLMC_MAGIC,
};
use layernorm_scaling::io::SumError;
use layernorm_scaling::train::{DataSettings, OutputSettings};

/// Parquet corpora: the `parquet` feature.
#[cfg(feature = "parquet")]
#[path = "data/parquet.rs"]
mod parquet;

fn documents_of(path: &std::path::Path) -> Result<Vec<String>, DataError> {
    documents_with_field(path, "text")
}

/// The file name and spot of a corpus error, and its problem: fails on any other error.
fn corpus_problem(error: DataError) -> (String, Option<Spot>, CorpusProblem) {
    match error {
        DataError::Corpus { place, problem } => {
            (place.path.file_name().unwrap().to_string_lossy().into_owned(), place.at, problem)
        }
        other => panic!("not a corpus problem: {other}"),
    }
}

/// The problem of a corpus error at `name` (with no spot in it): fails on any other error.
fn problem_of(error: DataError, name: &str) -> CorpusProblem {
    let (file, at, problem) = corpus_problem(error);
    assert_eq!((file.as_str(), at), (name, None), "{problem}");
    problem
}

fn documents_with_field(path: &std::path::Path, field: &str) -> Result<Vec<String>, DataError> {
    let mut docs = Vec::new();
    read_documents(path, field, &mut |text| {
        docs.push(text.to_string());
        Ok(())
    })?;
    Ok(docs)
}

#[test]
fn byte_tokenizer_round_trips_utf8_and_reserves_nul_for_end_of_text() {
    let tokenizer = Tokenizer::from_spec("byte").unwrap();
    let text = "Hello, world! Grüße — 你好";
    let ids = tokenizer.encode(text).unwrap();
    assert_eq!(ids.len(), text.len());
    assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    assert_eq!((tokenizer.vocab_size(), tokenizer.eot()), (256, 0));
    assert_eq!(tokenizer.encode("a\0b").unwrap(), vec![97, 98]);
}

#[test]
fn a_tokenizer_json_trained_here_loads_and_round_trips() {
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{AddedToken, TokenizerBuilder};

    let dir = tempfile::tempdir().unwrap();
    let text_path = dir.path().join("train.txt");
    std::fs::write(&text_path, builtin_documents(300, 1).join("\n")).unwrap();
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(400)
        .min_frequency(2)
        .special_tokens(vec![AddedToken::from("</s>", true)])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut trained = TokenizerBuilder::<
        BPE,
        tokenizers::NormalizerWrapper,
        ByteLevel,
        tokenizers::PostProcessorWrapper,
        ByteLevel,
    >::new()
    .with_model(BPE::default())
    .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
    .with_decoder(Some(ByteLevel::default()))
    .build()
    .unwrap();
    trained.train_from_files(&mut trainer, vec![text_path.display().to_string()]).unwrap();
    let json_path = dir.path().join("tokenizer.json");
    trained.save(&json_path, false).unwrap();

    let tokenizer = Tokenizer::from_spec(json_path.to_str().unwrap()).unwrap();
    assert!(tokenizer.vocab_size() > 256 && tokenizer.vocab_size() <= 400, "{}", tokenizer.vocab_size());

    // A corpus is encoded in batches: the cache holds what encoding each document alone gives.
    let docs = builtin_documents(50, 7);
    let cache = tokenize_corpus(&CorpusSource::Builtin { n_docs: 50, seed: 7 }, &tokenizer, dir.path()).unwrap();
    assert_eq!(cache.n_docs(), docs.len());
    for (doc, text) in docs.iter().enumerate() {
        let (start, end) = cache.doc_span(doc);
        let mut cached = vec![0u32; (end - start) as usize];
        cache.read(start, &mut cached);
        let (eot, text_tokens) = cached.split_last().unwrap();
        assert_eq!(text_tokens, tokenizer.encode(text).unwrap(), "document {doc}");
        assert_eq!(*eot, tokenizer.eot());
    }
    assert_eq!(tokenizer.eot(), 0, "</s> is the first special token");
    let sentence = "the old dogs that the cat sees follow a red ship.";
    let ids = tokenizer.encode(sentence).unwrap();
    assert!(ids.len() < sentence.len() / 2, "BPE merges: {} ids", ids.len());
    assert_eq!(tokenizer.decode(&ids).unwrap(), sentence);

    let err = Tokenizer::from_spec("missing/tokenizer.json").unwrap_err();
    assert!(matches!(err, DataError::Tokenizer(TokenizerProblem::NotFound { .. })), "{err}");
    std::fs::write(dir.path().join("bad.json"), "{}").unwrap();
    let err = Tokenizer::from_file(dir.path().join("bad.json")).unwrap_err();
    assert!(matches!(err, DataError::Tokenizer(TokenizerProblem::Invalid { .. })), "{err}");
}

#[test]
fn jsonl_gz_text_and_folders_are_read_as_documents() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("c4-train.00000-of-01024.jsonl.gz");
    let mut encoder =
        flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::default());
    writeln!(encoder, r#"{{"text": "first document\nwith two lines", "url": "x"}}"#).unwrap();
    writeln!(encoder).unwrap();
    writeln!(encoder, r#"{{"text": "second"}}"#).unwrap();
    encoder.finish().unwrap();
    assert_eq!(documents_of(&gz).unwrap(), vec!["first document\nwith two lines", "second"]);

    let txt = dir.path().join("notes.txt");
    std::fs::write(&txt, "para one\nline two\n\n\npara two\n").unwrap();
    assert_eq!(documents_of(&txt).unwrap(), vec!["para one\nline two", "para two"]);

    let bad = dir.path().join("sub/bad.jsonl");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "{\"text\": \"ok\"}\n{\"content\": \"no text\"}\n").unwrap();
    let (file, at, problem) = corpus_problem(documents_of(&bad).unwrap_err());
    assert_eq!((file.as_str(), at), ("bad.jsonl", Some(Spot::Line(2))));
    assert!(matches!(problem, CorpusProblem::NoField { ref field, .. } if field == "text"), "{problem}");
    std::fs::write(&bad, "{\"text\": \"ok\"}\nnot json\n").unwrap();
    let (_, at, problem) = corpus_problem(documents_of(&bad).unwrap_err());
    assert!(at == Some(Spot::Line(2)) && matches!(problem, CorpusProblem::NotJsonLine { hint: None, .. }), "{problem}");

    let files = corpus_files(&[dir.path().to_path_buf()]).unwrap().files;
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["c4-train.00000-of-01024.jsonl.gz", "notes.txt", "bad.jsonl"]);
    let err = corpus_files(&[PathBuf::from("/nonexistent/corpus")]).unwrap_err();
    assert_eq!(problem_of(err, "corpus"), CorpusProblem::NotFound);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let problem = problem_of(corpus_files(&[empty]).unwrap_err(), "empty");
    assert!(
        matches!(problem, CorpusProblem::EmptyFolder { ref endings } if endings.contains(".jsonl.gz")),
        "{problem}"
    );
}

fn build_cache(dir: &std::path::Path, key: &str, docs: &[&[u32]]) -> TokenCache {
    TokenCache::open_or_build(dir, key, 0, |writer| docs.iter().try_for_each(|doc| writer.push(doc))).unwrap()
}

#[test]
fn packing_covers_the_stream_with_windows_that_overlap_by_one_token() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(build_cache(&dir.path().join("c"), "k", &[&[1, 2, 3], &[4, 5], &[6, 7, 8, 9]]));
    assert_eq!((cache.n_docs(), cache.n_tokens()), (3, 12));
    // Stream: 1 2 3 0 4 5 0 6 7 8 9 0
    let all = SequenceDataset::new(cache.clone(), &[0, 1, 2], 4);
    assert_eq!(all.len(), 2);
    assert_eq!(all.get(0).unwrap().tokens, vec![1, 2, 3, 0, 4]);
    assert_eq!(all.get(1).unwrap().tokens, vec![4, 5, 0, 6, 7]);
    // Documents 0 and 2 only: 1 2 3 0 6 7 8 9 0
    let some = SequenceDataset::new(cache, &[0, 2], 4);
    let windows: Vec<Vec<u32>> = (0..some.len()).map(|i| some.get(i).unwrap().tokens).collect();
    assert_eq!(windows, vec![vec![1, 2, 3, 0, 6], vec![6, 7, 8, 9, 0]]);

    let batch = LmBatcher.batch(vec![TokenWindow::full(vec![1, 2, 3]), TokenWindow::full(vec![4, 5, 6])], &cpu());
    assert_eq!(batch.inputs.to_data().convert::<i64>().try_to_vec::<i64>().unwrap(), vec![1, 2, 4, 5]);
    assert_eq!(batch.targets.to_data().convert::<i64>().try_to_vec::<i64>().unwrap(), vec![2, 3, 5, 6]);
}

#[test]
fn truncation_makes_one_padded_sequence_per_document_and_counts_real_targets_only() {
    let dir = tempfile::tempdir().unwrap();
    // Documents (each with its end-of-text 0): [1 2 3 0], [4 0], [5 6 7 8 9 10 0], [0] (nothing to predict).
    let cache = Arc::new(build_cache(&dir.path().join("c"), "k", &[&[1, 2, 3], &[4], &[5, 6, 7, 8, 9, 10], &[]]));
    let truncated = SequenceDataset::with_mode(cache.clone(), &[0, 1, 2, 3], 4, SequenceMode::Truncate);
    assert_eq!(truncated.len(), 3, "the document of an end-of-text token alone is left out");
    let windows: Vec<TokenWindow> = (0..3).map(|i| truncated.get(i).unwrap()).collect();
    assert_eq!(windows[0], TokenWindow { tokens: vec![1, 2, 3, 0, 0], real: 4 });
    assert_eq!(windows[1], TokenWindow { tokens: vec![4, 0, 0, 0, 0], real: 2 });
    assert_eq!(windows[2], TokenWindow { tokens: vec![5, 6, 7, 8, 9], real: 5 }, "cut after seq_len + 1 tokens");
    // Targets: 3 + 1 + 4; tokens read: 4 + 2 + 5; tokens past the cut: 10 and the end-of-text.
    assert_eq!((truncated.n_targets(), truncated.n_tokens(), truncated.truncated_tokens()), (8, 11, 2));
    let packed = SequenceDataset::new(cache.clone(), &[0, 1, 2], 4);
    assert_eq!((packed.n_targets(), packed.truncated_tokens()), (packed.len() as u64 * 4, 0));

    let batch = LmBatcher.batch(windows, &cpu());
    let ints =
        |t: burn::tensor::Tensor<1, burn::tensor::Int>| t.to_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert_eq!(ints(batch.targets.clone().reshape([12])), vec![2, 3, 0, 0, 0, 0, 0, 0, 6, 7, 8, 9]);
    // Row 0 predicts 2 3 0, row 1 predicts 0, row 2 predicts 6 7 8 9; the padding is not counted.
    assert_eq!(ints(batch.counted.unwrap()), vec![0, 1, 2, 4, 8, 9, 10, 11]);
    assert_eq!(batch.n_targets, 8);
    let full = LmBatcher.batch(vec![TokenWindow::full(vec![1, 2, 3])], &cpu());
    assert!(full.counted.is_none() && full.n_targets == 2);

    // A fixed validation subset: the first sequences holding the asked-for targets.
    let subset = |tokens| {
        SequenceDataset::with_mode(cache.clone(), &[0, 1, 2], 4, SequenceMode::Truncate).holding_targets(tokens)
    };
    assert_eq!(subset(3).unwrap().len(), 1);
    assert_eq!(subset(4).unwrap().len(), 2);
    assert_eq!((subset(5).unwrap().len(), subset(8).unwrap().n_targets()), (3, 8));
    let err = subset(9).unwrap_err();
    let expected = SplitProblem::TooFewValidTokens { asked: 9, available: 8, sequences: 3, seq_len: 4 };
    assert_eq!(err, DataError::Split(expected));
    let packed = SequenceDataset::new(cache, &[0, 1, 2], 4).holding_targets(5).unwrap();
    assert_eq!((packed.len(), packed.n_targets()), (2, 8));
}

#[test]
fn the_token_cache_is_reused_rebuilt_on_change_and_never_left_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    build_cache(&path, "v1", &[&[1, 2], &[3]]);
    let mut called = false;
    let reopened = TokenCache::open_or_build(&path, "v1", 0, |_| {
        called = true;
        Ok(())
    })
    .unwrap();
    assert!(!called, "same key: the cache is reused");
    assert_eq!(reopened.n_tokens(), 5);
    let rebuilt = build_cache(&path, "v2", &[&[7, 7, 7]]);
    assert_eq!((rebuilt.meta().key.as_str(), rebuilt.n_tokens()), ("v2", 4));

    let failed = TokenCache::open_or_build(&dir.path().join("other"), "k", 0, |writer| {
        writer.push(&[1, 2, 3])?;
        Err(DataError::Whole(WholeCorpusProblem::ReaderStopped("interrupted")))
    });
    assert!(failed.is_err());
    let mut leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    leftovers.sort();
    let names = [".cache.lock", ".other.lock", "cache"].map(std::ffi::OsString::from);
    assert_eq!(leftovers, names, "no partial cache remains (the builds' lock files do)");
    let empty = TokenCache::open_or_build(&dir.path().join("empty"), "k", 0, |_| Ok(()));
    assert_eq!(empty.unwrap_err(), DataError::Whole(WholeCorpusProblem::NoText));

    // A build killed mid-way (its process gone) leaves a folder the next build removes; a build of
    // a process still running (this one's parent, say) is left alone.
    if std::path::Path::new("/proc/self").exists() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.path().join(format!(".cache.building{dead}"));
        let running = dir.path().join(format!(".cache.building{}", std::os::unix::process::parent_id()));
        for leftover in [&stale, &running] {
            std::fs::create_dir_all(leftover).unwrap();
            std::fs::write(leftover.join("tokens.bin"), [0u8; 64]).unwrap();
        }
        build_cache(&path, "v3", &[&[4, 5]]);
        assert!(!stale.exists(), "the killed build's folder is removed");
        assert!(running.exists(), "a running build's folder is kept");
    }
}

#[test]
fn two_builds_of_one_cache_at_once_tokenise_it_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let fills = AtomicUsize::new(0);
    let build = || {
        TokenCache::open_or_build(&path, "k", 0, |writer| {
            fills.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(300));
            writer.push(&[1, 2, 3])
        })
        .unwrap()
        .n_tokens()
    };
    let (a, b) = std::thread::scope(|scope| {
        let first = scope.spawn(build);
        let second = scope.spawn(build);
        (first.join().unwrap(), second.join().unwrap())
    });
    assert_eq!((a, b), (4, 4));
    assert_eq!(fills.load(Ordering::SeqCst), 1, "the second waited and opened the first one's cache");
}

#[test]
fn the_split_is_by_document_stable_and_never_empty() {
    let (train, valid) = split_documents(10_000, 0.1, 7).unwrap();
    assert_eq!(train.len() + valid.len(), 10_000);
    assert!((800..1200).contains(&valid.len()), "{}", valid.len());
    assert!(train.iter().all(|d| !valid.contains(d)));
    assert_eq!(split_documents(10_000, 0.1, 7).unwrap().1, valid, "deterministic");
    assert_ne!(split_documents(10_000, 0.1, 8).unwrap().1, valid, "seeded");
    let (train, valid) = split_documents(2, 0.01, 0).unwrap();
    assert_eq!((train.len(), valid.len()), (1, 1));
    assert_eq!(split_documents(1, 0.1, 0).unwrap_err(), DataError::Split(SplitProblem::TooFewDocuments(1)));
    assert_eq!(split_documents(10, 0.0, 0).unwrap_err(), DataError::Split(SplitProblem::BadFraction(0.0)));
}

#[test]
fn the_builtin_corpus_is_deterministic_and_correct() {
    let docs = builtin_documents(600, 3);
    assert_eq!(docs, builtin_documents(600, 3));
    assert_ne!(docs, builtin_documents(600, 4));
    let lines: Vec<&str> = docs.iter().flat_map(|d| d.lines()).collect();
    let sums: Vec<&&str> = lines.iter().filter(|l| l.contains('=')).collect();
    let brackets: Vec<&&str> = lines.iter().filter(|l| l.starts_with("brackets: ")).collect();
    let sentences = lines.len() - sums.len() - brackets.len();
    assert!(sums.len() > 100 && brackets.len() > 100 && sentences > 100);
    for line in sums {
        let (lhs, answer) = line.split_once('=').unwrap();
        let (a, b) = lhs.split_once('+').unwrap();
        assert_eq!(a.parse::<u64>().unwrap() + b.parse::<u64>().unwrap(), answer.parse::<u64>().unwrap());
    }
    for line in brackets {
        let mut stack = Vec::new();
        for c in line["brackets: ".len()..].chars() {
            match c {
                '(' | '[' | '{' | '<' => stack.push(c),
                _ => {
                    let open = stack.pop().expect("balanced");
                    assert_eq!(
                        (open, c).0,
                        match c {
                            ')' => '(',
                            ']' => '[',
                            '}' => '{',
                            _ => '<',
                        }
                    );
                }
            }
        }
        assert!(stack.is_empty(), "{line}");
    }
}

#[test]
fn corpora_tokenise_into_train_and_validation_sets() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = Tokenizer::Byte;
    let source = CorpusSource::Builtin { n_docs: 400, seed: 1 };
    let cache = Arc::new(tokenize_corpus(&source, &tokenizer, dir.path()).unwrap());
    let (train, valid) = train_valid_datasets(cache.clone(), 64, 0.1, 0, SequenceMode::Pack).unwrap();
    assert!(train.len() > 5 * valid.len() && !valid.is_empty());
    assert_eq!(train.n_tokens() + valid.n_tokens(), cache.n_tokens());
    let err = train_valid_datasets(cache.clone(), 100_000, 0.1, 0, SequenceMode::Pack).unwrap_err();
    assert!(matches!(err, DataError::Split(SplitProblem::SplitTooShort { seq_len: 100_000, .. })), "{err}");

    // The advice fits the split that is short: the fraction moves documents from one to the other.
    let short = |fraction: f64, split: &str| {
        let (train, valid) = train_valid_datasets(cache.clone(), 16, fraction, 0, SequenceMode::Pack).unwrap();
        let tokens = if split == "training" { train.n_tokens() } else { valid.n_tokens() };
        match train_valid_datasets(cache.clone(), tokens as usize, fraction, 0, SequenceMode::Pack).unwrap_err() {
            DataError::Split(SplitProblem::SplitTooShort { split, valid_fraction, .. }) => (split, valid_fraction),
            other => panic!("{other}"),
        }
    };
    assert_eq!(short(0.1, "validation"), ("validation", 0.1));
    assert_eq!(short(0.9, "training"), ("training", 0.9));
    // The advice is said once, in the variant's message: a larger fraction for a short validation
    // split, a smaller one for a short training split.
    for (split, valid_fraction, advice) in [("validation", 0.1, "a larger"), ("training", 0.9, "a smaller")] {
        let err = DataError::Split(SplitProblem::SplitTooShort { split, tokens: 9, seq_len: 16, valid_fraction });
        let expected = format!("{advice} --valid-fraction (now {valid_fraction})");
        assert!(err.to_string().contains(&expected), "{err}");
    }

    let shakespeare = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tinyshakespeare.txt");
    if shakespeare.is_file() {
        let cache = tokenize_corpus(&CorpusSource::files(vec![shakespeare]), &tokenizer, dir.path()).unwrap();
        assert!(cache.n_docs() > 1000 && cache.n_tokens() > 1_000_000, "{:?}", cache.meta());
    }
}

/// Writes `lines` to a gzip file.
fn write_gz(path: &std::path::Path, lines: &[String]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut encoder =
        flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::default());
    for line in lines {
        writeln!(encoder, "{line}").unwrap();
    }
    encoder.finish().unwrap();
}

/// `text` compressed as one gzip member, at `level`.
fn gzip_member(text: &str, level: flate2::Compression) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap()
}

/// A gzip file is read as `gzip -d` reads it: every member of concatenated members, and bytes
/// after the last member that start no other (trailing garbage) ignored, with a warning naming the
/// file and the offset where they start. A damaged member is named by its offset, and a `.gz`
/// that is not gzip says so: none of them is "invalid gzip header".
#[test]
fn gzip_members_are_all_read_and_trailing_bytes_are_ignored_with_their_offset() {
    let dir = tempfile::tempdir().unwrap();
    let level = flate2::Compression::default();
    let (one, two) = (gzip_member("{\"text\": \"first\"}\n", level), gzip_member("{\"text\": \"second\"}\n", level));
    let both = dir.path().join("both.jsonl.gz");
    std::fs::write(&both, [&one[..], &two[..]].concat()).unwrap();
    assert_eq!(documents_of(&both).unwrap(), ["first", "second"]);

    let garbage = b"\n<html>not found</html>\n";
    let trailing = dir.path().join("trailing.jsonl.gz");
    std::fs::write(&trailing, [&one[..], &two[..], garbage].concat()).unwrap();
    assert_eq!(documents_of(&trailing).unwrap(), ["first", "second"]);
    // The warning reaches the token cache's warnings, which `train` prints.
    let source = CorpusSource::files(vec![trailing.clone()]);
    let cache = tokenize_corpus(&source, &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
    let expected = format!(
        "{}: {} trailing bytes after the gzip data at offset {} ignored",
        trailing.display(),
        garbage.len(),
        one.len() + two.len()
    );
    assert!(cache.warnings().iter().any(|w| w.starts_with(&expected)), "{:?}", cache.warnings());

    // A member that ends one byte before the reader's 8 KiB buffer does: the next member's two
    // magic bytes lie across two reads.
    let filler = (8100..8191)
        .map(|n| format!("{{\"text\": \"{}\"}}\n", "x".repeat(n)))
        .find(|line| gzip_member(line, flate2::Compression::none()).len() == 8191)
        .expect("a stored member of 8191 bytes");
    let split = dir.path().join("split.jsonl.gz");
    std::fs::write(&split, [gzip_member(&filler, flate2::Compression::none()), two.clone()].concat()).unwrap();
    assert_eq!(documents_of(&split).unwrap().last().map(String::as_str), Some("second"));

    // A second member cut short: the error names it by its offset.
    let cut = dir.path().join("cut.jsonl.gz");
    std::fs::write(&cut, [&one[..], &two[..two.len() - 4]].concat()).unwrap();
    let problem = problem_of(documents_of(&cut).unwrap_err(), "cut.jsonl.gz");
    let CorpusProblem::Unreadable(error) = &problem else { panic!("{problem}") };
    assert!(error.contains(&format!("in the gzip member that starts at byte {}", one.len())), "{error}");
    assert!(!error.contains("invalid gzip header"), "{error}");
    // In a JSON array too, where the reading error is not the JSON's.
    let array = dir.path().join("cut.json.gz");
    let whole = gzip_member("[{\"text\": \"first\"}, {\"text\": \"second\"}]", level);
    std::fs::write(&array, &whole[..whole.len() - 4]).unwrap();
    let problem = problem_of(documents_of(&array).unwrap_err(), "cut.json.gz");
    let CorpusProblem::Unreadable(error) = &problem else { panic!("not a JSON problem: {problem}") };
    assert!(error.contains("gzip member that starts at byte 0"), "{error}");

    let plain = dir.path().join("plain.jsonl.gz");
    std::fs::write(&plain, "{\"text\": \"first\"}\n").unwrap();
    let problem = problem_of(documents_of(&plain).unwrap_err(), "plain.jsonl.gz");
    assert_eq!(problem, CorpusProblem::NotGzip { empty: false });
}

/// Faults are named as what they are, where they are: a line that is not UTF-8 by its line, a
/// tokenizer path that is a folder as a folder (not "no such file").
#[test]
fn a_line_that_is_not_utf8_and_a_tokenizer_folder_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"one\n\ntwo\nbad \xff byte\n").unwrap();
    let found = corpus_problem(documents_of(&notes).unwrap_err());
    assert_eq!(found, ("notes.txt".into(), Some(Spot::Line(4)), CorpusProblem::NotUtf8 { byte: 5 }));
    let lines = dir.path().join("docs.jsonl");
    std::fs::write(&lines, b"{\"text\": \"ok\"}\n{\"text\": \"\xff\"}\n").unwrap();
    let found = corpus_problem(documents_of(&lines).unwrap_err());
    assert_eq!(found, ("docs.jsonl".into(), Some(Spot::Line(2)), CorpusProblem::NotUtf8 { byte: 11 }));

    let err = Tokenizer::from_file(dir.path()).unwrap_err();
    assert!(matches!(err, DataError::Tokenizer(TokenizerProblem::IsFolder { .. })), "{err}");
    let err = Tokenizer::from_file(dir.path().join("nope.json")).unwrap_err();
    assert!(matches!(err, DataError::Tokenizer(TokenizerProblem::NotFound { .. })), "{err}");
}

/// C4's record layout: `text`, `timestamp`, `url`.
fn c4_line(text: &str, n: usize) -> String {
    serde_json::json!({"text": text, "timestamp": format!("2019-04-2{n}T12:00:00Z"), "url": format!("https://example.com/{n}")})
        .to_string()
}

/// The documents of a token cache, end-of-text tokens dropped, as text (byte tokenizer).
fn cached_texts(cache: &TokenCache) -> Vec<String> {
    (0..cache.n_docs())
        .map(|doc| {
            let (start, end) = cache.doc_span(doc);
            let mut tokens = vec![0u32; (end - start) as usize];
            cache.read(start, &mut tokens);
            String::from_utf8(tokens[..tokens.len() - 1].iter().map(|&t| t as u8).collect()).unwrap()
        })
        .collect()
}

#[test]
fn c4_json_gz_shards_are_read_as_exactly_their_texts_as_files_and_in_folders() {
    let dir = tempfile::tempdir().unwrap();
    let en = dir.path().join("c4/en");
    let texts = ["Beginners BBQ Class.\nTaking place in Missoula!", "Discussion in \"Mac OS X\"", "Foil plaid lycra"];
    let shards = [en.join("c4-train.00000-of-01024.json.gz"), en.join("c4-train.00001-of-01024.json.gz")];
    write_gz(&shards[0], &[c4_line(texts[0], 0), c4_line(texts[1], 1)]);
    write_gz(&shards[1], &[c4_line(texts[2], 2)]);
    // What huggingface-cli leaves beside the shards is not data.
    std::fs::create_dir_all(dir.path().join("c4/.cache/huggingface")).unwrap();
    std::fs::write(dir.path().join("c4/.cache/huggingface/state.json"), "{\"not\": \"data\"}").unwrap();

    assert_eq!(file_format(&shards[0]).unwrap(), FileFormat::JsonLines);
    assert_eq!(documents_of(&shards[0]).unwrap(), texts[..2]);
    assert_eq!(corpus_files(&[dir.path().join("c4")]).unwrap().files, shards);
    for source in [CorpusSource::files(shards.to_vec()), CorpusSource::files(vec![dir.path().join("c4")])] {
        let cache = tokenize_corpus(&source, &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
        assert_eq!(cached_texts(&cache), texts, "the documents are the texts, nothing else");
        assert_eq!(cache.n_tokens() as usize, texts.iter().map(|t| t.len() + 1).sum::<usize>());
    }
}

#[test]
fn json_lines_are_recognised_by_content_whatever_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [c4_line("one", 1), c4_line("two", 2)];
    let as_json = dir.path().join("shard.json");
    std::fs::write(&as_json, lines.join("\n")).unwrap();
    let no_extension = dir.path().join("shard");
    std::fs::write(&no_extension, format!("\n\n{}\n", lines.join("\n"))).unwrap();
    // gzip is recognised by its first bytes, not the name.
    let gzip_named_jsonl = dir.path().join("shard.jsonl");
    write_gz(&gzip_named_jsonl, &lines);
    for file in [&as_json, &no_extension, &gzip_named_jsonl] {
        assert_eq!(file_format(file).unwrap(), FileFormat::JsonLines, "{}", file.display());
        assert_eq!(documents_of(file).unwrap(), vec!["one", "two"], "{}", file.display());
    }

    let array = dir.path().join("docs.json");
    std::fs::write(&array, "[\n  {\"text\": \"first\", \"id\": 1},\n  {\"text\": \"second\"}\n]\n").unwrap();
    assert_eq!(file_format(&array).unwrap(), FileFormat::JsonArray);
    assert_eq!(documents_of(&array).unwrap(), vec!["first", "second"]);
    std::fs::write(&array, "[{\"text\": \"first\"}, 3]").unwrap();
    let found = corpus_problem(documents_of(&array).unwrap_err());
    assert_eq!(
        found,
        ("docs.json".into(), Some(Spot::ArrayItem(2)), CorpusProblem::ItemNotAnObject { found: "a number" })
    );
    let pretty = dir.path().join("pretty.json");
    std::fs::write(&pretty, "{\n  \"text\": \"one object over lines\"\n}\n").unwrap();
    let (_, at, problem) = corpus_problem(documents_of(&pretty).unwrap_err());
    assert_eq!(at, Some(Spot::Line(1)));
    assert!(matches!(problem, CorpusProblem::NotJsonLine { hint: Some(JsonHint::SeveralLines), .. }), "{problem}");
    // An array in a file named as JSON lines: the name is the fix.
    let misnamed = dir.path().join("docs.jsonl");
    std::fs::write(&misnamed, "[\n  {\"text\": \"first\"}\n]\n").unwrap();
    let (_, _, problem) = corpus_problem(documents_of(&misnamed).unwrap_err());
    assert!(matches!(problem, CorpusProblem::NotJsonLine { hint: Some(JsonHint::Array), .. }), "{problem}");

    // A .txt file that holds JSON lines is never trained on as text.
    let txt = dir.path().join("c4.txt");
    write_gz(&txt, &lines);
    let looks_like_lines = CorpusProblem::LooksLikeJsonLines { keys: "`text`, `timestamp`, `url`".into() };
    assert_eq!(problem_of(documents_of(&txt).unwrap_err(), "c4.txt"), looks_like_lines);
    let source = CorpusSource::files(vec![txt.clone(), as_json.clone()]);
    assert_eq!(
        problem_of(tokenize_corpus(&source, &Tokenizer::Byte, dir.path()).unwrap_err(), "c4.txt"),
        looks_like_lines
    );

    // A .txt file stays text, even with braces that are not an object; without a name that says
    // text, a first `{` means JSON, and text that is not is refused with the hint to name it .txt.
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "{ not json }\nstill text\n\nsecond").unwrap();
    assert_eq!(file_format(&notes).unwrap(), FileFormat::Text);
    assert_eq!(documents_of(&notes).unwrap(), vec!["{ not json }\nstill text", "second"]);
    let unnamed = dir.path().join("notes");
    std::fs::copy(&notes, &unnamed).unwrap();
    let (_, at, problem) = corpus_problem(documents_of(&unnamed).unwrap_err());
    let CorpusProblem::JsonByContent(inner) = problem else { panic!("{problem}") };
    assert!(at == Some(Spot::Line(1)) && matches!(*inner, CorpusProblem::NotJsonLine { .. }), "{inner}");

    // Folders take .json and .json.gz files too.
    let folder = dir.path().join("folder");
    write_gz(&folder.join("a.json.gz"), &lines[..1]);
    std::fs::write(folder.join("b.json"), &lines[1]).unwrap();
    std::fs::write(folder.join("README"), "not collected").unwrap();
    let names: Vec<_> =
        corpus_files(&[folder]).unwrap().files.iter().map(|f| f.file_name().unwrap().to_owned()).collect();
    assert_eq!(names, ["a.json.gz", "b.json"]);
}

#[test]
fn the_text_field_is_chosen_and_a_missing_one_is_named_with_the_keys_present() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pile.jsonl");
    std::fs::write(&file, "{\"content\": \"alpha\", \"id\": 1}\n\n{\"content\": \"beta\", \"id\": 2}\n").unwrap();
    assert_eq!(documents_with_field(&file, "content").unwrap(), vec!["alpha", "beta"]);
    let no_field = |field: &str, keys: &str| CorpusProblem::NoField { field: field.into(), keys: keys.into() };
    let found = corpus_problem(documents_of(&file).unwrap_err());
    assert_eq!(found, ("pile.jsonl".into(), Some(Spot::Line(1)), no_field("text", "`content`, `id`")));
    let found = corpus_problem(documents_with_field(&file, "id").unwrap_err());
    let not_text = CorpusProblem::FieldNotText { field: "id".into(), found: "a number" };
    assert_eq!(found, ("pile.jsonl".into(), Some(Spot::Line(1)), not_text));
    std::fs::write(&file, "{\"content\": \"alpha\"}\n\n{\"id\": 2}\n").unwrap();
    let found = corpus_problem(documents_with_field(&file, "content").unwrap_err());
    assert_eq!(found, ("pile.jsonl".into(), Some(Spot::Line(3)), no_field("content", "`id`")));

    // Through the token cache: the field is part of what the cache is built from.
    std::fs::write(&file, "{\"content\": \"alpha\", \"title\": \"A\"}\n{\"content\": \"beta\", \"title\": \"B\"}\n")
        .unwrap();
    let source = |field: &str| CorpusSource::Files { paths: vec![file.clone()], text_field: field.into() };
    let cache = tokenize_corpus(&source("content"), &Tokenizer::Byte, dir.path()).unwrap();
    assert_eq!(cached_texts(&cache), ["alpha", "beta"]);
    let titles = tokenize_corpus(&source("title"), &Tokenizer::Byte, dir.path()).unwrap();
    assert_eq!(cached_texts(&titles), ["A", "B"]);
    assert_ne!(cache.content_fingerprint(), titles.content_fingerprint());

    // A training setting like the others: default `text`, set in a config file or on the command line.
    use clap::{Args, Command, FromArgMatches};
    use layernorm_scaling::train::TrainConfig;
    assert_eq!(TrainConfig::default().data.text_field, "text");
    let toml = dir.path().join("train.toml");
    std::fs::write(&toml, "text_field = \"content\"\n").unwrap();
    assert_eq!(TrainConfig::from_file(&toml).unwrap().data.text_field, "content");
    let matches = TrainConfig::augment_args(Command::new("train"))
        .try_get_matches_from(["train", "--text-field", "body"])
        .unwrap();
    let mut config = TrainConfig::default();
    config.update_from_arg_matches(&matches).unwrap();
    assert_eq!(config.data.text_field, "body");
    let empty = edited(&TrainConfig::default(), |c| c.data.text_field = String::new());
    assert!(empty.validate().unwrap_err().to_string().contains("`text_field` is empty"));
}

/// nanoGPT's layout: `u16` tokens, no header.
fn nanogpt_bytes(tokens: &[u16]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// llm.c's layout: 256 `i32` (magic, version, count), then `u16` (version 1) or `u32` tokens.
fn llmc_bytes(version: u32, count: u32, tokens: &[u32]) -> Vec<u8> {
    let mut header = [0u32; 256];
    header[..3].copy_from_slice(&[LLMC_MAGIC, version, count]);
    let mut bytes: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).collect();
    for &token in tokens {
        match version {
            1 => bytes.extend((token as u16).to_le_bytes()),
            _ => bytes.extend(token.to_le_bytes()),
        }
    }
    bytes
}

fn all_tokens(file: &TokenFile) -> Vec<u32> {
    let mut out = vec![0; file.n_tokens() as usize];
    file.read(0, &mut out);
    assert_eq!(file.tokens().collect::<Vec<_>>(), out);
    out
}

#[test]
fn nanogpt_and_llmc_token_files_read_back_exactly_the_tokens_written() {
    let dir = tempfile::tempdir().unwrap();
    let nanogpt = dir.path().join("train.bin");
    std::fs::write(&nanogpt, nanogpt_bytes(&[50256, 0, 1, 65535, 464])).unwrap();
    let file = TokenFile::open(&nanogpt).unwrap();
    assert_eq!((file.layout(), all_tokens(&file)), (TokenLayout::NanoGpt, vec![50256, 0, 1, 65535, 464]));
    let v1 = dir.path().join("fineweb_train_000001.bin");
    std::fs::write(&v1, llmc_bytes(1, 3, &[50256, 7, 65535])).unwrap();
    let file = TokenFile::open(&v1).unwrap();
    assert_eq!((file.layout(), all_tokens(&file)), (TokenLayout::LlmC { version: 1 }, vec![50256, 7, 65535]));
    let v2 = dir.path().join("llama3.bin");
    std::fs::write(&v2, llmc_bytes(2, 4, &[128000, 9, 70000, 128001])).unwrap();
    let file = TokenFile::open(&v2).unwrap();
    assert_eq!((file.layout(), all_tokens(&file)), (TokenLayout::LlmC { version: 2 }, vec![128000, 9, 70000, 128001]));
    let mut middle = [0; 2];
    file.read(1, &mut middle);
    assert_eq!(middle, [9, 70000]);
}

#[test]
fn token_files_train_as_documents_split_after_end_of_text_with_no_tokenisation() {
    let dir = tempfile::tempdir().unwrap();
    // Byte-tokenizer ids (end-of-text 0): nanoGPT appends it to each document, llm.c puts it first.
    let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
    std::fs::write(&a, nanogpt_bytes(&[1, 2, 0, 3, 4, 5, 0, 6])).unwrap();
    std::fs::write(&b, llmc_bytes(1, 4, &[0, 7, 8, 9])).unwrap();
    let cache_root = dir.path().join("cache");
    let cache =
        tokenize_corpus(&CorpusSource::files(vec![a.clone(), b.clone()]), &Tokenizer::Byte, &cache_root).unwrap();
    assert!(!cache_root.exists(), "token files are mapped, not copied into a cache");
    assert_eq!(cache.n_tokens(), 12);
    let spans: Vec<_> = (0..cache.n_docs()).map(|doc| cache.doc_span(doc)).collect();
    // a.bin: [1 2 0] [3 4 5 0] [6] (its end closes the last one); b.bin: [0] [7 8 9].
    assert_eq!(spans, [(0, 3), (3, 7), (7, 8), (8, 9), (9, 12)]);
    let mut stream = vec![0; 12];
    cache.read(0, &mut stream);
    assert_eq!(stream, [1, 2, 0, 3, 4, 5, 0, 6, 0, 7, 8, 9], "read across the two files");

    // The split and the packing work as for text.
    let docs = builtin_documents(200, 3);
    let tokens: Vec<u16> = docs.iter().flat_map(|d| d.bytes().map(u16::from).chain([0])).collect();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, nanogpt_bytes(&tokens)).unwrap();
    let cache =
        Arc::new(tokenize_corpus(&CorpusSource::files(vec![big.clone()]), &Tokenizer::Byte, &cache_root).unwrap());
    assert_eq!(cached_texts(&cache), docs);
    let text = dir.path().join("docs.txt");
    std::fs::write(&text, docs.join("\n\n")).unwrap();
    let from_text = Arc::new(tokenize_corpus(&CorpusSource::files(vec![text]), &Tokenizer::Byte, &cache_root).unwrap());
    let (train, valid) = train_valid_datasets(cache, 32, 0.1, 5, SequenceMode::Pack).unwrap();
    let (text_train, text_valid) = train_valid_datasets(from_text, 32, 0.1, 5, SequenceMode::Pack).unwrap();
    assert!(!valid.is_empty() && train.len() > valid.len());
    assert_eq!((train.len(), valid.len()), (text_train.len(), text_valid.len()));
    assert_eq!(train.get(3).unwrap(), text_train.get(3).unwrap(), "the same windows as the same text");

    // A whole run trains on a token file.
    let out = dir.path().join("run");
    let mut config = common::quick(&out, 6, 6);
    config.data.files = vec![big];
    let report = layernorm_scaling::train::train(&config, layernorm_scaling::train::Start::New, |_| {}).unwrap();
    assert!(report.valid_loss.is_finite());
}

#[test]
fn broken_token_files_are_refused_saying_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |name: &str, bytes: Vec<u8>| -> CorpusProblem {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        match tokenize_corpus(&CorpusSource::files(vec![path]), &Tokenizer::Byte, dir.path()) {
            Ok(_) => panic!("{name} was accepted"),
            Err(err) => problem_of(err, name),
        }
    };
    let layout = CorpusProblem::TokenLayout;
    assert_eq!(refused("odd.bin", vec![1, 0, 2]), layout(TokenLayoutProblem::OddBytes { bytes: 3 }));
    assert_eq!(refused("empty.bin", Vec::new()), CorpusProblem::NoTokens);
    let count = TokenLayoutProblem::CountMismatch { version: 1, count: 10, expected: 20, header: 1024, body: 6 };
    assert_eq!(refused("count.bin", llmc_bytes(1, 10, &[1, 2, 3])), layout(count));
    let version = TokenLayoutProblem::UnknownVersion { version: 3 };
    assert_eq!(refused("version.bin", llmc_bytes(3, 1, &[1])), layout(version));
    let mut short = LLMC_MAGIC.to_le_bytes().to_vec();
    short.extend([1, 0, 0, 0]);
    let short_header = TokenLayoutProblem::ShortHeader { magic: LLMC_MAGIC, bytes: 8, header: 1024 };
    assert_eq!(refused("short.bin", short), layout(short_header));
    let outside = CorpusProblem::TokenOutsideTokenizer { position: 2, id: 50256, vocab_size: 256 };
    assert_eq!(refused("gpt2.bin", nanogpt_bytes(&[10, 0, 50256, 11])), outside);

    // Token files and text are not mixed.
    let (tokens, text) = (dir.path().join("ok.bin"), dir.path().join("notes.txt"));
    std::fs::write(&tokens, nanogpt_bytes(&[1, 0, 2, 0])).unwrap();
    std::fs::write(&text, "some text\n\nmore").unwrap();
    let err = tokenize_corpus(&CorpusSource::files(vec![text.clone(), tokens.clone()]), &Tokenizer::Byte, dir.path())
        .unwrap_err();
    let mixed = WholeCorpusProblem::MixedTokensAndText { tokens: tokens.clone(), text };
    assert_eq!(err, DataError::Whole(mixed));
    assert_eq!(problem_of(documents_of(&tokens).unwrap_err(), "ok.bin"), CorpusProblem::TokensNotText);
}

/// Without the `parquet` feature a Parquet file (by its magic, whatever its name) is refused
/// with what to build, never read as text; folders still collect `.parquet` shards.
#[cfg(not(feature = "parquet"))]
#[test]
fn without_the_parquet_feature_a_parquet_file_is_refused_saying_to_build_with_it() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet/fineweb.parquet");
    let dir = tempfile::tempdir().unwrap();
    let unnamed = dir.path().join("shards/000_00000");
    std::fs::create_dir_all(unnamed.parent().unwrap()).unwrap();
    std::fs::copy(&fixture, &unnamed).unwrap();
    for file in [&fixture, &unnamed] {
        assert_eq!(file_format(file).unwrap(), FileFormat::Parquet, "{}", file.display());
        let name = file.file_name().unwrap().to_str().unwrap();
        assert_eq!(problem_of(documents_of(file).unwrap_err(), name), CorpusProblem::NoParquetFeature);
    }
    let shard = dir.path().join("shards/000_00001.parquet");
    std::fs::copy(&fixture, &shard).unwrap();
    assert_eq!(corpus_files(&[dir.path().join("shards")]).unwrap().files, [shard.canonicalize().unwrap()]);
    let err = tokenize_corpus(&CorpusSource::files(vec![dir.path().join("shards")]), &Tokenizer::Byte, dir.path())
        .unwrap_err();
    assert_eq!(problem_of(err, "000_00001.parquet"), CorpusProblem::NoParquetFeature);
    // The advice, said once in the variant: what to build with.
    assert!(CorpusProblem::NoParquetFeature.to_string().contains("--features parquet"));
}

/// A Hugging Face tokenizer.json of a word-level vocabulary, with `</s>` as end-of-text.
fn word_tokenizer_json(words: [&str; 2]) -> String {
    let vocab = serde_json::json!({"</s>": 0, "[UNK]": 1, (words[0]): 2, (words[1]): 3});
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "normalizer": null, "post_processor": null,
        "decoder": null, "pre_tokenizer": {"type": "Whitespace"},
        "added_tokens": [{"id": 0, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false,
                          "normalized": false, "special": true}],
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
    .to_string()
}

#[test]
fn a_file_or_tokenizer_changed_in_place_is_never_taken_for_the_old_one() {
    use layernorm_scaling::data::corpus_fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corpus.txt");
    let cache_root = dir.path().join("cache");
    std::fs::write(&file, "alpha beta\n\ngamma delta\n").unwrap();
    let source = CorpusSource::files(vec![file.clone()]);
    let old = tokenize_corpus(&source, &Tokenizer::Byte, &cache_root).unwrap();
    assert_eq!(cached_texts(&old), ["alpha beta", "gamma delta"]);
    assert_eq!(corpus_fingerprint(&source, &Tokenizer::Byte).unwrap(), old.content_fingerprint());

    // Same name, same size, other content: another cache, another fingerprint.
    std::fs::write(&file, "alpha BETA\n\ngamma delta\n").unwrap();
    let new = tokenize_corpus(&source, &Tokenizer::Byte, &cache_root).unwrap();
    assert_eq!(cached_texts(&new), ["alpha BETA", "gamma delta"], "the old cache is not reused");
    assert_ne!(new.content_fingerprint(), old.content_fingerprint());
    assert_eq!(corpus_fingerprint(&source, &Tokenizer::Byte).unwrap(), new.content_fingerprint());
    // The same content elsewhere is the same data.
    let moved = dir.path().join("moved.txt");
    std::fs::copy(&file, &moved).unwrap();
    let elsewhere = CorpusSource::files(vec![moved]);
    assert_eq!(corpus_fingerprint(&elsewhere, &Tokenizer::Byte).unwrap(), new.content_fingerprint());

    // A tokenizer.json rewritten in place (same path, same size, same vocabulary size) is another tokenizer.
    let json = dir.path().join("tokenizer.json");
    std::fs::write(&json, word_tokenizer_json(["alpha", "gamma"])).unwrap();
    let first = Tokenizer::from_file(&json).unwrap();
    let before = tokenize_corpus(&source, &first, &cache_root).unwrap();
    std::fs::write(&json, word_tokenizer_json(["gamma", "alpha"])).unwrap();
    let second = Tokenizer::from_file(&json).unwrap();
    assert_eq!((first.vocab_size(), first.describe()), (second.vocab_size(), second.describe()));
    let after = tokenize_corpus(&source, &second, &cache_root).unwrap();
    let first_tokens = |cache: &TokenCache| {
        let mut tokens = vec![0; 2];
        cache.read(0, &mut tokens);
        tokens[0]
    };
    assert_eq!((first_tokens(&before), first_tokens(&after)), (2, 3), "alpha is re-tokenised by the new file");
    assert_ne!(before.content_fingerprint(), after.content_fingerprint());
}

/// A run trained into a folder of its corpus (`--data dd --out dd/run`), or a report written
/// there, is not read as corpus by the next run: its metrics.jsonl was taken for a JSON corpus.
#[test]
fn a_run_or_report_inside_a_corpus_folder_is_skipped_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for sub in ["run", "report", "more"] {
        std::fs::create_dir_all(data.join(sub)).unwrap();
    }
    std::fs::write(data.join("a.txt"), "first\n\nsecond\n").unwrap();
    std::fs::write(data.join("run/train.json"), "{}").unwrap();
    std::fs::write(data.join("run/metrics.jsonl"), "{\"split\": \"train\"}\n").unwrap();
    std::fs::write(data.join("report/.contents"), "").unwrap();
    std::fs::write(data.join("report/report.json"), "{}").unwrap();
    std::fs::write(data.join("more/b.txt"), "third\n").unwrap();
    let listing = corpus_files(std::slice::from_ref(&data)).unwrap();
    assert_eq!(listing.files, [data.join("a.txt"), data.join("more/b.txt")]);
    let skipped = listing.skipped.join("\n");
    assert!(skipped.contains("run: skipped, a run directory or report"), "{skipped}");
    assert!(skipped.contains("report: skipped, a run directory or report"), "{skipped}");

    // A token cache built inside it (`--cache-dir` = the corpus folder): its meta.json and
    // offsets.bin were taken for a mix of text and token files, which stopped every later run.
    let cache = build_cache(&data.join("cache"), "key", &[&[1, 2, 3]]);
    drop(cache);
    let listing = corpus_files(std::slice::from_ref(&data)).unwrap();
    assert_eq!(listing.files, [data.join("a.txt"), data.join("more/b.txt")]);
    let skipped = listing.skipped.join("\n");
    assert!(skipped.contains("skipped, a token cache of this crate"), "{skipped}");
}

#[test]
fn each_file_is_read_once_through_link_loops_sibling_links_and_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("a.txt"), "first\n\nsecond\n").unwrap();
    std::fs::write(data.join("sub/b.txt"), "third\n\nfourth\n").unwrap();
    std::os::unix::fs::symlink(&data, data.join("sub/loop")).unwrap();
    std::os::unix::fs::symlink(data.join("sub"), data.join("twin")).unwrap();
    std::os::unix::fs::symlink(data.join("a.txt"), data.join("same.txt")).unwrap();
    // A hard link is the same file too (it was read twice, into training and validation).
    std::fs::hard_link(data.join("sub/b.txt"), data.join("hard.txt")).unwrap();

    let paths = [data.clone(), data.join("a.txt"), data.clone()];
    let listing = corpus_files(&paths).unwrap();
    assert_eq!(listing.files, [data.join("a.txt"), data.join("hard.txt")]);
    let skipped = listing.skipped.join("\n");
    for (path, first) in [
        (data.join("same.txt"), data.join("a.txt")),
        (data.join("sub/b.txt"), data.join("hard.txt")),
        (data.join("sub/loop"), data.clone()),
        (data.join("twin"), data.join("sub")),
        (data.join("a.txt"), data.join("a.txt")),
        (data.clone(), data.clone()),
    ] {
        let line = format!("{}: skipped, the same", path.display());
        assert!(skipped.contains(&line) && skipped.contains(&format!("as {} (each", first.display())), "{skipped}");
    }
    assert_eq!(listing.skipped.len(), 6, "{skipped}");

    let cache = tokenize_corpus(&CorpusSource::files(paths.to_vec()), &Tokenizer::Byte, dir.path()).unwrap();
    assert_eq!(cached_texts(&cache), ["first", "second", "third", "fourth"], "every document once");
}

#[test]
fn the_null_device_and_pipes_are_refused_saying_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let cache_root = dir.path().join("cache");
    assert_eq!(problem_of(corpus_files(&[PathBuf::from("/dev/null")]).unwrap_err(), "null"), CorpusProblem::NullDevice);

    let fifo = dir.path().join("corpus.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Opening the pipe would wait for a writer forever: it must be refused before.
    for paths in [vec![fifo.clone()], vec![dir.path().to_path_buf()]] {
        let err = tokenize_corpus(&CorpusSource::files(paths), &Tokenizer::Byte, &cache_root).unwrap_err();
        assert_eq!(problem_of(err, "corpus.txt"), CorpusProblem::Pipe);
    }
    assert!(!cache_root.exists(), "nothing is left behind");
}

#[test]
fn json_is_decided_by_its_first_character_at_any_size_and_a_byte_order_mark_is_no_text() {
    let dir = tempfile::tempdir().unwrap();
    // A first record of 17 MiB in a file without a name that says JSON.
    let long = "x".repeat(17 << 20);
    let big = dir.path().join("shard");
    std::fs::write(&big, format!("{}\n{}\n", serde_json::json!({"text": long}), c4_line("short", 1))).unwrap();
    assert_eq!(file_format(&big).unwrap(), FileFormat::JsonLines);
    let docs = documents_of(&big).unwrap();
    assert_eq!((docs.len(), docs[0].len(), docs[1].as_str()), (2, long.len(), "short"));
    let array = dir.path().join("array");
    std::fs::write(&array, "\n [{\"text\": \"a\"}, {\"text\": \"b\"}]").unwrap();
    assert_eq!(file_format(&array).unwrap(), FileFormat::JsonArray);
    assert_eq!(documents_of(&array).unwrap(), ["a", "b"]);

    // A UTF-8 byte order mark is accepted in every text format, compressed or not.
    let bom = "\u{feff}";
    let lines = format!("{bom}{}\n{}\n", c4_line("one", 1), c4_line("two", 2));
    let cases = [
        ("bom.jsonl", lines.clone()),
        ("bom", lines.clone()),
        ("bom.json", format!("{bom}[{{\"text\": \"one\"}}, {{\"text\": \"two\"}}]")),
        ("bom.txt", format!("{bom}one\n\ntwo\n")),
    ];
    for (name, content) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, &content).unwrap();
        assert_eq!(documents_of(&file).unwrap(), ["one", "two"], "{name}");
        let gz = dir.path().join(format!("{name}.gz"));
        write_gz(&gz, &[content]);
        assert_eq!(documents_of(&gz).unwrap(), ["one", "two"], "{name}.gz");
    }
    let txt = dir.path().join("c4.txt");
    std::fs::write(&txt, &lines).unwrap();
    let problem = problem_of(documents_of(&txt).unwrap_err(), "c4.txt");
    assert!(matches!(problem, CorpusProblem::LooksLikeJsonLines { .. }), "{problem}");
}

/// Builds (or opens) the cache at `path` of three documents; true when it was built.
fn open_or_build_counted(path: &std::path::Path) -> (TokenCache, bool) {
    let mut built = false;
    let cache = TokenCache::open_or_build(path, "k", 0, |writer| {
        built = true;
        [&[1u32, 2, 3][..], &[4, 5], &[6, 7, 8, 9, 10, 11]].iter().try_for_each(|doc| writer.push(doc))
    })
    .unwrap();
    (cache, built)
}

fn windows_of(cache: TokenCache) -> Vec<Vec<u32>> {
    let set = SequenceDataset::new(Arc::new(cache), &[0, 1, 2], 3);
    (0..set.len()).map(|i| set.get(i).unwrap().tokens).collect()
}

/// The problem of a token cache error: fails on any other error.
fn cache_problem(error: DataError) -> CacheProblem {
    match error {
        DataError::Cache { problem, .. } => problem,
        other => panic!("not a token cache problem: {other}"),
    }
}

/// Overwrites `bytes.len()` bytes of `path` at `at`, keeping its size.
fn overwrite(path: &std::path::Path, at: usize, bytes: &[u8]) {
    let mut content = std::fs::read(path).unwrap();
    content[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, content).unwrap();
}

#[test]
fn a_token_cache_with_damaged_offsets_is_rebuilt_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let (cache, built) = open_or_build_counted(&path);
    assert!(built);
    let before = windows_of(cache);
    assert!(!open_or_build_counted(&path).1, "a sound cache is reused");

    // 8 bytes of offsets.bin overwritten (the second offset): once made `train` panic in packing.
    overwrite(&path.join("offsets.bin"), 8, &[0xff; 8]);
    let err = TokenCache::open(&path).unwrap_err();
    assert!(matches!(cache_problem(err), CacheProblem::Checksum { file: "offsets.bin", error: SumError::Mismatch(_) }));
    let (cache, built) = open_or_build_counted(&path);
    assert!(built, "the damaged cache is rebuilt");
    assert_eq!(windows_of(cache), before);
    assert!(TokenCache::open(&path).is_ok(), "the rebuilt cache is sound");

    // Offsets out of order with a checksum that matches them (written over): the offsets are checked too.
    overwrite(&path.join("offsets.bin"), 8, &20u64.to_le_bytes());
    layernorm_scaling::io::write_sum(&path.join("offsets.bin")).unwrap();
    let err = TokenCache::open(&path).unwrap_err();
    assert_eq!(cache_problem(err), CacheProblem::OffsetsNotRising { tokens: 14 });
    let (cache, built) = open_or_build_counted(&path);
    assert!(built);
    assert_eq!(windows_of(cache), before);

    // A cache of an earlier version (no checksums) is rebuilt with them.
    for file in ["tokens.bin", "offsets.bin", "meta.json"] {
        std::fs::remove_file(path.join(format!("{file}.sum"))).unwrap();
    }
    let err = TokenCache::open(&path).unwrap_err();
    assert_eq!(cache_problem(err), CacheProblem::NoChecksums);
    let (cache, built) = open_or_build_counted(&path);
    assert!(built);
    assert_eq!(windows_of(cache), before);
    let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    let names = [".cache.lock", "cache"].map(std::ffi::OsString::from);
    assert_eq!(left, names, "no building or old folder remains (the builds' lock file does)");
}

#[test]
fn a_token_cache_with_damaged_tokens_is_rebuilt_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let before = windows_of(open_or_build_counted(&path).0);

    // Bytes flipped in place, the size unchanged.
    let tokens = path.join("tokens.bin");
    let mut content = std::fs::read(&tokens).unwrap();
    for byte in &mut content[4..12] {
        *byte ^= 0x5a;
    }
    std::fs::write(&tokens, content).unwrap();
    let err = TokenCache::open(&path).unwrap_err();
    assert!(matches!(cache_problem(err), CacheProblem::Checksum { file: "tokens.bin", error: SumError::Mismatch(_) }));
    let (cache, built) = open_or_build_counted(&path);
    assert!(built, "the damaged cache is rebuilt");
    assert_eq!(windows_of(cache), before);

    // An id above the recorded largest, its checksum written over to match: the ids are checked too.
    overwrite(&tokens, 0, &1000u32.to_le_bytes());
    layernorm_scaling::io::write_sum(&tokens).unwrap();
    let err = TokenCache::open(&path).unwrap_err();
    assert_eq!(cache_problem(err), CacheProblem::TokenAboveMax { position: 0, id: 1000, max_token: 11 });
    let (cache, built) = open_or_build_counted(&path);
    assert!(built);
    assert_eq!(windows_of(cache), before);

    // Through the corpus path as `train --data` takes it: same documents, whatever was damaged.
    let file = dir.path().join("corpus.txt");
    std::fs::write(&file, "alpha beta\n\ngamma delta\n").unwrap();
    let source = CorpusSource::files(vec![file]);
    let root = dir.path().join("root");
    let cache = tokenize_corpus(&source, &Tokenizer::Byte, &root).unwrap();
    let cache_dir = cache.dir().to_path_buf();
    drop(cache);
    overwrite(&cache_dir.join("offsets.bin"), 8, &[0xff; 8]);
    overwrite(&cache_dir.join("tokens.bin"), 0, &[0xff; 4]);
    let again = tokenize_corpus(&source, &Tokenizer::Byte, &root).unwrap();
    assert_eq!(cached_texts(&again), ["alpha beta", "gamma delta"]);
}

/// Every window of a validation set, in order.
fn windows(set: &SequenceDataset) -> Vec<Vec<u32>> {
    (0..set.len()).map(|i| set.get(i).expect("a window").tokens).collect()
}

#[test]
fn runs_of_every_seed_are_evaluated_on_the_same_tokens() {
    use layernorm_scaling::train::{validation_data, TrainConfig, DEFAULT_DATA_SEED};
    let dir = tempfile::tempdir().unwrap();
    let config = |seed: u64, data_seed: Option<u64>| TrainConfig {
        data: DataSettings {
            data_seed,
            builtin_docs: 300,
            seq_len: 32,
            cache_dir: Some(dir.path().join("cache")),
            ..Default::default()
        },
        output: OutputSettings { out: dir.path().join(format!("run-{seed}")), ..Default::default() },
        seed,
        ..TrainConfig::default()
    };
    // `seed` chooses the weights and the order; the validation tokens follow the data seed alone.
    let (one, two) = (validation_data(&config(1, None)).unwrap(), validation_data(&config(2, None)).unwrap());
    assert!(one.len() > 2);
    assert_eq!(windows(&one), windows(&two), "seeds 1 and 2 validate on the same windows");
    let given = validation_data(&config(2, Some(DEFAULT_DATA_SEED))).unwrap();
    assert_eq!(windows(&given), windows(&one), "the default data seed is {DEFAULT_DATA_SEED}");
    // Another data seed holds out other documents (and makes another built-in corpus).
    let other = validation_data(&config(1, Some(7))).unwrap();
    assert_ne!(windows(&other), windows(&one));
    assert_eq!(windows(&other), windows(&validation_data(&config(3, Some(7))).unwrap()));
}

#[test]
fn a_run_written_before_the_data_seed_keeps_the_split_of_its_seed() {
    use layernorm_scaling::train::TrainConfig;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.json");
    // 0.1's train.json has no `data_seed`: its split came from `seed`.
    std::fs::write(&path, r#"{"seed": 5, "steps": 40}"#).unwrap();
    assert_eq!(TrainConfig::from_run_file(&path).unwrap().data.data_seed, Some(5));
    assert_eq!(TrainConfig::from_file(&path).unwrap().data.data_seed(), 1, "a config of the user's takes the default");
    std::fs::write(&path, r#"{"seed": 5, "data_seed": 9}"#).unwrap();
    assert_eq!(TrainConfig::from_run_file(&path).unwrap().data.data_seed, Some(9));
}

/// Each data error renders its place and facts where the user reads them (one message of each family).
#[test]
fn data_errors_name_the_place_and_the_facts_in_their_messages() {
    let at = |spot| Place::at("a.jsonl", spot);
    let no_field = CorpusProblem::NoField { field: "text".into(), keys: "`id`".into() };
    let cases = [
        (
            DataError::corpus(at(Spot::Line(2)), no_field),
            "corpus: a.jsonl:2: the object has no field `text` (its keys: `id`); choose the field that holds the \
             text with --text-field",
        ),
        (
            DataError::corpus(at(Spot::ArrayItem(3)), CorpusProblem::ItemNotAnObject { found: "a number" }),
            "corpus: a.jsonl: array item 3: a number, not a JSON object",
        ),
        (
            DataError::corpus(at(Spot::Row(4)), CorpusProblem::NotUtf8 { byte: 5 }),
            "corpus: a.jsonl: row 4: not UTF-8 text (byte 5 of the line is not UTF-8); save the file as UTF-8",
        ),
        (
            DataError::corpus(
                at(Spot::RowGroup { group: 1, of: 3 }),
                CorpusProblem::DamagedParquet { error: "EOF".into() },
            ),
            "corpus: a.jsonl, row group 1 of 3: not a readable Parquet file (EOF); it is truncated or damaged (an \
             interrupted download?): download it again",
        ),
        (
            DataError::corpus("/dev/null", CorpusProblem::NullDevice),
            "corpus: /dev/null: the null device, which is always empty: there is no document to train on; give \
             files or folders that hold the corpus (or no --data for the built-in corpus)",
        ),
        (
            DataError::corpus(
                at(Spot::Line(1)),
                CorpusProblem::JsonByContent(Box::new(CorpusProblem::LineNotAnObject { found: "a number" })),
            ),
            "corpus: a.jsonl:1: not a JSON object (a JSON-lines file holds one object per line) but a number (read \
             as JSON because its first character is `{` or `[`; if the file is text, name it .txt)",
        ),
        (
            DataError::Validation(Box::new(DataError::Whole(WholeCorpusProblem::NoText))),
            "the validation corpus (--valid-data): corpus: the corpus has no text (no non-empty document)",
        ),
        (
            DataError::Cache { dir: "cache/0f".into(), problem: CacheProblem::NoMaxToken },
            "token cache: cache/0f: written by an earlier version (meta.json has no max_token)",
        ),
        (
            DataError::Tokenizer(TokenizerProblem::NotFound { path: "t.json".into() }),
            "tokenizer: t.json: no such file; give `byte` or the path of a Hugging Face tokenizer.json",
        ),
        (
            DataError::Split(SplitProblem::SplitTooShort {
                split: "training",
                tokens: 9,
                seq_len: 16,
                valid_fraction: 0.9,
            }),
            "data split: the training split has 9 tokens, fewer than one sequence of 16 + 1; use more data, a \
             shorter --seq-len or a smaller --valid-fraction (now 0.9)",
        ),
    ];
    for (error, expected) in cases {
        assert_eq!(error.to_string(), expected);
    }
}
