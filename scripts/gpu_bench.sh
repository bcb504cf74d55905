#!/usr/bin/env bash
# The GPU benchmark in two steps, for a GPU machine that has no Rust toolchain and no network
# (build where Rust is, run where the GPU is):
#
#   bash scripts/gpu_bench.sh prepare   # here: build the bench with wgpu/Vulkan, strip, xz -> .gpu/
#   bash scripts/gpu_bench.sh run       # there: unpack, time the 130m preset at seq 256 in f32 and
#                                       # bf16 on vulkan and wgpu, then PyTorch eager and compiled
#                                       # on the same GPU, and print the ratio table
#
# `run` needs the `.gpu` folder (and `.gl`, the Vulkan loader debs, where the machine has no
# libvulkan: see the device tool's README), the repository's scripts, and a python3 with torch and
# transformers. Settings: MODEL (default 130m), SEQ (256), BATCH (16), ITERS (10), PEAK_TFLOPS
# (989, an H100 SXM's dense bf16 peak), DEVICES (vulkan,wgpu), TORCH_DEVICE (cuda).
# `DRY_RUN=1 bash scripts/gpu_bench.sh run` runs the same steps on the CPU at a tiny size.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${MODEL:-130m}" SEQ="${SEQ:-256}" BATCH="${BATCH:-16}" ITERS="${ITERS:-10}"
PEAK_TFLOPS="${PEAK_TFLOPS:-989}" DEVICES="${DEVICES:-vulkan,wgpu}" TORCH_DEVICE="${TORCH_DEVICE:-cuda}"
OUT="${OUT:-.gpu/results}"

case "${1:-}" in
prepare)
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lns-target}"
  cargo build --release --example bench --features vulkan
  mkdir -p .gpu
  cp "$CARGO_TARGET_DIR/release/examples/bench" .gpu/bench
  strip .gpu/bench
  xz -9 -f .gpu/bench
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  ls -l .gpu
  ;;
run)
  if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  bench=.gpu/bench
  [ -x "$bench" ] || { xz -dkf .gpu/bench.xz && chmod +x "$bench"; }
  if [ "${DRY_RUN:-0}" = 1 ]; then
    MODEL=tiny SEQ=32 BATCH=2 ITERS=2 DEVICES=flex TORCH_DEVICE=cpu PEAK_TFLOPS=1
  fi
  mkdir -p "$OUT"
  common=(--model "$MODEL" --seq-len "$SEQ" --batch-size "$BATCH" --iters "$ITERS" --peak-tflops "$PEAK_TFLOPS")
  "$bench" "${common[@]}" --device "$DEVICES" --hf-config "$OUT/config.json" --json "$OUT/burn.json"
  rm -f "$OUT/torch.json"
  for dtype in f32 bf16; do
    for mode in "" --compile; do
      python3 scripts/torch_bench.py --config "$OUT/config.json" --seq-len "$SEQ" --batch-size "$BATCH" \
        --iters "$ITERS" --device "$TORCH_DEVICE" --dtype "$dtype" --peak-tflops "$PEAK_TFLOPS" \
        --json "$OUT/torch.json" $mode || echo "torch_bench.py $dtype $mode failed"
    done
  done
  "$bench" --records "$OUT/burn.json" --compare "$OUT/torch.json" | tee "$OUT/ratios.txt"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
  ;;
*)
  echo "usage: bash scripts/gpu_bench.sh prepare|run   (see the comments at the top)" >&2
  exit 2
  ;;
esac
