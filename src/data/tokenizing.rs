//! Building a token cache at the machine's speed: one thread reads and decompresses the
//! documents in order while the calling thread encodes each batch on every core of its rayon pool
//! (a Hugging Face tokenizer's `encode_batch`) and writes the tokens in order, so the cache is the
//! same byte for byte on any number of threads. Progress, with the rate and the time left, is
//! reported as it goes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::corpus::read_documents_counting;
use super::{builtin_documents, CacheWriter, CorpusSource, DataError, Tokenizer, WholeCorpusProblem};

/// Text encoded in one batch while building a token cache: large enough to keep every core busy,
/// small enough to hold in memory (two batches are read ahead).
const ENCODE_BATCH_BYTES: usize = 8 << 20;

/// The least time between two progress reports.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// How far a token cache's build has come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenizeProgress {
    /// The fraction read (of the files' bytes on disk, or of the built-in documents), 0 to 1.
    pub fraction: f64,
    /// Tokens written so far.
    pub tokens: u64,
    /// Seconds since the build started.
    pub seconds: f64,
}

impl TokenizeProgress {
    /// Tokens a second so far.
    pub fn tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.seconds.max(1e-9)
    }

    /// Seconds left at the rate so far (`None` before anything is read).
    pub fn seconds_left(&self) -> Option<f64> {
        (self.fraction > 0.0).then(|| self.seconds * (1.0 - self.fraction) / self.fraction)
    }

    /// `tokenising the corpus: 42% (12.3M tokens, 1.02M tokens/s), about 3 min left`.
    pub fn note(&self) -> String {
        let left = match self.seconds_left() {
            _ if self.fraction >= 1.0 => format!("done in {:.0} s", self.seconds),
            Some(left) if left >= 90.0 => format!("about {:.0} min left", left / 60.0),
            Some(left) => format!("about {left:.0} s left"),
            None => "starting".into(),
        };
        format!(
            "tokenising the corpus into the token cache: {:.0}% ({:.1}M tokens, {:.2}M tokens/s), {left}",
            self.fraction * 100.0,
            self.tokens as f64 / 1e6,
            self.tokens_per_second() / 1e6
        )
    }
}

/// Reads the documents of `source` (its text `files`) and writes their tokens into `writer`, in
/// order; `progress` hears of it every few seconds and at the end of a build that took that long.
/// Returns the warnings of the reading (a gzip file's trailing bytes, ignored).
pub(super) fn write_tokens(
    writer: &mut CacheWriter,
    files: &[PathBuf],
    source: &CorpusSource,
    tokenizer: &Tokenizer,
    progress: &mut dyn FnMut(TokenizeProgress),
) -> Result<Vec<String>, DataError> {
    write_tokens_in_batches(writer, files, source, tokenizer, progress, ENCODE_BATCH_BYTES)
}

/// [`write_tokens`] with batches of about `batch_bytes` of text.
fn write_tokens_in_batches(
    writer: &mut CacheWriter,
    files: &[PathBuf],
    source: &CorpusSource,
    tokenizer: &Tokenizer,
    progress: &mut dyn FnMut(TokenizeProgress),
    batch_bytes: usize,
) -> Result<Vec<String>, DataError> {
    let started = Instant::now();
    let read = AtomicU64::new(0);
    let total = match source {
        CorpusSource::Builtin { n_docs, .. } => *n_docs as u64,
        CorpusSource::Files { .. } => files.iter().map(|file| file_size(file)).sum(),
    };
    let fraction = |read: u64| (read as f64 / total.max(1) as f64).min(1.0);
    std::thread::scope(|scope| {
        // Each batch comes with how much of the corpus was read when it was sent.
        let (batches, received) = sync_channel::<(Vec<String>, u64)>(2);
        let read = &read;
        let send = move |batch| batches.send((batch, read.load(Ordering::Relaxed))).is_ok();
        let reading = scope.spawn(move || read_batches(files, source, read, batch_bytes, send));
        let mut reported = Instant::now();
        let mut tokens = 0u64;
        let mut written = Ok(());
        let mut said: Option<u64> = None; // the tokens of the last report
        for (batch, read_then) in received.iter() {
            written = tokenizer.encode_batch(&batch).and_then(|encoded| {
                encoded.iter().filter(|t| !t.is_empty()).try_for_each(|t| {
                    tokens += t.len() as u64 + 1;
                    writer.push(t)
                })
            });
            if written.is_err() {
                break; // Dropping the receiver stops the reader.
            }
            if reported.elapsed() >= REPORT_EVERY {
                reported = Instant::now();
                said = Some(tokens);
                progress(TokenizeProgress {
                    fraction: fraction(read_then),
                    tokens,
                    seconds: started.elapsed().as_secs_f64(),
                });
            }
        }
        drop(received);
        let reader = reading
            .join()
            .unwrap_or(Err(DataError::Whole(WholeCorpusProblem::ReaderStopped("the corpus reader panicked"))));
        written?;
        let warnings = reader?;
        if started.elapsed() >= REPORT_EVERY && said != Some(tokens) {
            progress(TokenizeProgress { fraction: 1.0, tokens, seconds: started.elapsed().as_secs_f64() });
        }
        Ok(warnings)
    })
}

