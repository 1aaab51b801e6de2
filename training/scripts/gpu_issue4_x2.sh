#!/usr/bin/env bash
# Issue 4's H200 runs on one nvidia-h200-x2 machine, in two device calls
# (each < 10 minutes; the warm machine keeps build/ and the work directory):
#   CALL=1: build; GPU 0: template sweep -> dataset -> SFT; then at once
#           GPU 0: stage-1 RL from the SFT model (a checkpoint every step,
#           stopped by LIMIT_S, default 570 s from the call's start) and
#           GPU 1: pass@k of the SFT model on the held-out tasks.
#           GPU_TESTS=1 first runs the training GPU tests on GPU 1.
#   CALL=2: pass@k of the RL model (same tasks, seed, samples and reward)
#           beside the 2-GPU vs 1-GPU loss curves (dp_compare.sh, both GPUs;
#           after the timed runs, so it perturbs none of their numbers).
# Each process sees one GPU (CUDA_VISIBLE_DEVICES), so its judge children
# run on that GPU too. Logs go to $OUT/issue4_call$CALL.tgz. Before the call, here:
# bash scripts/gpu_prepare.sh; carry .deps.
set -uo pipefail
cd "$(dirname "$0")/../.."
CALL=${CALL:-1}
# The device tool returns at most 8 files: everything is written under a
# scratch folder and packed into $OUT/issue4_call$CALL.tgz on exit.
FINAL_OUT=${OUT:-/tmp/dice-out}
OUT=$(mktemp -d /tmp/issue4-out.XXXXXX)
mkdir -p "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/issue4_call$CALL.tgz" -C "$OUT" .' EXIT
LIMIT_S=${LIMIT_S:-570}
mkdir -p "$OUT"
export JOBS=${JOBS:-32} SFT_STEPS=${SFT_STEPS:-1000}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
left() { echo $((LIMIT_S - ($(date +%s) - t0))); }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
targets=dice
[ "${GPU_TESTS:-0}" = 1 ] && targets="dice training_gpu_tests"
BUILD_TARGETS="$targets" bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
stamp "built"
source scripts/deps_env.sh
export SKIP_BUILD=1
if [ "$CALL" = 1 ]; then
  if [ "${GPU_TESTS:-0}" = 1 ]; then
    (cd build && CUDA_VISIBLE_DEVICES=1 timeout 240 ctest --output-on-failure --timeout 200 \
       -R "DeviceFormRewardGpu|TrainingSweepGpu" > "$OUT/ctest.log" 2>&1; echo "ctest exit $?" >> "$OUT/ctest.log") &
  fi
  export CUDA_VISIBLE_DEVICES=0 SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-4} SWEEP_CANDIDATES=${SWEEP_CANDIDATES:-6}
  PHASE=sweep timeout 200 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sweep.log" 2>&1
  stamp "sweep exit $?"
  EVAL=0 PHASE=sft timeout 260 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sft.log" 2>&1
  stamp "sft done"
  (CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft JUDGE_JOBS=16 timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
     > "$OUT/phase_eval_sft.log" 2>&1; echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log") &
  EVAL=0 PHASE=rl JUDGE_JOBS=16 timeout "$(left)" bash training/scripts/gpu_train_eval.sh > "$OUT/phase_rl.log" 2>&1
  stamp "rl exit $? (124: stopped at LIMIT_S; the last step's checkpoint stays)"
  cp build/train-eval/m2/rl_log.csv "$OUT/" 2>/dev/null
  wait
  stamp "eval sft done"
  [ -f "$OUT/ctest.log" ] && grep -E "tests passed|tests failed|SKIPPED|Failed|ctest exit" "$OUT/ctest.log"
  tail -3 "$OUT/phase_sweep.log"; grep -v "^sft step" "$OUT/phase_sft.log" | grep -v checkpoint | tail -8
  grep -E "^rl step|not injected|rl: " "$OUT/phase_rl.log" | tail -12; tail -4 "$OUT/phase_eval_sft.log"
else
  (OUT="$OUT/dp" timeout "$(left)" bash training/scripts/dp_compare.sh > "$OUT/dp_compare.log" 2>&1
   echo "dp_compare exit $?" >> "$OUT/dp_compare.log") &
  CUDA_VISIBLE_DEVICES=0 PHASE=eval NAME=rl JUDGE_JOBS=24 timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
    > "$OUT/phase_eval_rl.log" 2>&1
  stamp "eval rl exit $?"
  wait
  stamp "dp_compare done"
  tail -4 "$OUT/phase_eval_rl.log"; tail -8 "$OUT/dp_compare.log"
fi
