#!/usr/bin/env python3
"""The PyTorch reference for `examples/bench.rs`: a training step of the same model.

The model is transformers' causal LM of the `config.json` that the bench writes (`--hf-config`):
`LlamaForCausalLM`, or `Qwen2ForCausalLM` for a model with q/k/v biases, so both sides run the
same sizes and the same init std; the step is forward, cross-entropy in f32, backward and AdamW
(betas 0.9/0.999, eps 1e-8, no weight decay), on random tokens, with `--threads` compute threads.
It prints the figures and writes the same JSON record as the bench, which `bench --compare FILE`
reads. `--compile` runs the step under `torch.compile`.

    python3 -m venv V && V/bin/pip install torch==2.9.0 numpy safetensors "transformers>=4.50,<5"
    V/bin/python scripts/torch_bench.py --config runs/bench/9m.json --seq-len 256 --batch-size 8 \
        --threads 2 --json runs/bench/torch.json

A LNS model needs no other script: its factors fold into the norm weights (the same computation).
"""

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import sys
import time


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="Hugging Face config.json (bench --hf-config)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    # bf16: the whole model in bfloat16 (the paper's pure bf16); *-mixed: an f32 model under
    # torch.autocast (f16 with a GradScaler), as the crate's --precision of the same name.
    parser.add_argument("--dtype", choices=["f32", "bf16", "bf16-mixed", "f16-mixed"], default="f32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the step")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup-iters", type=int, default=3)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--json", default=None, help="write the record here (appended to a list if it exists)")
    args = parser.parse_args()
    if args.iters < 1 or args.batch_size < 1 or args.seq_len < 1:
        sys.exit("error: --iters, --batch-size and --seq-len must be at least 1")

    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        with open(args.config) as f:
            fields = json.load(f)
        # The architecture the bench wrote (llama, or qwen2 for a model with q/k/v biases).
        config = AutoConfig.for_model(fields.pop("model_type", "llama"), **fields)
    except (OSError, ValueError, TypeError, AttributeError) as e:
        sys.exit(f"error: {args.config}: {e}")
    torch.manual_seed(1)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    autocast = {"bf16-mixed": torch.bfloat16, "f16-mixed": torch.float16}.get(args.dtype)
    device = torch.device(args.device)
    model = AutoModelForCausalLM.from_config(config).to(device=device, dtype=dtype)
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    tokens = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    scaler = torch.amp.GradScaler(device.type, enabled=autocast == torch.float16)

    def step():
        with torch.autocast(device.type, dtype=autocast) if autocast else contextlib.nullcontext():
            logits = model(input_ids=inputs).logits
            loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size), targets.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
        optim.zero_grad(set_to_none=True)
        return loss

    run = torch.compile(step) if args.compile else step
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(args.warmup_iters + args.iters):
        start = time.perf_counter()
        run()
        sync()
        if i >= args.warmup_iters:
            times.append((time.perf_counter() - start) * 1e3)
    step_ms = statistics.median(times)
    tokens_per_second = args.batch_size * args.seq_len / (step_ms / 1e3)
    parameters = sum(p.numel() for p in model.parameters())
    layers, d_model = config.num_hidden_layers, config.hidden_size
    flops_per_token = 6 * parameters + 12 * layers * d_model * args.seq_len
    tflops = flops_per_token * tokens_per_second / 1e12
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    record = {
        "framework": f"pytorch {torch.__version__} {'compiled' if args.compile else 'eager'}",
        "device": args.device,
        "dtype": args.dtype,
        "n_layers": layers,
        "d_model": d_model,
        "vocab_size": config.vocab_size,
        "parameters": parameters,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "step_ms": step_ms,
        "tokens_per_second": tokens_per_second,
        "peak_memory_bytes": peak,
        "tflops": tflops,
        "mfu": tflops / args.peak_tflops if args.peak_tflops else None,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu": cpu_model(),
    }
    print(
        f"{record['framework']} on {args.device} ({args.dtype}, {record['threads']} threads): {layers} layers x "
        f"d_model {d_model} ({parameters} parameters), batch {args.batch_size} x seq {args.seq_len}: "
        f"{step_ms:.1f} ms/step, {tokens_per_second:.0f} tokens/s, {tflops:.3f} TFLOP/s, peak {peak / 2**20:.0f} MiB"
    )
    if args.json:
        records = []
        if os.path.exists(args.json):
            with open(args.json) as f:
                previous = json.load(f)
            records = previous if isinstance(previous, list) else [previous]
        records.append(record)
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        tmp = f"{args.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(records, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
