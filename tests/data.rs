//! Data: tokenizers, corpus readers, the token cache, packing, the split, the built-in corpus.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use common::cpu;
use layernorm_scaling::data::{
    builtin_documents, corpus_files, read_documents, split_documents, tokenize_corpus, train_valid_datasets,
    CorpusSource, DataError, LmBatcher, PackedDataset, TokenCache, TokenWindow, Tokenizer,
};

fn documents_of(path: &std::path::Path) -> Result<Vec<String>, DataError> {
    let mut docs = Vec::new();
    read_documents(path, &mut |text| {
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

    let err = Tokenizer::from_spec("missing/tokenizer.json").unwrap_err().to_string();
    assert!(err.contains("no such file"), "{err}");
    std::fs::write(dir.path().join("bad.json"), "{}").unwrap();
    let err = Tokenizer::from_file(dir.path().join("bad.json")).unwrap_err().to_string();
    assert!(err.contains("not a valid tokenizer.json"), "{err}");
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
    let err = documents_of(&bad).unwrap_err().to_string();
    assert!(err.contains("bad.jsonl:2") && err.contains("`text`"), "{err}");
    std::fs::write(&bad, "{\"text\": \"ok\"}\nnot json\n").unwrap();
    assert!(documents_of(&bad).unwrap_err().to_string().contains("bad.jsonl:2: not a JSON object"));

    let files = corpus_files(&[dir.path().to_path_buf()]).unwrap();
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["c4-train.00000-of-01024.jsonl.gz", "notes.txt", "bad.jsonl"]);
    let err = corpus_files(&[PathBuf::from("/nonexistent/corpus")]).unwrap_err().to_string();
    assert!(err.contains("no such file or folder"), "{err}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(corpus_files(&[empty]).unwrap_err().to_string().contains("has no .txt"));
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
    let all = PackedDataset::new(cache.clone(), &[0, 1, 2], 4);
    assert_eq!(all.len(), 2);
    assert_eq!(all.get(0).unwrap().tokens, vec![1, 2, 3, 0, 4]);
    assert_eq!(all.get(1).unwrap().tokens, vec![4, 5, 0, 6, 7]);
    // Documents 0 and 2 only: 1 2 3 0 6 7 8 9 0
    let some = PackedDataset::new(cache, &[0, 2], 4);
    let windows: Vec<Vec<u32>> = (0..some.len()).map(|i| some.get(i).unwrap().tokens).collect();
    assert_eq!(windows, vec![vec![1, 2, 3, 0, 6], vec![6, 7, 8, 9, 0]]);

    let batch =
        LmBatcher.batch(vec![TokenWindow { tokens: vec![1, 2, 3] }, TokenWindow { tokens: vec![4, 5, 6] }], &cpu());
    assert_eq!(batch.inputs.to_data().convert::<i64>().try_to_vec::<i64>().unwrap(), vec![1, 2, 4, 5]);
    assert_eq!(batch.targets.to_data().convert::<i64>().try_to_vec::<i64>().unwrap(), vec![2, 3, 5, 6]);
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
        Err(DataError::Corpus("interrupted".into()))
    });
    assert!(failed.is_err());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("cache")], "no partial cache remains");
    let empty = TokenCache::open_or_build(&dir.path().join("empty"), "k", 0, |_| Ok(()));
    assert!(empty.unwrap_err().to_string().contains("no text"));
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
    assert!(split_documents(1, 0.1, 0).unwrap_err().to_string().contains("at least 2"));
    assert!(split_documents(10, 0.0, 0).is_err());
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
    let (train, valid) = train_valid_datasets(cache.clone(), 64, 0.1, 0).unwrap();
    assert!(train.len() > 5 * valid.len() && !valid.is_empty());
    assert_eq!(train.n_tokens() + valid.n_tokens(), cache.n_tokens());
    let err = train_valid_datasets(cache, 100_000, 0.1, 0).unwrap_err().to_string();
    assert!(err.contains("fewer than one sequence"), "{err}");

    let shakespeare = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tinyshakespeare.txt");
    if shakespeare.is_file() {
        let cache = tokenize_corpus(&CorpusSource::Files(vec![shakespeare]), &tokenizer, dir.path()).unwrap();
        assert!(cache.n_docs() > 1000 && cache.n_tokens() > 1_000_000, "{:?}", cache.meta());
    }
}
