#!/usr/bin/env bash
# One device call: the bf16 GPT-2-style block through backend="dice" under
# each GEMM gate (docs/DECISIONS.md "bf16 GEMM groups only with an
# epilogue"), side by side with eager and torch.compile default in each pass:
#   bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_gemm_gate_ab.sh
# Passes, in order: DICE_GEMM_GROUPS unset (the backend's default, "epilogue"),
# then f32 (the default before session 30); GATES="epilogue f32 all" adds all. Each pass has its own dice
# kernel cache and cold Inductor caches, so first-call times are comparable.
# Env: GATES (space-separated, default "epilogue f32"; "epilogue" runs
# with the variable unset), PASS_LIMIT_S (per pass, default 170).
# Writes $OUT/gate_<gate>.jsonl and .log, and prints each pass's table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
if [ ! -f build/torch_ext/libdice_torch_ext.so ]; then
  BUILD_TARGETS="dice dice-worker dice_torch_ext" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
git_rev=$(cat SNAPSHOT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
for gate in ${GATES:-epilogue f32}; do
  env_gate=()
  [ "$gate" != epilogue ] && env_gate=(DICE_GEMM_GROUPS="$gate")
  env "${env_gate[@]}" DICE_LOG_LEVEL=info PYTHONPATH=torch_ext/python timeout "${PASS_LIMIT_S:-170}" \
    python3 -u bench/torch_compile_bench.py --gpt2 --variants eager,inductor,dice --cold-inductor-cache \
    --cache "/tmp/dice-gate-$gate" --tree "$git_rev" --out "$OUT/gate_$gate.jsonl" > "$OUT/gate_$gate.log" 2>&1
  echo "gate $gate: rc $?"
  grep -A3 '^| task' "$OUT/gate_$gate.log" | head -4
done
