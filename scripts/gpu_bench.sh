#!/usr/bin/env bash
# The GPU benchmark in two steps, for a GPU machine that has no Rust toolchain and no network
# (build where Rust is, run where the GPU is):
#
#   bash scripts/gpu_bench.sh prepare   # here: build bench and train with wgpu/Vulkan and CUDA
#                                       # (offline: scripts/cuda-offline.toml) and the autotune
#                                       # cache (needs libclang-dev), strip, xz -> .gpu/;
#                                       # with LIBTORCH set, also bench-tch (the `tch` feature)
#   bash scripts/gpu_bench.sh run       # there: unpack; the main command on each route (its
#                                       # validation loss beside flex's 0.8163); the 130m preset at
#                                       # seq 256 in every precision on each route, a per-kernel
#                                       # profile on the first route (kernels.txt), then PyTorch
#                                       # eager and compiled on the same GPU; the ratio table
#
# `run` needs the `.gpu` folder (and `.gl`, the Vulkan loader debs, where the machine has no
# libvulkan: see the device tool's README), the repository's scripts, and a python3 with torch and
# transformers (its pip packages also bring NVRTC, which the CUDA route loads). Settings: MODEL
# (default 130m), SEQ (256), BATCH (16), ITERS (10), PEAK_TFLOPS (989, an H100 SXM's dense bf16
# peak), DEVICES (cuda,vulkan,wgpu), TORCH_DEVICE (cuda), MAIN_TIMEOUT (150 s per main command),
# PROFILE_PRECISION (f32) and PROFILE_TIMEOUT (180 s) for the kernel profile.
# `DRY_RUN=1 bash scripts/gpu_bench.sh run` runs the same steps on the CPU at a tiny size.
#
# LibTorch: `prepare` builds `bench-tch` against the LibTorch in `LIBTORCH` (a folder with
# include/ and lib/, e.g. an unpacked torch wheel's `torch/`). The GPU machine's torch is 2.11 and
# tch 0.22 expects 2.9, so for it: `LIBTORCH=<wheel>/torch LIBTORCH_BYPASS_VERSION_CHECK=1`; the
# link leaves the wheel's CUDA libraries unresolved here, to be found there. `run` then trains the
# bench on `tch-cuda` with torch's own libraries (python3's torch/lib) in f32 and bf16.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${MODEL:-130m}" SEQ="${SEQ:-256}" BATCH="${BATCH:-16}" ITERS="${ITERS:-10}"
PEAK_TFLOPS="${PEAK_TFLOPS:-989}" DEVICES="${DEVICES:-cuda,vulkan,wgpu}" TORCH_DEVICE="${TORCH_DEVICE:-cuda}"
MAIN_TIMEOUT="${MAIN_TIMEOUT:-150}" PROFILE_TIMEOUT="${PROFILE_TIMEOUT:-180}" PROFILE_PRECISION="${PROFILE_PRECISION:-f32}"
OUT="${OUT:-.gpu/results}"

case "${1:-}" in
prepare)
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lns-target}"
  # One build for every GPU route; the offline CUDA config rewrites Cargo.lock, put back after.
  cp Cargo.lock "$CARGO_TARGET_DIR/Cargo.lock.before-cuda"
  trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.before-cuda" Cargo.lock' EXIT
  # With CubeCL's autotune cache (libclang-dev here for its build): the routes' main commands tune
  # the kernels once, the benches after them read the results (target/environment/default.db).
  cargo build --release --config scripts/cuda-offline.toml --features vulkan,cuda-nvrtc,autotune-cache \
    --example bench --example train
  mkdir -p .gpu
  for program in bench train; do
    cp "$CARGO_TARGET_DIR/release/examples/$program" ".gpu/$program"
    strip ".gpu/$program"
    xz -9 -f ".gpu/$program"
  done
  cp "$CARGO_TARGET_DIR/Cargo.lock.before-cuda" Cargo.lock
  if [ -n "${LIBTORCH:-}" ]; then
    # Its own target dir: the tch feature changes features of crates the other build shares.
    RUSTFLAGS="-C link-arg=-Wl,--allow-shlib-undefined" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/tch" \
      cargo build --release --features tch --example bench
    cp "$CARGO_TARGET_DIR/tch/release/examples/bench" .gpu/bench-tch
    strip .gpu/bench-tch
    xz -9 -f .gpu/bench-tch
  fi
  mkdir -p .git/info && { grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude; }
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
  for program in bench train bench-tch; do
    [ -f ".gpu/$program.xz" ] || continue
    [ -x ".gpu/$program" ] || { xz -dkf ".gpu/$program.xz" && chmod +x ".gpu/$program"; }
  done
  bench=.gpu/bench
  if [ "${DRY_RUN:-0}" = 1 ]; then
    MODEL=tiny SEQ=32 BATCH=2 ITERS=2 DEVICES=flex TORCH_DEVICE=cpu PEAK_TFLOPS=1 MAIN_TIMEOUT=300
  fi
  # NVRTC for the CUDA route: PyTorch's pip packages bring it (nvidia/*/lib).
  nvrtc=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, sys
