#!/usr/bin/env bash
# Issue 4 "2-GPU data-parallel run gives the same loss curve as 1 GPU with
# the same global batch": SFT of one random SDAR model on one CuKe set,
# once as 1 process at batch 2B and once as 2 torchrun processes at batch B
# each (rank r on cuda:r; on CPU over the TCPStore), then the per-step loss
# of the two CSVs compared. Prints the largest |loss1 - loss2| and the
# loss drop of the run, and exits 1 when the curves differ by more than
# TOL (default 1e-3 in float32; bf16 runs need a looser TOL).
#
#   bash training/scripts/dp_compare.sh                  # cuda, 2 GPUs (device kind nvidia-h200-x2)
#   DEVICE=cpu STEPS=6 HIDDEN=64 LAYERS=2 bash training/scripts/dp_compare.sh   # CPU smoke, a minute
#
# Needs build/cli/dice (JOBS=16 BUILD_TARGETS=dice bash scripts/setup.sh) and
# .deps/dice-rl/kernel_infilling_evaluation.json (scripts/gpu_prepare.sh).
# Logs and CSVs go to $OUT. Exit 77 (ctest: skipped) without torchrun.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice-out}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-100}
B=${B:-4}
HIDDEN=${HIDDEN:-256}
LAYERS=${LAYERS:-4}
TOL=${TOL:-1e-3}
DICE=${DICE:-./build/cli/dice}
CORPUS=${CORPUS:-.deps/dice-rl/kernel_infilling_evaluation.json}
W=$(mktemp -d /tmp/dice-dp.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT"
[ -x "$DICE" ] || { echo "dp_compare: $DICE not built (JOBS=16 BUILD_TARGETS=dice bash scripts/setup.sh)" >&2; exit 2; }
command -v torchrun > /dev/null || { echo "dp_compare: torchrun (PyTorch) not on PATH: skipped" >&2; exit 77; }
[ -f "$CORPUS" ] || { echo "dp_compare: $CORPUS missing (bash scripts/gpu_prepare.sh)" >&2; exit 2; }
printf '%s' '{"system": "", "infilling": "Reference:\n{reference}\nPrefix:\n{prefix}\nSuffix:\n{suffix}", "end_to_end": "Reference:\n{reference}"}' > "$W/templates.json"
$DICE train init --out "$W/m0" --byte-tokenizer --hidden "$HIDDEN" --layers "$LAYERS" --heads 8 --kv-heads 4 \
  --head-dim $((HIDDEN / 8)) --intermediate $((HIDDEN * 3)) --context 8192 --seed 1 > "$OUT/dp_init.log"
$DICE train dataset --corpus "$CORPUS" --out "$W/cuke.jsonl" --verify none > "$OUT/dp_dataset.log"
grep '"kind":"infill"' "$W/cuke.jsonl" > "$W/infill.jsonl"
common=(--model "$W/m0" --data "$W/infill.jsonl" --templates "$W/templates.json" --device "$DEVICE" --steps "$STEPS"
        --max-length 2048 --lr 1e-3 --warmup-steps 5 --seed 7 --no-bf16)
t0=$(date +%s)
$DICE train sft "${common[@]}" --out "$W/one" --batch-size $((2 * B)) --csv "$OUT/dp_one_rank.csv" > "$OUT/dp_one_rank.log" 2>&1
t1=$(date +%s)
MASTER_PORT=${MASTER_PORT:-29533} torchrun --nproc-per-node 2 --master-port "${MASTER_PORT:-29533}" --no-python \
  $DICE train sft "${common[@]}" --out "$W/two" --batch-size "$B" --csv "$OUT/dp_two_ranks.csv" > "$OUT/dp_two_ranks.log" 2>&1
t2=$(date +%s)
grep -h "parameter digest\|NCCL\|TCPStore" "$OUT/dp_two_ranks.log" | sort | uniq | head -6 || true
echo "dp_compare: 1 rank x batch $((2 * B)): $((t1 - t0)) s; 2 ranks x batch $B: $((t2 - t1)) s ($DEVICE, $STEPS steps)"
python3 - "$OUT/dp_one_rank.csv" "$OUT/dp_two_ranks.csv" "$TOL" <<'PY'
import csv, sys
one = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
two = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
tol = float(sys.argv[3])
if len(one) != len(two) or not one:
    sys.exit(f"dp_compare: step counts differ or are empty: {len(one)} vs {len(two)}")
diff = max(abs(a - b) for a, b in zip(one, two))
k = min(10, len(one))
print(f"dp_compare: {len(one)} steps; loss 1 rank {sum(one[:k]) / k:.4f} -> {sum(one[-k:]) / k:.4f} "
      f"(first/last {k} mean); max |loss(1 rank) - loss(2 ranks)| = {diff:.3g} (tol {tol:g})")
sys.exit(0 if diff <= tol else 1)
PY
