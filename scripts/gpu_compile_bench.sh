#!/usr/bin/env bash
# Device call (issue 17): bench/torch_compile_bench.py side by side in one
# call of < 10 min: eager, torch.compile default, max-autotune-no-cudagraphs
# and backend="dice" (tune-sync, rest="inductor"), first calls from a cold
# Inductor cache. Builds only what the backend needs (~2 min cold, seconds
# warm), then runs the bench until LIMIT_S seconds after the start, so the
# call returns inside the device tool's 600 s; logs and JSONL go to $OUT.
# Env:
#   BENCH_ARGS  the bench's workloads, e.g. "--gpt2 --gpt2-fp32" or
#               "level2/12_Gemm_Multiply_LeakyReLU.py ..." (relative to --kb)
#   VARIANTS    default eager,inductor,max-autotune,dice
#   LIMIT_S     default 570
#   PYTEST_K    also run the backend's GPU tests whose names match this
#               pytest -k expression, in the time left (empty: none)
# Run as: bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh env BENCH_ARGS="--gpt2" bash scripts/gpu_compile_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
VARIANTS=${VARIANTS:-eager,inductor,max-autotune,dice}
LIMIT_S=${LIMIT_S:-570}
mkdir -p "$OUT"
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
BUILD_TARGETS="dice dice-worker dice_torch_ext" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "[compile-bench] build $(elapsed) s"
source scripts/deps_env.sh
left=$(( LIMIT_S - $(elapsed) ))
[ -n "${PYTEST_K:-}" ] && left=$(( left - 120 ))
# shellcheck disable=SC2086
DICE_LOG_LEVEL=info PYTHONPATH=torch_ext/python timeout "$left" python3 -u bench/torch_compile_bench.py \
  --kb .deps/kernelbench $BENCH_ARGS --variants "$VARIANTS" --cold-inductor-cache --cache /tmp/dc \
  --time-budget-s $(( left - 30 )) --out "$OUT/compile_bench.jsonl" > "$OUT/compile_bench.log" 2>&1
echo "[compile-bench] bench rc=$? at $(elapsed) s"
grep -E "^\| |geomean" "$OUT/compile_bench.log" | tail -40
if [ -n "${PYTEST_K:-}" ]; then
  left=$(( LIMIT_S - $(elapsed) ))
  DICE_TORCH_LIB=$PWD/build/torch_ext/libdice_torch_ext.so PYTHONPATH=torch_ext/python DICE_CACHE_DIR=/tmp/dc-pytest \
    timeout "$left" python3 -m pytest -q -rs -p no:cacheprovider -m gpu -k "$PYTEST_K" tests/torch_ext/python \
    > "$OUT/pytest_gpu.log" 2>&1
  echo "[compile-bench] pytest -m gpu -k '$PYTEST_K' rc=$? at $(elapsed) s"
  tail -15 "$OUT/pytest_gpu.log"
fi