for base in sys.path:
    for hit in sorted(glob.glob(os.path.join(base, "nvidia", "**", "libnvrtc.so*"), recursive=True)):
        print(os.path.dirname(hit)); raise SystemExit
PY
)
  [ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mkdir -p "$OUT"
  # The main command on each route: does it finish, how long, which validation loss.
  : >"$OUT/main.txt"
  for device in ${DEVICES//,/ }; do
    start=$SECONDS
    rc=0
    timeout "$MAIN_TIMEOUT" .gpu/train --device "$device" --out "$OUT/main-$device" --overwrite \
      >"$OUT/main-$device.log" 2>&1 || rc=$?
    seconds=$((SECONDS - start))
    loss=$(grep -o 'validation loss [0-9.]*' "$OUT/main-$device.log" | tail -1)
    echo "main command on $device: exit $rc in $seconds s; ${loss:-no validation loss}" | tee -a "$OUT/main.txt"
    [ "$rc" = 0 ] || tail -5 "$OUT/main-$device.log"
  done
  common=(--model "$MODEL" --seq-len "$SEQ" --batch-size "$BATCH" --iters "$ITERS" --peak-tflops "$PEAK_TFLOPS")
  "$bench" "${common[@]}" --device "$DEVICES" --hf-config "$OUT/config.json" --json "$OUT/burn.json"
  # Where the device time goes, kernel by kernel, on the first route (autotuning again first).
  timeout "$PROFILE_TIMEOUT" "$bench" "${common[@]}" --device "${DEVICES%%,*}" --precision "$PROFILE_PRECISION" \
    --iters 3 --warmup-iters 1 --kernel-profile --json "$OUT/kernels.json" | tee "$OUT/kernels.txt" ||
    echo "kernel profile on ${DEVICES%%,*} failed or ran past $PROFILE_TIMEOUT s"
  if [ -x .gpu/bench-tch ]; then
    # LibTorch from python3's torch (its lib folder holds libtorch and the CUDA libraries it loads).
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
      echo "python3 has no torch: bench-tch finds no LibTorch"
    tch_device=tch-cuda; [ "${DRY_RUN:-0}" = 1 ] && tch_device=tch
    LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" .gpu/bench-tch "${common[@]}" \
      --device "$tch_device" --json "$OUT/burn-tch.json" || echo "bench-tch on $tch_device failed"
  fi
  rm -f "$OUT/torch.json"
  for dtype in f32 bf16 bf16-mixed; do
    for mode in "" --compile; do
      python3 scripts/torch_bench.py --config "$OUT/config.json" --seq-len "$SEQ" --batch-size "$BATCH" \
        --iters "$ITERS" --device "$TORCH_DEVICE" --dtype "$dtype" --peak-tflops "$PEAK_TFLOPS" \
        --json "$OUT/torch.json" $mode || echo "torch_bench.py $dtype $mode failed"
    done
  done
  "$bench" --records "$OUT/burn.json" --compare "$OUT/torch.json" | tee "$OUT/ratios.txt"
  if [ -f "$OUT/burn-tch.json" ]; then
    "$bench" --records "$OUT/burn-tch.json" --compare "$OUT/torch.json" | tee -a "$OUT/ratios.txt"
  fi
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
  fi
  ;;
*)
  echo "usage: bash scripts/gpu_bench.sh prepare|run   (see the comments at the top)" >&2
  exit 2
  ;;
esac
