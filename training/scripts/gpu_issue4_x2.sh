#!/usr/bin/env bash
# Issue 4's H200 runs on one nvidia-h200-x2 machine, in three device calls
# (each < 10 minutes; the warm machine keeps build/ and the work directory):
#   CALL=1: build; GPU 1: the training GPU tests; GPU 0 at the same time:
#           template sweep -> dataset -> SFT.
#   CALL=2: GPU 0: stage-1 RL from the SFT model; GPU 1 at the same time:
#           pass@k of the SFT model on the held-out tasks.
#   CALL=3: pass@k of the RL model (same tasks, seed, samples and reward)
#           beside the 2-GPU vs 1-GPU loss curves (dp_compare.sh, both GPUs;
#           after the timed runs, so it perturbs none of their numbers).
# Each process sees one GPU (CUDA_VISIBLE_DEVICES), so its judge children
# run on that GPU too. Logs go to $OUT (per part, prefixed). Before the
# call, here: bash scripts/gpu_prepare.sh; carry .deps.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice-out}
CALL=${CALL:-1}
mkdir -p "$OUT"
export JOBS=${JOBS:-32} SFT_STEPS=${SFT_STEPS:-1000}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$CALL" = 1 ]; then
  BUILD_TARGETS="dice training_gpu_tests" bash scripts/setup.sh > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
  stamp "built"
  source scripts/deps_env.sh
  (
    export CUDA_VISIBLE_DEVICES=1
    cd build && timeout 240 ctest --output-on-failure --timeout 200 -R "DeviceFormRewardGpu|TrainingSweepGpu" \
      > "$OUT/ctest.log" 2>&1
    echo "ctest exit $?" >> "$OUT/ctest.log"
  ) &
  side=$!
  export CUDA_VISIBLE_DEVICES=0
  export SKIP_BUILD=1 SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-4} SWEEP_CANDIDATES=${SWEEP_CANDIDATES:-6}
  PHASE=sweep timeout 200 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sweep.log" 2>&1
  stamp "sweep exit $?"
  EVAL=0 PHASE=sft timeout 260 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sft.log" 2>&1
  stamp "sft exit $?"
  wait "$side"
  stamp "side done"
  grep -E "tests passed|tests failed|SKIPPED|Failed|ctest exit" "$OUT/ctest.log"
  tail -5 "$OUT/phase_sweep.log"; grep -v "^sft step" "$OUT/phase_sft.log" | tail -25
elif [ "$CALL" = 2 ]; then
  BUILD_TARGETS=dice bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  export SKIP_BUILD=1
  (CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft JUDGE_JOBS=16 timeout 540 bash training/scripts/gpu_train_eval.sh \
     > "$OUT/phase_eval_sft.log" 2>&1; echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log") &
  side=$!
  CUDA_VISIBLE_DEVICES=0 EVAL=0 PHASE=rl JUDGE_JOBS=16 timeout 540 bash training/scripts/gpu_train_eval.sh \
    > "$OUT/phase_rl.log" 2>&1
  stamp "rl exit $?"
  wait "$side"
  stamp "eval sft done"
  tail -14 "$OUT/phase_rl.log"; tail -6 "$OUT/phase_eval_sft.log"
else
  BUILD_TARGETS=dice bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  source scripts/deps_env.sh
  (OUT="$OUT/dp" timeout 400 bash training/scripts/dp_compare.sh > "$OUT/dp_compare.log" 2>&1
   echo "dp_compare exit $?" >> "$OUT/dp_compare.log") &
  side=$!
  CUDA_VISIBLE_DEVICES=0 SKIP_BUILD=1 PHASE=eval NAME=rl JUDGE_JOBS=24 timeout 540 bash training/scripts/gpu_train_eval.sh \
    > "$OUT/phase_eval_rl.log" 2>&1
  stamp "eval rl exit $?"
  wait "$side"
  stamp "dp_compare done"
  tail -6 "$OUT/phase_eval_rl.log"; tail -8 "$OUT/dp_compare.log"
fi
