#!/usr/bin/env python3
"""Golden fixtures for Hugging Face interop tests (tests/fixtures/hf/).

Subcommands
-----------
    python scripts/hf_fixtures.py generate [--out tests/fixtures/hf]
        Builds tiny random Llama / Qwen2 / Mistral models with fixed seeds, saves
        each one as a Hugging Face model directory (config.json + safetensors),
        and writes reference.json with the float32 logits that transformers
        computes (eager attention) from the weights exactly as stored on disk.
        Every fixture is reloaded and checked, and its logits are also
        recomputed by an independent float64 implementation in this file
        (`ref_forward`), together with a table showing how far typical mapping
        mistakes (wrong eps, wrong rotary pairing, missing bias, ...) move
        the logits.

    python scripts/hf_fixtures.py check-export DIR --reference FILE [--tol 1e-4]
        Loads DIR with AutoModelForCausalLM (float32, eager attention), runs the
        reference "input_ids" (batch of 1) and compares with the reference
        "logits" ([tokens, vocab]). Prints the max abs diff; exit 0 if it is
        <= tol, 1 otherwise. Use it to check a model exported by the Rust code.

    python scripts/hf_fixtures.py build-cuda-stubs DIR
        Only needed on machines that cannot install the CUDA runtime libraries
        torch's PyPI wheel links against (see below).

reference.json: {"input_ids": [int, ...], "logits": [[float, ...] per position],
"weights_dtype": "float32" | "float16" | "bfloat16", "description": str,
"logits_shape": [tokens, vocab]}; llama_mha_untied also has "text", "tokens" and
"add_special_tokens" (input_ids = tokenizer.json encoding of text, with BOS).
Logits are written with Python's repr of the exact float32 values.

Install
-------
The fixtures in the repository were generated with transformers 4.57.6 (the
config.json layout of practically every checkpoint on the Hub: top-level
"rope_theta" / "rope_scaling"). transformers >= 5 writes a different layout
("rope_parameters" holding rope_theta and the scaling, no "rope_theta" /
"rope_scaling"; Mistral "head_dim": 8 instead of null; "pad_token_id": null),
so regenerate with 4.57.x to keep the files byte-identical. Under transformers
5.23.0 `generate` gives byte-identical weights, tokenizer.json and
reference.json (only config.json differs), and check-export passes with both.

Any machine with a normal torch install (e.g. `pip install torch` or the CPU
wheel from https://download.pytorch.org/whl/cpu) only needs:

    pip install torch "transformers==4.57.6" safetensors tokenizers numpy

What worked in the network-restricted build sandbox (PyPI only, no
download.pytorch.org, 2 cores; the ~3 GB of nvidia-* wheels avoided):

    python3 -m venv /work/venv-hf && . /work/venv-hf/bin/activate
    pip install --upgrade pip
    pip install --no-deps torch==2.9.0 nvidia-cuda-runtime-cu12==12.8.90 \
        nvidia-cuda-cupti-cu12==12.8.90
    pip install sympy mpmath networkx jinja2 MarkupSafe fsspec \
        typing_extensions filelock
    pip install "transformers==4.57.6" safetensors tokenizers numpy
    #  -> torch 2.9.0+cu128, transformers 4.57.6, safetensors 0.8.0,
    #     tokenizers 0.22.2, huggingface_hub 0.36.2, numpy 2.4.6
    # (pip's resolver warns that torch's nvidia-*/triton requirements are
    # missing; that is expected.) Reproduced from a clean venv: byte-identical.
    # `import torch` then fails (libcudnn.so.9, libcublas.so.12, libnccl.so.2,
    # ... not found: the CUDA wheel links against 12 more CUDA libraries).
    # Build tiny stub libraries that satisfy the dynamic linker (every stub
    # function aborts loudly if it is ever called; CPU code never calls them):
    python scripts/hf_fixtures.py build-cuda-stubs /work/cuda-stubs   # needs gcc, readelf
    export LD_LIBRARY_PATH=/work/cuda-stubs
    python -c "import torch; print(torch.__version__, torch.cuda.is_available())"
    python scripts/hf_fixtures.py generate

    # cross-check with transformers 5 (separate venv, same torch + stubs):
    python3 -m venv /work/venv-hf5 && . /work/venv-hf5/bin/activate
    pip install --no-deps torch==2.9.0 nvidia-cuda-runtime-cu12==12.8.90 \
        nvidia-cuda-cupti-cu12==12.8.90
    pip install sympy mpmath networkx jinja2 MarkupSafe fsspec \
        typing_extensions filelock
    pip install transformers==5.23.0 safetensors tokenizers numpy
    #  -> transformers 5.23.0, tokenizers 0.23.3, huggingface_hub 2.4.0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "hf"

# --------------------------------------------------------------------------------------
# Fixture specifications
# --------------------------------------------------------------------------------------

# Dimensions are deliberately all different from each other (vocab != hidden !=
# intermediate, intermediate not 4*hidden) so that transposed or swapped tensors
# cannot have a matching shape by accident.
FIXTURES = [
    dict(
        name="llama_mha_untied",
        arch="LlamaForCausalLM",
        seed=1001,
        dtype="float32",
        config=dict(
            vocab_size=128,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        tokenizer=True,
        description=(
            "LlamaForCausalLM, multi-head attention (4 heads, 4 kv heads, head_dim 8), "
            "untied lm_head, rope_theta 1e4, rms_norm_eps 1e-6, float32 weights in one "
            "model.safetensors, BPE tokenizer.json; input_ids = tokenizer encoding of 'text' "
            "(with the <s> BOS the post-processor adds)."
        ),
    ),
    dict(
        name="llama_gqa_tied",
        arch="LlamaForCausalLM",
        seed=1002,
        dtype="float16",
        seq_len=10,
        config=dict(
            vocab_size=112,
            hidden_size=32,
            intermediate_size=56,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
        ),
        description=(
            "LlamaForCausalLM, grouped-query attention (4 heads, 2 kv heads, head_dim 8), "
            "tied embeddings (no lm_head.weight in the file), rope_theta 5e5, rms_norm_eps 1e-5, "
            "float16 weights; logits computed in float32 from the float16 weights."
        ),
    ),
    dict(
        name="llama3_rope_scaling",
        arch="LlamaForCausalLM",
        seed=1003,
        dtype="bfloat16",
        seq_len=20,
        max_shard_size="100KB",
        config=dict(
            vocab_size=96,
            hidden_size=64,
            intermediate_size=88,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            # 128 > original_max_position_embeddings (transformers warns otherwise)
            max_position_embeddings=128,
            rope_theta=500000.0,
            # original_max_position_embeddings 64 (not 16): with head_dim 16 the
            # shortest wavelength is 2*pi ~ 6.28, so the high-frequency band
            # (wavelength < original/high_freq_factor) is empty unless
            # original/4 > 6.28. With 64: 1 high, 1 medium, 6 low frequencies.
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        description=(
            "LlamaForCausalLM with Llama 3.1 rope scaling (rope_type llama3, factor 8, "
            "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 64; "
            "head_dim 16 so the 8 frequencies cover all three bands: 1 high, 1 medium, 6 low), "
            "hidden 64, 4 heads, 2 kv heads, 3 layers, max_position_embeddings 128, untied, rope_theta 5e5, "
            "rms_norm_eps 1e-5, bfloat16 weights sharded over several safetensors files "
            "with model.safetensors.index.json, 20 input tokens; logits computed in float32 "
            "from the bfloat16 weights."
        ),
    ),
    dict(
        name="qwen2_bias",
        arch="Qwen2ForCausalLM",
        seed=1004,
        dtype="float32",
        seq_len=10,
        config=dict(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=40,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=2,
            bos_token_id=1,
            eos_token_id=2,
        ),
        description=(
            "Qwen2ForCausalLM: q/k/v projections with biases (o_proj without), 4 heads, "
            "2 kv heads, tied embeddings, rope_theta 1e6, rms_norm_eps 1e-6, no sliding "
            "window, float32 weights."
        ),
    ),
    dict(
        name="mistral",
        arch="MistralForCausalLM",
        seed=1005,
        dtype="float32",
        seq_len=10,
        config=dict(
            vocab_size=120,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            max_position_embeddings=64,
            rope_theta=1000000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
            bos_token_id=1,
            eos_token_id=2,
        ),
        description=(
            "MistralForCausalLM, multi-query attention (4 heads, 1 kv head), untied, "
            "sliding_window null, rope_theta 1e6, rms_norm_eps 1e-5, float32 weights."
        ),
    ),
]

TOKENIZER_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a small model reads the text and predicts the next token",
    "the cat sat on the mat and the dog sat on the log",
    "deep networks need careful normalisation of every layer",
    "we test that the rust model matches the python model",
    "rotary position embeddings rotate pairs of query and key features",
]
TOKENIZER_TEXT = "the quick model rotates the next layer"
TOKENIZER_VOCAB = 100  # <= vocab_size of llama_mha_untied (128)

TOL = 1e-4


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _dtype_kwarg():
    """transformers >= 4.56 calls it `dtype`, older versions `torch_dtype`."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def load_hf(path):
    import transformers
    torch = _torch()

    kw = {_dtype_kwarg(): torch.float32, "attn_implementation": "eager"}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), **kw)
    model.eval()
    return model