/// Reads `source`'s documents in order and hands them to `send` in batches of about
/// `batch_limit` bytes of text, counting what is read in `read` (bytes on disk, or built-in
/// documents); stops early when `send` returns false (the writer stopped). Returns the warnings
/// of the reading.
fn read_batches(
    files: &[PathBuf],
    source: &CorpusSource,
    read: &AtomicU64,
    batch_limit: usize,
    mut send: impl FnMut(Vec<String>) -> bool,
) -> Result<Vec<String>, DataError> {
    let mut warnings = Vec::new();
    let mut batch: Vec<String> = Vec::new();
    let mut batch_bytes = 0;
    // Set when the writer stopped first: its error is the one to report, not this one.
    let mut stopped = false;
    let mut push = |text: &str| -> Result<(), DataError> {
        batch.push(text.to_string());
        batch_bytes += text.len();
        if batch_bytes >= batch_limit {
            batch_bytes = 0;
            if !send(std::mem::take(&mut batch)) {
                stopped = true;
                return Err(DataError::Whole(WholeCorpusProblem::ReaderStopped("the token cache's writer stopped")));
            }
        }
        Ok(())
    };
    let outcome = match source {
        CorpusSource::Builtin { n_docs, seed } => builtin_documents(*n_docs, *seed).iter().try_for_each(|doc| {
            read.fetch_add(1, Ordering::Relaxed);
            push(doc)
        }),
        CorpusSource::Files { text_field, .. } => {
            let mut done = 0;
            files.iter().try_for_each(|file| {
                let counted = Arc::new(AtomicU64::new(0));
                let size = file_size(file);
                let mut warn = |warning| warnings.push(warning);
                let result = read_documents_counting(file, text_field, &counted, &mut warn, &mut |text| {
                    read.store(done + counted.load(Ordering::Relaxed).min(size), Ordering::Relaxed);
                    push(text)
                });
                done += size;
                read.store(done, Ordering::Relaxed);
                result
            })
        }
    };
    match outcome {
        Err(_) if stopped => Ok(warnings),
        Err(e) => Err(e),
        Ok(()) => {
            if !batch.is_empty() {
                send(batch);
            }
            Ok(warnings)
        }
    }
}

fn file_size(file: &Path) -> u64 {
    std::fs::metadata(file).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TokenCache;

    /// The cache files of `files` tokenised with `tokenizer` on `threads` threads, in batches of
    /// `batch_bytes`.
    fn cache_bytes(files: &[PathBuf], tokenizer: &Tokenizer, threads: usize, batch_bytes: usize) -> Vec<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let source = CorpusSource::files(files.to_vec());
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            TokenCache::open_or_build(dir.path(), "key", tokenizer.eot(), |writer| {
                write_tokens_in_batches(writer, files, &source, tokenizer, &mut |_| {}, batch_bytes).map(drop)
            })
        })
        .unwrap();
        ["tokens.bin", "offsets.bin"].iter().map(|f| std::fs::read(dir.path().join(f)).unwrap()).collect()
    }

    #[test]
    #[cfg(feature = "tokenizers")]
    fn the_cache_is_the_same_byte_for_byte_on_any_number_of_threads_and_batches() {
        let dir = tempfile::tempdir().unwrap();
        let docs = builtin_documents(3000, 3);
        let files: Vec<PathBuf> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("part-{i}.txt"));
                std::fs::write(&path, docs[i * 1000..(i + 1) * 1000].join("\n\n")).unwrap();
                path
            })
            .collect();
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/llama_mha_untied/tokenizer.json");
        let tokenizer = Tokenizer::from_file(fixture).unwrap();
        let one_thread = cache_bytes(&files, &tokenizer, 1, ENCODE_BATCH_BYTES);
        assert!(one_thread[0].len() > 100_000, "a corpus of {} bytes of tokens", one_thread[0].len());
        for (threads, batch_bytes) in [(4, ENCODE_BATCH_BYTES), (2, 1 << 10), (4, 1 << 12)] {
            let bytes = cache_bytes(&files, &tokenizer, threads, batch_bytes);
            assert!(bytes == one_thread, "{threads} threads, batches of {batch_bytes} bytes");
        }
        assert!(cache_bytes(&files, &Tokenizer::Byte, 3, 1 << 10) == cache_bytes(&files, &Tokenizer::Byte, 1, 1 << 20));
    }

    #[test]
    fn progress_says_the_rate_and_the_time_left() {
        let half = TokenizeProgress { fraction: 0.25, tokens: 3_000_000, seconds: 60.0 };
        assert_eq!(half.seconds_left(), Some(180.0));
        assert_eq!(
            half.note(),
            "tokenising the corpus into the token cache: 25% (3.0M tokens, 0.05M tokens/s), about 3 min left"
        );
        let done = TokenizeProgress { fraction: 1.0, tokens: 12_000_000, seconds: 240.0 };
        assert!(done.note().ends_with("100% (12.0M tokens, 0.05M tokens/s), done in 240 s"), "{}", done.note());
        assert_eq!(TokenizeProgress { fraction: 0.0, tokens: 0, seconds: 1.0 }.seconds_left(), None);
    }
}
