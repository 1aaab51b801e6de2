#!/usr/bin/env bash
# One benchmark chunk, sized for one device call (< 10 min):
#   bash bench/run_chunk.sh level1/19_ReLU.py level1/23_Softmax.py ...
# Builds what it needs, warms torch.compile's caches in parallel (CPU-bound
# compiles), then times every task sequentially (eager, torch.compile,
# dice tune + the cached model) so timings never overlap. Results:
# $OUT/results.jsonl and the markdown table $OUT/table.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
KB=${KB:-.deps/kernelbench}
mkdir -p "$OUT"
if [ ! -x build/cli/dice ]; then
  BUILD_TARGETS="dice dice-worker dice_torch_ext" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 \
    || { tail -60 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
tasks=()
for t in "$@"; do tasks+=("$KB/$t"); done
t0=$(date +%s)
printf '%s\n' "${tasks[@]}" | timeout "${WARM_S:-150}" xargs -P "${WARM_JOBS:-6}" -I{} python3 bench/kernelbench_bench.py --warm-compile-only \
  ${MAX_AUTOTUNE:+--max-autotune} {} > "$OUT/warm.log" 2>&1
echo "[bench] torch.compile warm-up: $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout "${TIMED_S:-480}" python3 bench/kernelbench_bench.py "${tasks[@]}" --out "$OUT/results.jsonl" --reps "${REPS:-30}" \
  --budget-s "${BUDGET_S:-20}" ${MAX_AUTOTUNE:+--max-autotune} > "$OUT/bench.log" 2>&1
echo "[bench] timed pass done: $(( $(date +%s) - t0 )) s"
python3 bench/report.py "$OUT/results.jsonl" | tee "$OUT/table.md"