def hf_logits(model, input_ids):
    torch = _torch()
    with torch.no_grad():
        ids = torch.tensor([list(input_ids)], dtype=torch.long)
        out = model(input_ids=ids, use_cache=False)
    return out.logits[0].to(torch.float32)


def write_reference(path, payload):
    """JSON with one logits row per line; floats written with repr (the exact
    float32 values, round-trip safe)."""
    logits = payload["logits"]
    head = {k: v for k, v in payload.items() if k != "logits"}
    parts = ["{\n"] + [f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items()]
    parts.append(' "logits": [\n')
    rows = ["  [" + ", ".join(repr(float(x)) for x in row) + "]" for row in logits]
    parts.append(",\n".join(rows))
    parts.append("\n ]\n}\n")
    Path(path).write_text("".join(parts))
    # round-trip check
    back = json.loads(Path(path).read_text())
    assert back["logits"] == [[float(x) for x in row] for row in logits]


def load_safetensors_dir(path):
    """All tensors of a HF model dir (single file or sharded), as float64."""
    from safetensors import safe_open
    torch = _torch()

    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors, dtypes = {}, {}
    for f in files:
        with safe_open(str(path / f), framework="pt") as st:
            for k in st.keys():
                t = st.get_tensor(k)
                dtypes[k] = str(t.dtype).replace("torch.", "")
                tensors[k] = t.to(torch.float64)
    return tensors, dtypes, files


