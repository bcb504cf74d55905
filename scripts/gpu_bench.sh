#!/usr/bin/env bash
# The GPU benchmark in two steps, for a GPU machine that has no Rust toolchain and no network
# (build where Rust is, run where the GPU is):
#
#   bash scripts/gpu_bench.sh prepare   # here: build bench and train with wgpu/Vulkan and CUDA
#                                       # (offline: scripts/cuda-offline.toml) and the autotune
#                                       # cache (needs libclang-dev), strip, xz -> .gpu/;
#                                       # with LIBTORCH set, also bench-tch (the `tch` feature)
#   bash scripts/gpu_bench.sh run       # there: every route at the paper's micro-batch, then
#                                       # PyTorch on the same GPU, in one device call (at most 8
#                                       # minutes on an H100), packed into one file
#
# `run` measures, in this order, each route in its own process with its own timeout, and never
# stops at one's failure (it is recorded in summary.txt and the script goes on): the crate's bench
# on ROUTES (device:precision pairs; default cuda:bf16-mixed, cuda:f32, vulkan:f16-mixed,
# vulkan:f32, wgpu:f32), PyTorch eager bf16 and `torch.compile` bf16 (scripts/torch_bench.py), a
# kernel profile of the first route, and, with MAIN=1, the main command on each device. Each bench
# record holds tokens/s, MFU, the device memory pool's peak, and the step's launches by op family.
# No route runs past TIME_BUDGET seconds (420) from the start (its timeout is cut to what is
# left); the routes left then are recorded as not run. Everything is packed into one file, PACK
# (default `$OUT/gpu_bench.tar.xz` where the device tool sets OUT, else `.gpu/gpu_bench.tar.xz`),
# with summary.txt at its top; a pack that cannot be written is said in summary.txt, and the
# script still ends with 0. Bad settings (ROUTE_TIMEOUT, TIME_BUDGET) are refused before any
# work; a second run on the same RESULTS is refused while the first runs.
#
# cuda f32 is CubeCL's f32 matmul, which may run on TF32 tensor cores; PyTorch's f32 figures are
# not taken here (its default is full-f32 matmuls), so compare f32 with f32 only within the crate.
#
# `run` needs the `.gpu` folder (and `.gl`, the Vulkan loader debs, where the machine has no
# libvulkan: see the device tool's README), the repository's scripts, and a python3 with torch and
# transformers (its pip packages also bring NVRTC, which the CUDA route loads). Settings: MODEL
# (default 130m), SEQ (256), BATCH (64), ITERS (5 timed steps after 2 warm-up), PEAK_TFLOPS (989,
# an H100 SXM's dense bf16 peak), ROUTES, TORCH_DEVICE (cuda), ROUTE_TIMEOUT (120 s per route),
# TIME_BUDGET (420 s), MAIN (0), BENCH (.gpu/bench), RESULTS (.gpu/results, the unpacked files).
# `DRY_RUN=1 bash scripts/gpu_bench.sh run` runs the same steps on the CPU (flex) at a tiny size
# (defaults MODEL=tiny SEQ=32 BATCH=2 ITERS=2 ROUTES="flex:f32 flex:bf16-mixed", each overridable),
# with BENCH pointing at any built bench example; CI runs it (tests/step_cost.rs).
#
# LibTorch: `prepare` builds `bench-tch` against the LibTorch in `LIBTORCH` (a folder with
# include/ and lib/, e.g. an unpacked torch wheel's `torch/`). The GPU machine's torch is 2.11 and
# tch 0.22 expects 2.9, so for it: `LIBTORCH=<wheel>/torch LIBTORCH_BYPASS_VERSION_CHECK=1`; the
# link leaves the wheel's CUDA libraries unresolved here, to be found there. `run` then trains the
# bench on `tch-cuda` with torch's own libraries (python3's torch/lib) in bf16.
set -euo pipefail
cd "$(dirname "$0")/.."

