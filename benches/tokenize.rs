//! Tokenising speed: builds the token cache of a corpus with a `tokenizer.json` on a given number
//! of threads and prints the tokens a second (the end-of-text tokens between documents not
//! counted), for comparison with Hugging Face `tokenizers`' `encode_batch` on the same threads
//! (`scripts/tokenize_bench.py`, the same documents and the same batches).
//!
//! `cargo bench --bench tokenize -- TOKENIZER_JSON CORPUS THREADS [RUNS]`

use std::time::Instant;

use layernorm_scaling::data::{tokenize_corpus, CorpusSource, Tokenizer};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let [tokenizer, corpus, threads, rest @ ..] = args.as_slice() else {
        eprintln!("usage: cargo bench --bench tokenize -- TOKENIZER_JSON CORPUS THREADS [RUNS]");
        std::process::exit(2)
    };
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("error: {e}");
        std::process::exit(1)
    };
    let threads: usize = threads.parse().unwrap_or_else(|e| fail(&e));
    let runs: usize = rest.first().map_or(Ok(3), |r| r.parse()).unwrap_or_else(|e| fail(&e));
    let tokenizer = Tokenizer::from_spec(tokenizer).unwrap_or_else(|e| fail(&e));
    let source = CorpusSource::files(vec![corpus.into()]);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap_or_else(|e| fail(&e));
    let mut rates = Vec::new();
    for _ in 0..runs {
        let cache_root = tempfile::tempdir().unwrap_or_else(|e| fail(&e));
        let started = Instant::now();
        let cache =
            pool.install(|| tokenize_corpus(&source, &tokenizer, cache_root.path())).unwrap_or_else(|e| fail(&e));
        let seconds = started.elapsed().as_secs_f64();
        let tokens = cache.n_tokens() - cache.n_docs() as u64;
        rates.push(tokens as f64 / seconds);
        println!("{threads} thread(s): {tokens} tokens of {} documents in {seconds:.2} s", cache.n_docs());
    }
    rates.sort_by(f64::total_cmp);
    println!("crate, {threads} thread(s): median {:.0} tokens/s", rates[rates.len() / 2]);
}
