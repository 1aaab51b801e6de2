#!/usr/bin/env bash
# Device call on the nvidia-h200-x2 machine (carry .deps): the two-GPU runs of
# issue 22 (docs/MULTI_GPU.md), in one call. Logs and per-rank JSON under $OUT.
#   1. build (scripts/setup.sh; BUILD_TARGETS to narrow it), the 2-GPU gtests
#      (MultiDeviceGpu.*, label gpu) and the CPU claim/binding tests;
#   2. torchrun --nproc-per-node 2: DICE_MODE=tune into one fresh cache, then
#      DICE_MODE=cache: every group served (hits, no fallback) on both ranks;
#   3. dice warmup sharded over the 2 ranks (RANK/WORLD_SIZE) into one cache,
#      each rank on its own GPU. `dice warmup` picks cuda:LOCAL_RANK itself
#      (runtime/local_device.h); the CUDA_VISIBLE_DEVICES=LOCAL_RANK below
#      also checks the worker binding by UUID under a remapped numbering.
# Exits non-zero on the first failed step; the summary is the last lines.
#   bash scripts/gpu_multi_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
fail() { echo "gpu_multi_check: FAILED: $*" | tee -a "$OUT/summary.txt"; exit 1; }
nvidia-smi -L | tee "$OUT/gpus.txt"
[ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ] || fail "needs 2 GPUs, nvidia-smi lists $(nvidia-smi -L | grep -c '^GPU')"

echo "== 1. build + tests"
JOBS=${JOBS:-32} bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; fail "build"; }
source scripts/deps_env.sh
(cd build && ctest --output-on-failure --timeout 300 -R 'MultiDeviceGpu|TuningClaim|TunerClaim|DeviceBinding|WorkerBinding' \
   2>&1 | tee "$OUT/ctest_multi.log" | grep -E "Passed|Failed|Skipped|tests passed|tests failed" | tail -30)
grep -q "100% tests passed" "$OUT/ctest_multi.log" || fail "ctest (2-GPU, claim and binding tests)"
grep -E "MultiDeviceGpu.*Skipped" "$OUT/ctest_multi.log" && fail "the 2-GPU tests skipped"
(cd build && ctest --output-on-failure --timeout 300 -j 2 -L gpu 2>&1 | tee "$OUT/ctest_gpu.log" |
   grep -E "Failed|FAILED|tests passed|tests failed" | tail -20)
grep -q "100% tests passed" "$OUT/ctest_gpu.log" || echo "note: ctest -L gpu had failures (see ctest_gpu.log)" | tee -a "$OUT/summary.txt"

export DICE_TORCH_LIB=$PWD/build/torch_ext/libdice_torch_ext.so
[ -f "$DICE_TORCH_LIB" ] || DICE_TORCH_LIB=$(find build -name libdice_torch_ext.so | head -1)
export PYTHONPATH=$PWD/torch_ext/python${PYTHONPATH:+:$PYTHONPATH}
export DICE_LOG_LEVEL=info
W=$(mktemp -d /tmp/dice-multi-XXXXXX)

echo "== 2. torchrun x2: tune into one cache, then serve from it"
DICE_MODE=tune torchrun --nproc-per-node 2 --log-dir "$OUT/torchrun_tune" --redirects 3 \
  scripts/multi_gpu_rank.py --phase tune --cache "$W/cache" --out "$OUT" || fail "torchrun tune phase"
tuned=$(cat "$OUT"/torchrun_tune/*/attempt_0/*/stderr.log 2>/dev/null | grep -c "dice: tuned .*speedup")
waited=$(cat "$OUT"/torchrun_tune/*/attempt_0/*/stderr.log 2>/dev/null | grep -c "is being tuned by")
echo "tune phase: $tuned tune(s) stored a result, $waited wait(s) on another rank's claim" | tee -a "$OUT/summary.txt"
python3 - "$W/cache/kernels.db" <<'PY' | tee -a "$OUT/summary.txt" || fail "cache after the tune phase"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
w = db.execute("select count(*) from winners").fetchone()[0]
c = db.execute("select count(*) from tuning_claims").fetchone()[0]
print(f"cache: {w} winner(s), {c} claim(s) left")
sys.exit(0 if w >= 1 and c == 0 else 1)
PY
DICE_MODE=cache torchrun --nproc-per-node 2 --log-dir "$OUT/torchrun_cache" --redirects 3 \
  scripts/multi_gpu_rank.py --phase cache --cache "$W/cache" --out "$OUT" || fail "torchrun cache phase"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt" || fail "served on both ranks"
import json, sys
ok = True
for r in (0, 1):
    j = json.load(open(f"{sys.argv[1]}/rank{r}_cache.json"))
    for g in j["groups"]:
        print(f"rank {r} {j['device']} {j['uuid'][:13]} {g['name']}: {g['hits']}/{g['calls']} hits, err {g['max_abs_err']:.2e}")
        ok = ok and g["ok"]
sys.exit(0 if ok else 1)
PY

echo "== 3. dice warmup sharded over 2 ranks into one cache"
python3 examples/make_kernelbench_models.py ".deps/kernelbench/level2/76_Gemm_Add_ReLU.py" --out "$W/models" \
  > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; fail "model conversion"; }
dir="$W/models/level2_76_Gemm_Add_ReLU"
set_a=$(python3 -c "import json;print(','.join(json.load(open('$dir/meta.json'))['inputs']))")
torchrun --nproc-per-node 2 --log-dir "$OUT/torchrun_warmup" --redirects 3 --no-python \
  bash -c "CUDA_VISIBLE_DEVICES=\$LOCAL_RANK exec $PWD/build/cli/dice warmup '$dir/model.pt' --input '$set_a' \
    --input '$(echo "$set_a" | sed 's/^[0-9]*x/64x/')' --cache '$W/warm' --budget-s 30" || fail "sharded warmup"
cat "$OUT"/torchrun_warmup/*/attempt_0/*/stderr.log > "$OUT/warmup.log" 2>/dev/null || true
grep -h "shard" "$OUT/warmup.log" | tee -a "$OUT/summary.txt"
build/cli/dice cache stats --cache "$W/warm" | tee -a "$OUT/summary.txt"
echo "gpu_multi_check: all steps passed" | tee -a "$OUT/summary.txt"
