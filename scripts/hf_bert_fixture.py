#!/usr/bin/env python3
"""Golden fixture for the BERT-style encoder (tests/fixtures/hf/bert-tiny/).

    python scripts/hf_bert_fixture.py [--out tests/fixtures/hf/bert-tiny]

Builds a tiny random `BertForMaskedLM` with transformers (eager attention,
exact-erf GELU, layer_norm_eps 1e-12 as bert-large), perturbs every parameter
(LayerNorm weights and biases and the MLM output bias too, so a mapping mistake
moves the outputs by far more than the tolerance), saves it with
`save_pretrained(safe_serialization=True)` (the tied MLM decoder weight is left
out of the file, as for every Hub checkpoint), writes a WordPiece
`tokenizer.json` whose vocabulary fits the model, and `reference.json`:

    {"cls_token_id", "sep_token_id", "mask_token_id",
     "sequences": [[int, ...], ...],          # each [CLS] ... [SEP]
     "logits": [[[float] * vocab] * len(seq) for each sequence],
     "pseudo_perplexity": float,              # all sequences together
     "scored_tokens": int,
     "pseudo_perplexity_without_layer": [float] * num_hidden_layers,  # layer l+1 removed
     "text": str, "text_ids": [int, ...]}     # tokenizer.json's encoding of text

Pseudo-perplexity (Salazar et al. 2020): each token but [CLS] and [SEP] is
replaced by [MASK] in turn and scored by the model with every other token
visible; PPPL = exp(-(1/N) sum_t log P(w_t | W without t)) over all N scored
tokens of all sequences. It is computed here with transformers' model, one
masked copy per forward pass, independently of the Rust code; a removed layer
is dropped from `model.bert.encoder.layer`.

Needs torch and transformers 4.x (the venv recipe in scripts/hf_fixtures.py);
the committed files were made with torch 2.9.0 and transformers 4.57.6 on the CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForMaskedLM

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "hf" / "bert-tiny"

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
# Whole-word letters, word-continuation letters and three punctuation marks: any lower-cased
# English text tokenizes into this vocabulary of 60.
VOCAB = SPECIALS + LETTERS + ["##" + c for c in LETTERS] + [".", ",", "'"]
CLS, SEP, MASK = 2, 3, 4

# Sizes all different from each other (vocab != hidden != intermediate != positions) so that a
# transposed or swapped tensor cannot match a shape by accident.
CONFIG = dict(
    vocab_size=len(VOCAB),
    hidden_size=16,
    num_hidden_layers=3,
    num_attention_heads=2,
    intermediate_size=28,
    hidden_act="gelu",
    max_position_embeddings=24,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    pad_token_id=0,
)

TEXT = "the old dog sat."


def build_tokenizer() -> Tokenizer:
    """bert-base-uncased's pipeline (normaliser, pre-tokenizer, WordPiece, [CLS] A [SEP]) over VOCAB."""
    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)]
    )
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens(SPECIALS)
    return tokenizer


def build_model(seed: int) -> BertForMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(**CONFIG)
    config._attn_implementation = "eager"
    model = BertForMaskedLM(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "LayerNorm.weight" in name:
                param.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
            else:
                param.copy_(0.3 * noise)
    return model


def logits_of(model: BertForMaskedLM, ids: list[int]) -> torch.Tensor:
    """[len(ids), vocab] float32 logits of one unpadded sequence."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def log_likelihood(model: BertForMaskedLM, ids: list[int]) -> tuple[float, int]:
    """Sum of log P(w_t | W without t) over the non-special positions, and their number."""
    total = 0.0
    for t in range(1, len(ids) - 1):
        masked = list(ids)
        masked[t] = MASK
        log_probs = torch.log_softmax(logits_of(model, masked)[t].double(), dim=-1)
        total += float(log_probs[ids[t]])
    return total, len(ids) - 2


def pseudo_perplexity(model: BertForMaskedLM, sequences: list[list[int]]) -> tuple[float, int]:
    parts = [log_likelihood(model, ids) for ids in sequences]
    total, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
    return math.exp(-total / count), count


def without_layer(model: BertForMaskedLM, index: int) -> BertForMaskedLM:
    pruned = copy.deepcopy(model)
    layers = pruned.bert.encoder.layer
    pruned.bert.encoder.layer = torch.nn.ModuleList([layer for i, layer in enumerate(layers) if i != index])
    return pruned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    model = build_model(seed=2025)
    model.save_pretrained(out, safe_serialization=True)
    for extra in ["generation_config.json"]:
        (out / extra).unlink(missing_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(out / "tokenizer.json"))

    # The model as transformers loads it back from the files (the tied decoder restored).
    reloaded = BertForMaskedLM.from_pretrained(out, attn_implementation="eager").eval()
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "cls.predictions.decoder.weight" not in keys, "the tied decoder weight should not be saved"
    assert "bert.embeddings.LayerNorm.weight" in keys

    text_ids = tokenizer.encode(TEXT).ids
    sequences = [
        text_ids,
        [CLS, 7, 12, 40, 33, 58, 9, 21, SEP],
        [CLS] + [(5 + 7 * i) % 55 + 5 for i in range(CONFIG["max_position_embeddings"] - 2)] + [SEP],
    ]
    logits = [logits_of(reloaded, ids) for ids in sequences]
    for ids, l in zip(sequences, logits):
        assert torch.allclose(l, logits_of(model, ids), atol=1e-6)
    pppl, scored = pseudo_perplexity(reloaded, sequences)
    removed = [pseudo_perplexity(without_layer(reloaded, i), sequences)[0] for i in range(CONFIG["num_hidden_layers"])]
    print(f"pseudo-perplexity {pppl:.4f} over {scored} tokens; without each layer: {removed}")
    print(f"logits: max |value| {max(float(l.abs().max()) for l in logits):.3f}")

    reference = {
        "description": (
            "BertForMaskedLM, 3 Post-LN layers, hidden 16, 2 heads, intermediate 28, vocab 60, "
            "exact-erf gelu, layer_norm_eps 1e-12, every parameter perturbed; eager attention, float32"
        ),
        "cls_token_id": CLS,
        "sep_token_id": SEP,
        "mask_token_id": MASK,
        "text": TEXT,
        "text_ids": text_ids,
        "sequences": sequences,
        "logits": [[[float(v) for v in row] for row in l.tolist()] for l in logits],
        "pseudo_perplexity": pppl,
        "scored_tokens": scored,
        "pseudo_perplexity_without_layer": removed,
    }
    with open(out / "reference.json", "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {out} ({size} bytes)")


if __name__ == "__main__":
    main()
