#!/usr/bin/env bash
# One device call's chunk of issue 17's lists through bench/torch_compile_bench.py,
# resumable across calls (every call starts on a fresh or recycled machine, so the
# rows so far travel with the carried tree):
#   here:   cp <last call's files_at>/compile_list.jsonl .gpu-carry/compile_list.jsonl   (if any)
#           bash scripts/gpu_snapshot.sh
#   device: carry [".gpu-carry"], command
#           bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_compile_list.sh level3-dev
# Lists: level3-dev, level2-20, gpt2 (the GPT-2-style block, bf16 and float32).
# Variants: eager, torch.compile default, reduce-overhead (CUDA graphs: dice's
# replay is compared with it) and dice (tune-sync, rest=inductor), cold Inductor
# cache, first-call times recorded. Env: BUDGET_S (default 480), CAP_S (cap on
# max-autotune's first call, s: --first-call-cap-s; default none), VARIANTS,
# ROWS (the rows file's name under $OUT and .gpu-carry, default
# compile_list.jsonl: a second pass such as VARIANTS=inductor,max-autotune
# ROWS=max_autotune.jsonl resumes apart from the first), LIMIT_S (the bench's
# wall limit, s; default BUDGET_S + 60, and at least CAP_S + 120 so a row
# that starts at once can finish: a small BUDGET_S meant "one row" must not
# kill that row; keep it under the device call's own limit), DICE_LIST_CACHE
# (dice's kernel cache directory, default /tmp/dice-compile-list-cache: give
# an A/B pass, e.g. DICE_GEMM_LT=0, its own, or it serves the other's winners).
# CALL_S (default 590): the device call's own limit; the bench's limit and
# budget are cut to what is left of it after the build.
# BUDGET_S only stops new rows from starting: a row starts while elapsed +
# the median row so far fits it, so with ~250 s rows (max-autotune capped at
# 240 s) BUDGET_S=470 runs one row and 530 (LIMIT_S 585) runs two.
# Builds what the dice variant needs first when build/ lacks it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
list=${1:?usage: gpu_compile_list.sh level3-dev|level2-20|gpt2}
rows_name=${ROWS:-compile_list.jsonl}
rows="$OUT/$rows_name"
[ -f "../.gpu-carry/$rows_name" ] && cp "../.gpu-carry/$rows_name" "$rows"
if [ ! -f build/torch_ext/libdice_torch_ext.so ]; then
  BUILD_TARGETS="dice dice-worker dice_torch_ext" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
git_rev=$(cat SNAPSHOT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
sel=(--list "$list")
[ "$list" = gpt2 ] && sel=(--gpt2 --gpt2-fp32)
limit=${LIMIT_S:-$(( ${BUDGET_S:-480} + 60 ))}
[ -z "${LIMIT_S:-}" ] && [ "${CAP_S:-0}" -gt 0 ] && [ "$limit" -lt $(( CAP_S + 120 )) ] && limit=$(( CAP_S + 120 ))
budget=${BUDGET_S:-480}
# The bench must end inside the device call (CALL_S, default 590 s, counted
# from gpu_from_snapshot's DICE_CALL_T0): a cold build can take 3 minutes,
# and a call killed mid-row loses the row and can leave Inductor's workers
# running into the next call.
if [ -n "${DICE_CALL_T0:-}" ]; then
  left=$(( ${CALL_S:-590} - ($(date +%s) - DICE_CALL_T0) - 10 ))
  if [ "$limit" -gt "$left" ]; then
    echo "gpu_compile_list: bench limit ${limit} s -> ${left} s (the call has that much left after the build)"
    limit=$left
  fi
  [ "$budget" -gt $(( limit - 10 )) ] && budget=$(( limit - 10 ))
  if [ "$limit" -lt 60 ]; then
    echo "gpu_compile_list: only ${limit} s left in the call; no row started (rows kept: $(cat "$rows" 2>/dev/null | wc -l))"
    exit 0
  fi
fi
DICE_LOG_LEVEL=info PYTHONPATH=torch_ext/python timeout "$limit" python3 -u bench/torch_compile_bench.py \
  --kb .deps/kernelbench "${sel[@]}" --variants "${VARIANTS:-eager,inductor,reduce-overhead,dice}" \
  --cold-inductor-cache --cache "${DICE_LIST_CACHE:-/tmp/dice-compile-list-cache}" --time-budget-s "$budget" --skip-done \
  --first-call-cap-s "${CAP_S:-0}" --tree "$git_rev" \
  --out "$rows" > "$OUT/compile_list_$list.log" 2>&1
echo "rc $? (tree $git_rev); rows now: $(wc -l < "$rows")"
tail -12 "$OUT/compile_list_$list.log"
