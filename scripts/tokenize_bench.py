"""Tokenising speed of Hugging Face `tokenizers` for comparison with `benches/tokenize.rs`: the
same corpus split into the same documents (paragraphs: lines up to a blank line), encoded with
`encode_batch` in batches of 8 MiB of text on a given number of threads, tokens a second printed.

    python scripts/tokenize_bench.py --tokenizer T.json --data corpus.txt --threads 2
    python scripts/tokenize_bench.py --make-tokenizer T.json --data corpus.txt   # a T5-like Unigram

The thread count goes through RAYON_NUM_THREADS, set before `tokenizers` is imported.
"""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--tokenizer")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--runs", type=int, default=3)
parser.add_argument("--make-tokenizer", help="train a T5-like Unigram tokenizer (8,000 ids) on --data, write it here")
args = parser.parse_args()
os.environ["RAYON_NUM_THREADS"] = str(args.threads)
os.environ["RAYON_RS_NUM_CPUS"] = str(args.threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true"

from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers  # noqa: E402


def documents(path):
    docs, paragraph = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                paragraph.append(line)
            elif paragraph:
                docs.append("\n".join(paragraph))
                paragraph = []
    if paragraph:
        docs.append("\n".join(paragraph))
    return docs


docs = documents(args.data)
if args.make_tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=8000, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tokenizer.train_from_iterator(docs, trainer)
    tokenizer.save(args.make_tokenizer)
    print(f"wrote {args.make_tokenizer}")
    raise SystemExit(0)

tokenizer = Tokenizer.from_file(args.tokenizer)
rates = []
for _ in range(args.runs):
    started = time.perf_counter()
    tokens, batch, size = 0, [], 0
    for doc in docs:
        batch.append(doc)
        size += len(doc.encode("utf-8"))
        if size >= 8 << 20:
            tokens += sum(len(e.ids) for e in tokenizer.encode_batch(batch, add_special_tokens=False))
            batch, size = [], 0
    if batch:
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(batch, add_special_tokens=False))
    seconds = time.perf_counter() - started
    rates.append(tokens / seconds)
    print(f"{args.threads} thread(s): {tokens} tokens of {len(docs)} documents in {seconds:.2f} s")
rates.sort()
print(f"tokenizers, {args.threads} thread(s): median {rates[len(rates) // 2]:.0f} tokens/s")
