#!/usr/bin/env bash
# One benchmark chunk, sized for one device call (< 10 min):
#   bash bench/run_chunk.sh level1/19_ReLU.py level1/23_Softmax.py ...
# Builds what it needs, warms torch.compile's caches in parallel (CPU-bound
# compiles), then times every task sequentially (eager, torch.compile,
# dice tune + the cached model) so timings never overlap. Results:
# $OUT/results.jsonl and the markdown table $OUT/table.md.
# Env switches: FREEZING=1 (also time torch.compile with freezing),
# MAX_AUTOTUNE=1 (max-autotune baseline), STRICT_FP32=1 (TF32 off on both
# sides), REPLAY=1 (dice's CUDA-graph replay and mode="reduce-overhead"), DTYPE=bf16|f16|f32 (every
# variant in that dtype; default the task's own), WARM_S / TIMED_S / REPS / BUDGET_S (phase limits, s).
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
# A task is a path under $KB (level2/12_Gemm_Multiply_LeakyReLU.py) or a file
# of its own in the same format (bench/tasks/gpt2_block.py).
for t in "$@"; do if [ -f "$t" ]; then tasks+=("$t"); else tasks+=("$KB/$t"); fi; done
flags=(${MAX_AUTOTUNE:+--max-autotune} ${FREEZING:+--freezing} ${STRICT_FP32:+--strict-fp32} ${REPLAY:+--replay} ${DTYPE:+--dtype $DTYPE})
t0=$(date +%s)
printf '%s\n' "${tasks[@]}" | timeout "${WARM_S:-150}" xargs -P "${WARM_JOBS:-6}" -I{} python3 bench/kernelbench_bench.py --warm-compile-only \
  "${flags[@]}" {} > "$OUT/warm.log" 2>&1
echo "[bench] torch.compile warm-up: $(( $(date +%s) - t0 )) s"
# timeout stops xargs, not the compiles it started: a warm-up still running
# would load the CPUs under the timed pass.
pkill -9 -f -- '--warm-compile-only' 2>/dev/null && echo "[bench] warm-up compiles past WARM_S killed"
timed=${TIMED_S:-480}
# Inside a device call (scripts/gpu_from_snapshot.sh sets DICE_CALL_T0), the
# timed pass ends before the call's limit (CALL_S, default 590 s), so rows
# written so far come back and nothing runs on into the next call.
if [ -n "${DICE_CALL_T0:-}" ]; then
  left=$(( ${CALL_S:-590} - ($(date +%s) - DICE_CALL_T0) - 15 ))
  [ "$timed" -gt "$left" ] && echo "[bench] timed pass limit ${timed} s -> ${left} s (the device call's time left)" && timed=$left
  [ "$timed" -lt 1 ] && timed=1
fi
PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 timeout "$timed" python3 bench/kernelbench_bench.py "${tasks[@]}" --out "$OUT/results.jsonl" --reps "${REPS:-30}" \
  --budget-s "${BUDGET_S:-20}" "${flags[@]}" > "$OUT/bench.log" 2>&1
echo "[bench] timed pass done: $(( $(date +%s) - t0 )) s"
python3 bench/report.py "$OUT/results.jsonl" | tee "$OUT/table.md"
