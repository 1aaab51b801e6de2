#!/usr/bin/env bash
# One device call's chunk of issue 18's level-2 figure: all 80 KernelBench
# level-2 tasks through `dice tune` (bench/run_chunk.sh: eager, torch.compile
# default, Inductor's freezing and max-autotune-no-cudagraphs side by side,
# round-robin, L2 flushed), resumable across calls like gpu_compile_list.sh:
#   here:   cp <last call's files_at>/level2_all.jsonl .gpu-carry/   (if any)
#           bash scripts/gpu_snapshot.sh
#   device: carry [".gpu-carry"], command
#           bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_level2_all.sh
# Each call takes the next CHUNK tasks (default 12) in numeric order that
# the rows file lacks and appends their rows. TASKS="5 17 20" takes only
# those task numbers (a check of a change on the tasks it targets: give it
# its own ROWS). Env: CHUNK, ROWS (the rows
# file's name under $OUT and ../.gpu-carry, default <LEVEL>_all.jsonl),
# STRICT_FP32=1 (the strict column: give it its own ROWS), WARM_S / TIMED_S
# (run_chunk.sh's phase limits; defaults 150 / 380; inside a device call
# the timed pass is cut to what the call has left, CALL_S default 590 s,
# since a cold build can take 3 minutes), REPS (default 25), MAX_AUTOTUNE / FREEZING
# (default 1 each; set empty to leave the column out), LEVEL (default
# level2; level3 runs issue 18's level-3 dev list, all 20 networks of
# <kb>/level3, the same way), DTYPE=bf16 (every variant in bf16, the
# level-3 figure's second column: give it its own ROWS). All rows of a figure
# must come from one tree: each row carries it ("tree").
#   level 3, bf16: env LEVEL=level3 DTYPE=bf16 MAX_AUTOTUNE= CHUNK=3 ROWS=level3_bf16.jsonl bash scripts/gpu_level2_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
KB=${KB:-.deps/kernelbench}
mkdir -p "$OUT"
rows_name=${ROWS:-${LEVEL:-level2}_all.jsonl}
rows="$OUT/$rows_name"
[ -f "../.gpu-carry/$rows_name" ] && cp "../.gpu-carry/$rows_name" "$rows"
touch "$rows"
git_rev=$(cat SNAPSHOT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
mapfile -t todo < <(python3 - "$KB" "$rows" "${CHUNK:-12}" "${TASKS:-}" "${LEVEL:-level2}" <<'PY'
import glob, json, os, sys
kb, rows, chunk, level = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
only = {int(n) for n in sys.argv[4].replace(",", " ").split()}  # TASKS: these task numbers only
done = set()
for line in open(rows):
    try:
        done.add(os.path.basename(json.loads(line)["task"]).removesuffix(".py"))
    except (ValueError, KeyError):
        pass
tasks = sorted(glob.glob(os.path.join(kb, level, "*.py")), key=lambda p: int(os.path.basename(p).split("_")[0]))
if only:
    tasks = [t for t in tasks if int(os.path.basename(t).split("_")[0]) in only]
for t in [t for t in tasks if os.path.basename(t).removesuffix(".py") not in done][:chunk]:
    print(os.path.relpath(t, kb))
PY
)
echo "${LEVEL:-level2}-all: $(wc -l < "$rows") rows so far; this call: ${#todo[@]} tasks (${todo[0]:-none} ...)"
[ "${#todo[@]}" -eq 0 ] && exit 0
chunk_out="$OUT/chunk"
rm -rf "$chunk_out"
OUT="$chunk_out" KB="$KB" FREEZING=${FREEZING-1} MAX_AUTOTUNE=${MAX_AUTOTUNE-1} WARM_S=${WARM_S:-150} \
  TIMED_S=${TIMED_S:-380} REPS=${REPS:-25} DTYPE=${DTYPE:-} bash bench/run_chunk.sh "${todo[@]}"
python3 - "$chunk_out/results.jsonl" "$rows" "$git_rev" <<'PY'
import json, sys
src, dst, tree = sys.argv[1:4]
try:
    lines = open(src).read().splitlines()
except FileNotFoundError:
    lines = []
with open(dst, "a") as f:
    for line in lines:
        rec = json.loads(line)
        rec["tree"] = tree
        f.write(json.dumps(rec) + "\n")
print(f"rows added: {len(lines)} (tree {tree})")
PY
echo "rows now: $(wc -l < "$rows")"