# A dry run rehearses on the CPU at a tiny size: its defaults (each still overridable).
if [ "${DRY_RUN:-0}" = 1 ]; then
  : "${MODEL:=tiny}" "${SEQ:=32}" "${BATCH:=2}" "${ITERS:=2}" "${ROUTES:=flex:f32 flex:bf16-mixed}"
  : "${TORCH_DEVICE:=cpu}" "${PEAK_TFLOPS:=1}"
fi
MODEL="${MODEL:-130m}" SEQ="${SEQ:-256}" BATCH="${BATCH:-64}" ITERS="${ITERS:-5}"
PEAK_TFLOPS="${PEAK_TFLOPS:-989}" TORCH_DEVICE="${TORCH_DEVICE:-cuda}"
ROUTES="${ROUTES:-cuda:bf16-mixed cuda:f32 vulkan:f16-mixed vulkan:f32 wgpu:f32}"
ROUTE_TIMEOUT="${ROUTE_TIMEOUT:-120}" TIME_BUDGET="${TIME_BUDGET:-420}" MAIN="${MAIN:-0}" BENCH="${BENCH:-.gpu/bench}"
RESULTS="${RESULTS:-.gpu/results}"
PACK="${PACK:-${OUT:-.gpu}/gpu_bench.tar.xz}"
for setting in ROUTE_TIMEOUT TIME_BUDGET; do
  if ! [[ "${!setting}" =~ ^[0-9]+$ ]] || [ "${!setting}" -eq 0 ]; then
    echo "gpu_bench.sh: $setting must be a whole number of seconds above 0, not '${!setting}'" >&2
    exit 2
  fi
done

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
  # One run at a time per results folder: a second would mix its files into this one's pack.
  mkdir -p "$(dirname "$RESULTS")"
  exec 9>"$RESULTS.lock"
  if ! flock -n 9; then
    echo "gpu_bench.sh: another run is using $RESULTS; wait for it or give another RESULTS" >&2
    exit 1
  fi
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
  # Autotuning tries every candidate kernel on first use: minimal keeps the first step short.
  export CUBECL_AUTOTUNE_LEVEL="${CUBECL_AUTOTUNE_LEVEL:-minimal}"
  # NVRTC for the CUDA route: PyTorch's pip packages bring it (nvidia/*/lib).
  nvrtc=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, sys
for base in sys.path:
    for hit in sorted(glob.glob(os.path.join(base, "nvidia", "**", "libnvrtc.so*"), recursive=True)):
        print(os.path.dirname(hit)); raise SystemExit