def rope_settings(cfg):
    """(rope_theta, scaling dict or None) from a config.json dict. transformers 4.x
    writes top-level "rope_theta" and "rope_scaling"; transformers 5 writes
    "rope_parameters" = {"rope_type", "rope_theta", scaling keys...}."""
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta"))
    scaling = cfg.get("rope_scaling")
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = params
    return float(theta), scaling


def rope_inv_freq(cfg, medium_as=None, theta=None, scaling="config"):
    """Inverse frequencies, computed like transformers (float32), incl. llama3 scaling.
    Returns (inv_freq, bands) where bands lists 'high'/'medium'/'low' per frequency
    (None without llama3 scaling). medium_as='low'|'high' is a deliberate bug for the
    sensitivity table (no smoothing in the medium band)."""
    torch = _torch()
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    cfg_theta, cfg_scaling = rope_settings(cfg)
    theta = cfg_theta if theta is None else theta
    scaling = cfg_scaling if scaling == "config" else scaling
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    if not scaling:
        return inv, None
    rtype = scaling.get("rope_type", scaling.get("type"))
    assert rtype == "llama3", rtype
    factor = scaling["factor"]
    lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wl, high_wl = old / lo, old / hi
    wl = 2 * math.pi / inv
    out = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (old / wl - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    if medium_as is None:
        out = torch.where(medium, smoothed, out)
    elif medium_as == "high":
        out = torch.where(medium, inv, out)
    bands = ["high" if w < high_wl else "low" if w > low_wl else "medium" for w in wl.tolist()]
    return out, bands


def ref_forward(cfg, W, input_ids, **bug):
    """Independent float64 forward pass of a Llama / Qwen2 / Mistral model from the
    raw safetensors tensors and config.json. `bug` switches on deliberate mistakes
    to measure how sensitive the golden logits are to them."""
    torch = _torch()
    f64 = torch.float64
    H = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"] * bug.get("eps_mult", 1.0)
    L = cfg["num_hidden_layers"]
    ids = torch.tensor(list(input_ids))
    T = len(ids)

    inv, _ = rope_inv_freq(
        cfg,
        medium_as=bug.get("medium_as"),
        theta=bug.get("theta"),
        scaling=None if bug.get("no_rope_scaling") else "config",
    )
    pos = torch.arange(T, dtype=torch.float32)
    freqs = pos[:, None] * inv[None, :]  # float32 like transformers
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().to(f64), emb.sin().to(f64)

    def rope(x):  # x: [heads, T, hd]
        if bug.get("rope_interleaved"):
            x1, x2 = x[..., 0::2], x[..., 1::2]
            c_, s_ = cos[:, : hd // 2], sin[:, : hd // 2]
            y = torch.empty_like(x)
            y[..., 0::2] = x1 * c_ - x2 * s_
            y[..., 1::2] = x2 * c_ + x1 * s_
            return y
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        rot = torch.cat([-x2, x1], dim=-1)
        return x * cos + rot * sin

    def norm(x, name):
        w = W[name]
        if bug.get("norm_weight_ones"):
            w = torch.ones_like(w)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def lin(x, name, has_bias_ok=True):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        if b is not None and not bug.get("no_bias"):
            y = y + b
        return y

    x = W["model.embed_tokens.weight"][ids]
    for l in range(L):
        p = f"model.layers.{l}."
        ln_in = p + "input_layernorm.weight"
        if bug.get("swap_layer_norms") and L > 1:
            ln_in = f"model.layers.{(l + 1) % L}.input_layernorm.weight"
        h = norm(x, ln_in)
        q = lin(h, p + "self_attn.q_proj").view(T, nh, hd).transpose(0, 1)
        k = lin(h, p + "self_attn.k_proj").view(T, nkv, hd).transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").view(T, nkv, hd).transpose(0, 1)
        q, k = rope(q), rope(k)
        if bug.get("kv_tile"):  # wrong grouping: query head i -> kv head i % nkv
            kv_idx = torch.arange(nh) % nkv
        else:  # transformers repeat_kv: query head i -> kv head i // (nh / nkv)
            kv_idx = torch.arange(nh) // (nh // nkv)
        k, v = k[kv_idx], v[kv_idx]
        s = q @ k.transpose(1, 2) / math.sqrt(hd)
        if not bug.get("no_causal_mask"):
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        a = torch.softmax(s, dim=-1) @ v  # [nh, T, hd]
        a = a.transpose(0, 1).reshape(T, nh * hd)
        x = x + lin(a, p + "self_attn.o_proj")
        h = norm(x, p + "post_attention_layernorm.weight")
        g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        if bug.get("swap_gate_up"):
            g, u = u, g
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
    x = norm(x, "model.norm.weight")
    if "lm_head.weight" in W and not bug.get("use_embed_as_head"):
        head = W["lm_head.weight"]
    else:
        head = W["model.embed_tokens.weight"]
    return x @ head.T


def sensitivity_bugs(cfg):
    other_theta = 1e4 if rope_settings(cfg)[0] != 1e4 else 5e5
    bugs = {
        "eps x10": dict(eps_mult=10.0),
        "rope interleaved pairs": dict(rope_interleaved=True),
        f"rope_theta {other_theta:g}": dict(theta=other_theta),
        "norm weights = 1": dict(norm_weight_ones=True),
        "layer input norms swapped": dict(swap_layer_norms=True),
        "gate/up swapped": dict(swap_gate_up=True),
        "no causal mask": dict(no_causal_mask=True),
    }
    if rope_settings(cfg)[1]:
        bugs["rope scaling ignored"] = dict(no_rope_scaling=True)
        bugs["llama3 medium band unsmoothed (as low)"] = dict(medium_as="low")
        bugs["llama3 medium band unsmoothed (as high)"] = dict(medium_as="high")
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if 1 < nkv < nh:
        bugs["kv heads tiled (i % n_kv)"] = dict(kv_tile=True)
    if cfg.get("model_type") == "qwen2":
        bugs["biases dropped"] = dict(no_bias=True)
    if not cfg.get("tie_word_embeddings", True):
        bugs["embeddings used as lm_head"] = dict(use_embed_as_head=True)
    return bugs


# --------------------------------------------------------------------------------------
# generate
# --------------------------------------------------------------------------------------


def build_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        min_frequency=1,
        special_tokens=["<unk>", "<s>", "</s>"],
        show_progress=False,
    )
    tok.train_from_iterator(TOKENIZER_CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    assert tok.token_to_id("<unk>") == 0 and tok.token_to_id("<s>") == 1 and tok.token_to_id("</s>") == 2
    tok.save(str(path))
    # reload from disk and encode, exactly as a consumer would
    tok = Tokenizer.from_file(str(path))
    enc = tok.encode(TOKENIZER_TEXT)
    assert tok.get_vocab_size() <= TOKENIZER_VOCAB
    assert 0 not in enc.ids, "reference text should not hit <unk>"
    assert tok.decode(enc.ids) == TOKENIZER_TEXT, tok.decode(enc.ids)
    return enc.ids, enc.tokens, tok.get_vocab_size()


def reinit_weights(model, seed):
    """Large, structured random weights so that mapping mistakes show up far above 1e-4."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = p.shape
            if name.endswith("embed_tokens.weight"):
                # per-token scale spread over two decades: small rows make rms_norm_eps
                # matter, large rows give large logits (tied head)
                row_scale = 10 ** (torch.rand(shape[0], 1, generator=g) * 2.0 - 2.0)  # 0.01 .. 1
                val = torch.randn(shape, generator=g) * row_scale * 0.5
            elif name.endswith("lm_head.weight"):
                val = torch.randn(shape, generator=g) * (1.5 / math.sqrt(shape[1]))
            elif "norm" in name:
                val = 1.0 + 0.3 * torch.randn(shape, generator=g)
            elif name.endswith(".bias"):
                val = 0.3 * torch.randn(shape, generator=g)
            elif name.endswith(".weight") and p.dim() == 2:
                val = torch.randn(shape, generator=g) * (0.9 / math.sqrt(shape[1]))
            else:
                raise ValueError(f"unexpected parameter {name} {tuple(shape)}")
            p.copy_(val)
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def generate(out_dir: Path):
    import safetensors
    import tokenizers
    import transformers
    torch = _torch()

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for spec in FIXTURES:
        name = spec["name"]
        d = out_dir / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        print(f"\n=== {name} ({spec['arch']}, weights {spec['dtype']})")

        extra = {}
        if spec.get("tokenizer"):
            input_ids, tokens, tok_vocab = build_tokenizer(d / "tokenizer.json")
            extra = dict(text=TOKENIZER_TEXT, tokens=tokens, add_special_tokens=True)
            assert tok_vocab <= spec["config"]["vocab_size"]
            print(f"tokenizer.json: vocab {tok_vocab}; {TOKENIZER_TEXT!r} -> {input_ids} {tokens}")
        else:
            g = torch.Generator().manual_seed(spec["seed"] + 7)
            input_ids = torch.randint(0, spec["config"]["vocab_size"], (spec["seq_len"],), generator=g).tolist()
            print(f"input_ids: {input_ids}")

        cls = getattr(transformers, spec["arch"])
        cfg_cls = cls.config_class
        config = cfg_cls(**spec["config"], attn_implementation="eager")
        torch.manual_seed(spec["seed"])
        model = cls(config).eval()
        reinit_weights(model, spec["seed"])

        if rope_settings(config.to_dict())[1]:
            inv, bands = rope_inv_freq(config.to_dict())
            base, _ = rope_inv_freq(config.to_dict(), scaling=None)
            wl = (2 * math.pi / base).tolist()
            for i, (b, s, w, band) in enumerate(zip(base.tolist(), inv.tolist(), wl, bands)):
                print(f"  freq {i}: wavelength {w:10.2f}  inv_freq {b:.6e} -> {s:.6e}  ({band})")
            assert set(bands) == {"high", "medium", "low"}, bands
            # cross-check against transformers' own rotary module
            hf_inv = model.model.rotary_emb.inv_freq.to(torch.float32)
            assert torch.equal(hf_inv, inv), (hf_inv, inv)

        tdtype = getattr(torch, spec["dtype"])
        save_kw = dict(safe_serialization=True)
        if spec.get("max_shard_size"):
            save_kw["max_shard_size"] = spec["max_shard_size"]
        logits_mem = hf_logits(model, input_ids)
        model.to(tdtype).save_pretrained(str(d), **save_kw)
        gen_cfg = d / "generation_config.json"
        if gen_cfg.exists():
            gen_cfg.unlink()

        # Reference logits: reload the weights as stored, compute in float32.
        ref_model = load_hf(d)
        assert ref_model.config._attn_implementation == "eager"
        logits = hf_logits(ref_model, input_ids)
        if spec["dtype"] == "float32":
            assert torch.equal(logits, logits_mem), "float32 reload changed the logits"
        else:
            lp = (logits - logits_mem).abs().max().item()
            print(f"float32 -> {spec['dtype']} rounding moved the logits by {lp:.3e} (max abs)")
            # the stored low-precision weights, upcast, must reproduce the reference exactly
            # (a fresh float32 model: model.to(float32) would keep the rotary inv_freq
            # buffer rounded to the low precision)
            torch.manual_seed(spec["seed"])
            model_up = cls(config).eval()
            with torch.no_grad():
                params = dict(model.named_parameters())
                for k, p in model_up.named_parameters():
                    p.copy_(params[k].to(torch.float32))
            assert torch.equal(hf_logits(model_up, input_ids), logits)

        # Sanity: a second fresh reload reproduces bit-exactly.
        again = hf_logits(load_hf(d), input_ids)
        assert torch.equal(again, logits)

        # Check the files on disk.
        W, dtypes, files = load_safetensors_dir(d)
        assert set(dtypes.values()) == {spec["dtype"]}, dtypes
        if spec.get("max_shard_size"):
            assert len(files) >= 2 and (d / "model.safetensors.index.json").exists(), files
        else:
            assert files == ["model.safetensors"]
        tied = spec["config"]["tie_word_embeddings"]
        assert ("lm_head.weight" in W) == (not tied), sorted(W)
        cfg_json = json.loads((d / "config.json").read_text())

        # Independent float64 implementation from the raw files.
        ref64 = ref_forward(cfg_json, W, input_ids)
        diff64 = (ref64 - logits.to(torch.float64)).abs().max().item()
        print(f"independent float64 forward vs transformers float32: max abs diff {diff64:.3e}")
        assert diff64 < TOL / 10, diff64

        print(f"logits: shape {tuple(logits.shape)}, max |logit| {logits.abs().max().item():.3f}, "
              f"std {logits.std().item():.3f}")
        print("sensitivity (max abs change of the logits; tolerance is 1e-4):")
        for label, bug in sensitivity_bugs(cfg_json).items():
            delta = (ref_forward(cfg_json, W, input_ids, **bug) - ref64).abs().max().item()
            print(f"  {label:40s} {delta:.3e}")
            assert delta > 100 * TOL, (label, delta)

        payload = dict(
            input_ids=list(input_ids),
            **extra,
            weights_dtype=spec["dtype"],
            description=spec["description"],
            logits_shape=list(logits.shape),
            logits=logits.tolist(),
        )
        write_reference(d / "reference.json", payload)
        size = sum(f.stat().st_size for f in d.iterdir())
        summary.append((name, size, sorted(p.name for p in d.iterdir())))

    versions = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        safetensors=safetensors.__version__,
        tokenizers=tokenizers.__version__,
    )
    (out_dir / "VERSIONS.json").write_text(json.dumps(versions, indent=2) + "\n")
    (out_dir / "README.md").write_text(README_TEXT)
    print("\n=== summary")
    for name, size, files in summary:
        print(f"{name:22s} {size:8d} bytes  {files}")
    total = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    print(f"total {total} bytes; versions {versions}")


README_TEXT = """\
# Hugging Face golden fixtures

Tiny random causal LMs saved by Hugging Face `transformers` (`save_pretrained`,
safetensors) together with the logits that `transformers` computes for them.
Rust tests load each directory like a Hugging Face model directory and must
reproduce `reference.json["logits"]` to a max abs diff of 1e-4 (float32).

| directory | architecture | what it covers |
|---|---|---|
| `llama_mha_untied` | LlamaForCausalLM | MHA (4/4 heads), untied lm_head, rope_theta 1e4, eps 1e-6, float32, `tokenizer.json` (BPE); input_ids = encoding of `reference.json["text"]` |
| `llama_gqa_tied` | LlamaForCausalLM | GQA (4 heads / 2 kv), tied embeddings (no `lm_head.weight`), rope_theta 5e5, eps 1e-5, float16 weights |
| `llama3_rope_scaling` | LlamaForCausalLM | `rope_scaling` llama3 (factor 8, original 64, head_dim 16: frequencies in all 3 bands), 3 layers, bfloat16 weights sharded over several files + `model.safetensors.index.json`, 20 tokens |
| `qwen2_bias` | Qwen2ForCausalLM | q/k/v biases, GQA (4/2), tied, rope_theta 1e6, no sliding window, float32 |
| `mistral` | MistralForCausalLM | MQA (4 heads / 1 kv), untied, `sliding_window: null`, rope_theta 1e6, float32 |

Each directory holds `config.json` (as written by `save_pretrained`), the
safetensors weights and `reference.json`:

```json
{"input_ids": [...], "weights_dtype": "float32|float16|bfloat16",
 "description": "...", "logits_shape": [tokens, vocab],
 "logits": [[...], ...]}
```

`logits[t]` are the float32 logits at position `t` for the batch of one
sequence `input_ids`, computed with eager attention from the weights as stored
(float16/bfloat16 weights upcast to float32). Weights are re-initialised with
large random values (norm weights around 1, random biases), so any mapping
mistake moves the logits by far more than 1e-4; `generate` prints how much.
`VERSIONS.json` records the library versions used.

Regenerate (deterministic; see the docstring of the script for installing
torch / transformers 4.57.x):

    python scripts/hf_fixtures.py generate

Check that a model directory exported by the Rust code loads in `transformers`
and gives the same logits (exit code 0 when max abs diff <= tol):

    python scripts/hf_fixtures.py check-export DIR --reference FILE [--tol 1e-4]
"""


# --------------------------------------------------------------------------------------
# check-export
# --------------------------------------------------------------------------------------


def check_export(directory, reference, tol):
    torch = _torch()
    import transformers

    ref = json.loads(Path(reference).read_text())
    input_ids = ref["input_ids"]
    expected = torch.tensor(ref["logits"], dtype=torch.float32)
    model = load_hf(directory)
    got = hf_logits(model, input_ids)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"model: {type(model).__name__} from {directory}")
    if tuple(got.shape) != tuple(expected.shape):
        print(f"FAIL: logits shape {tuple(got.shape)} != reference {tuple(expected.shape)}")
        return 1
    diff = (got - expected).abs().max().item()
    argmax_same = (got.argmax(-1) == expected.argmax(-1)).float().mean().item()
    print(f"max abs diff {diff:.6e} (tol {tol:g}); argmax agreement {argmax_same:.0%}")
    if diff <= tol:
        print("OK")
        return 0
    print("FAIL")
    return 1


# --------------------------------------------------------------------------------------
# build-cuda-stubs
# --------------------------------------------------------------------------------------

# SONAMEs whose symbols torch references without symbol versions -> symbol prefix
UNVERSIONED_PREFIXES = {
    "libcufile.so.0": "cuFile",
    "libcusparseLt.so.0": "cusparseLt",
    "libnccl.so.2": "nccl",
    "libcurand.so.10": "curand",
    "libnvshmem_host.so.3": "nvshmem",
}


def build_cuda_stubs(out):
    """Stub shared libraries for the CUDA libraries a PyPI (CUDA) torch wheel links
    against but that are not installed, so that `import torch` works for CPU use.
    Every stub function aborts with a message if it is ever called."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    torch_lib = Path(spec.origin).parent / "lib"
    libs = sorted(str(p) for p in torch_lib.glob("*.so"))
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    ldd = subprocess.run(["ldd", *libs], capture_output=True, text=True, env=env).stdout
    missing = sorted(set(re.findall(r"^\s*(\S+) => not found", ldd, re.M)) - {"libcuda.so.1"})
    print("missing:", missing)
    ver2file, syms = {}, {}
    for lib in libs:
        cur = None
        for line in subprocess.run(["readelf", "-V", "-W", lib], capture_output=True, text=True).stdout.splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                cur = m.group(1)
                continue
            m = re.search(r"Name: (\S+)\s+Flags", line)
            if m and cur:
                ver2file[m.group(1)] = cur
        for line in subprocess.run(["readelf", "--dyn-syms", "-W", lib], capture_output=True, text=True).stdout.splitlines():
            p = line.split()
            if len(p) < 8 or p[6] != "UND" or p[4] == "WEAK":
                continue
            typ, name = p[3], p[7]
            if "@" in name:
                s, v = name.split("@", 1)
                f = ver2file.get(v)
                if f in missing:
                    syms.setdefault(f, {})[s] = (typ, v)
            else:
                for so, prefix in UNVERSIONED_PREFIXES.items():
                    if so in missing and name.startswith(prefix):
                        syms.setdefault(so, {})[name] = (typ, None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for so in missing:
        d = syms.get(so, {})
        src = ["#include <stdio.h>", "#include <stdlib.h>",
               'static void stub_fail(const char *n) { fprintf(stderr, "CPU-only stub ' + so
               + ' called: %s\\n", n); abort(); }']
        vers = {}
        for name, (typ, v) in sorted(d.items()):
            src.append(f"char {name}[256];" if typ == "OBJECT"
                       else f'int {name}(void) {{ stub_fail("{name}"); return 1; }}')
            vers.setdefault(v, []).append(name)
        c_file = out / (so + ".c")
        c_file.write_text("\n".join(src) + "\n")
        cmd = ["gcc", "-shared", "-fPIC", "-O0", "-o", str(out / so), str(c_file), "-Wl,-soname," + so]
        named = [v for v in vers if v is not None]
        if named:
            assert None not in vers, so
            m = out / (so + ".map")
            m.write_text("\n".join(v + " { global: " + " ".join(n + ";" for n in vers[v]) + " };" for v in named) + "\n")
            cmd.append("-Wl,--version-script=" + str(m))
        subprocess.run(cmd, check=True)
        print(f"built {so}: {len(d)} symbols, versions {named}")
    print(f"export LD_LIBRARY_PATH={out.resolve()}")


# --------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the golden fixtures")
    g.add_argument("--out", type=Path, default=DEFAULT_OUT)
    c = sub.add_parser("check-export", help="compare a model directory with reference logits")
    c.add_argument("dir", type=Path)
    c.add_argument("--reference", type=Path, required=True)
    c.add_argument("--tol", type=float, default=TOL)
    s = sub.add_parser("build-cuda-stubs", help="stub CUDA libraries so a CUDA torch wheel imports without them")
    s.add_argument("dir", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "generate":
        generate(args.out)
        return 0
    if args.cmd == "check-export":
        return check_export(args.dir, args.reference, args.tol)
    if args.cmd == "build-cuda-stubs":
        build_cuda_stubs(args.dir)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