PY
)
  if [ -n "$nvrtc" ]; then export LD_LIBRARY_PATH="$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  rm -rf "$RESULTS"
  mkdir -p "$RESULTS"
  summary="$RESULTS/summary.txt"
  started=$SECONDS
  say() { echo "$*" | tee -a "$summary"; }
  say "gpu_bench run: model $MODEL, batch $BATCH x seq $SEQ, $ITERS timed steps; $(date -u +%FT%TZ)"
  if command -v nvidia-smi >/dev/null; then
    say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  else
    say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  fi
  # `attempt NAME TIMEOUT COMMAND...`: runs the command with its output in NAME.log, for at most
  # TIMEOUT seconds and never past the time budget; records how it ended. Never fails the script.
  attempt() {
    local name=$1 limit=$2 rc=0 begun=$SECONDS
    shift 2
    local left=$((TIME_BUDGET - (SECONDS - started)))
    if [ "$left" -le 0 ]; then
      say "$name: not run (the ${TIME_BUDGET} s budget was spent)"
      return 0
    fi
    [ "$limit" -le "$left" ] || limit=$left
    timeout --kill-after=5 "$limit" "$@" >"$RESULTS/$name.log" 2>&1 || rc=$?
    local took=$((SECONDS - begun))
    # The reason: the first line that says error, else the last line.
    local why
    why=$(grep -m1 -i 'error' "$RESULTS/$name.log" || tail -1 "$RESULTS/$name.log")
    case $rc in
      0) say "$name: done in $took s" ;;
      124 | 137) say "$name: stopped after $limit s (timeout)" ;;
      *) say "$name: failed with exit $rc after $took s: $why" ;;
    esac
    return 0
  }
  common=(--model "$MODEL" --seq-len "$SEQ" --batch-size "$BATCH" --iters "$ITERS" --warmup-iters 2 --peak-tflops "$PEAK_TFLOPS")
  # Each route also writes the model's Hugging Face config for PyTorch (before it measures), so
  # that one route's failure does not leave PyTorch without it.
  for route in $ROUTES; do
    device=${route%%:*} precision=${route#*:}
    attempt "bench-$device-$precision" "$ROUTE_TIMEOUT" "$BENCH" "${common[@]}" --device "$device" \
      --precision "$precision" --json "$RESULTS/bench-$device-$precision.json" --hf-config "$RESULTS/config.json"
  done
  for mode in eager compile; do
    flag=""; [ "$mode" = compile ] && flag=--compile
    attempt "torch-bf16-$mode" "$ROUTE_TIMEOUT" python3 scripts/torch_bench.py --config "$RESULTS/config.json" \
      --seq-len "$SEQ" --batch-size "$BATCH" --iters "$ITERS" --warmup-iters 2 --device "$TORCH_DEVICE" \
      --dtype bf16 --peak-tflops "$PEAK_TFLOPS" --json "$RESULTS/torch.json" $flag
  done
  read -r first _ <<<"$ROUTES"
  attempt "kernels-${first/:/-}" "$ROUTE_TIMEOUT" "$BENCH" "${common[@]}" --device "${first%%:*}" \
    --precision "${first#*:}" --iters 2 --warmup-iters 1 --kernel-profile --json "$RESULTS/kernels.json"
  if [ -x .gpu/bench-tch ]; then
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null || true)
    tch_device=tch-cuda; [ "${DRY_RUN:-0}" = 1 ] && tch_device=tch
    attempt bench-tch "$ROUTE_TIMEOUT" env LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      .gpu/bench-tch "${common[@]}" --device "$tch_device" --precision bf16 --json "$RESULTS/bench-tch.json"
  fi
  if [ "$MAIN" = 1 ]; then
    for device in $(for route in $ROUTES; do echo "${route%%:*}"; done | sort -u); do
      attempt "main-$device" "$ROUTE_TIMEOUT" .gpu/train --device "$device" --out "$RESULTS/main-$device" --overwrite
      say "  $(grep -o 'validation loss [0-9.]*' "$RESULTS/main-$device.log" 2>/dev/null | tail -1 || true)"
    done
  fi
  # Every record in one file, and the ratio table against PyTorch.
  python3 - "$RESULTS" <<'PY' || say "could not merge the records (python3 failed)"
import glob, json, os, sys
results = sys.argv[1]
records = []
for path in sorted(glob.glob(os.path.join(results, "bench-*.json"))):
    with open(path) as f:
        records += json.load(f)
with open(os.path.join(results, "burn.json"), "w") as f:
    json.dump(records, f, indent=1)
PY
  [ -f "$RESULTS/torch.json" ] || echo '[]' >"$RESULTS/torch.json"
  attempt ratios 60 "$BENCH" --records "$RESULTS/burn.json" --compare "$RESULTS/torch.json"
  cat "$RESULTS/ratios.log" >>"$summary" 2>/dev/null || true
  say "total: $((SECONDS - started)) s; packing into $PACK"
  if mkdir -p "$(dirname "$PACK")" 2>/dev/null && tar -C "$RESULTS" -cJf "$PACK" . 2>"$RESULTS/pack.log"; then
    echo "packed into $PACK ($(du -h "$PACK" | cut -f1))"
  else
    say "could not pack into $PACK: $(head -1 "$RESULTS/pack.log" 2>/dev/null); the files are in $RESULTS"
  fi
  ;;
*)
  echo "usage: bash scripts/gpu_bench.sh prepare|run   (see the comments at the top)" >&2
  exit 2
  ;;
esac
