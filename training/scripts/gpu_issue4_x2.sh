#!/usr/bin/env bash
# Issue 4's H200 runs on one nvidia-h200-x2 machine, in device calls of
# < 10 minutes each (a warm machine keeps build/ and the work directory):
#   CALL=all: build dice; then GPU 0: template sweep -> dataset (imported
#           items + sweep winners, device_infill spans) -> SFT -> focused
#           SFT on device_infill (FOCUS_STEPS) -> stage-1 RL on the first
#           RL_TASK_LIMIT training tasks, all of them each step (a
#           checkpoint every step, stopped 60 s before LIMIT_S) -> pass@k
#           of the RL model; beside it: the rest of the build, every
#           `gpu`-labelled test on GPU 1 (a segfaulting python test run
#           again under cuda-gdb for a backtrace), and pass@k of the SFT
#           model on GPU 1.
#   CALL=more: (after CALL=all, on the same warm machine) GPU 0 continues
#           the RL run (dice train rl --resume) the same way, then pass@k
#           of the RL model; GPU 1 meanwhile pass@k of the SFT model; both
#           with N (default 32) samples. DP=1 also runs the 2-GPU vs 1-GPU
#           loss curves (dp_compare.sh) after the SFT eval.
# Each process sees one GPU (CUDA_VISIBLE_DEVICES), so its judge children
# run on that GPU too. Sizes: gpu_train_eval.sh's variables. Before the
# call, here: bash scripts/gpu_prepare.sh; carry .deps.
set -uo pipefail
cd "$(dirname "$0")/../.."
CALL=${CALL:-all}
LIMIT_S=${LIMIT_S:-580}
# BUILD_DIR, SKIP_SETUP=1 and DEV=cpu let the flow run on a CPU machine (a
# dry run of the script at toy sizes; the gpu tests then skip; ctest
# TrainingH200CallsDryRunOnCpu runs it).
BUILD_DIR=${BUILD_DIR:-build}
export DICE=${DICE:-./$BUILD_DIR/cli/dice}
export W=${W:-$BUILD_DIR/train-eval}
# The device tool returns at most 8 files: everything is written under a
# scratch folder and packed into $OUT/issue4_call$CALL.tgz on exit.
FINAL_OUT=${OUT:-/tmp/dice-out}
OUT=$(mktemp -d /tmp/issue4-out.XXXXXX)
export OUT
mkdir -p "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/issue4_call$CALL.tgz" -C "$OUT" .' EXIT
export JOBS=${JOBS:-32} SFT_STEPS=${SFT_STEPS:-1000} RL_STEPS=${RL_STEPS:-200}
# RL (both calls): the first RL_TASK_LIMIT training tasks, all of them every
# step (RL_TASKS_PER_STEP), so that each step's policy reward is over the same
# tasks and a per-step trend can show; lr and inner epochs as session 8 ran them.
export RL_TASK_LIMIT=${RL_TASK_LIMIT:-8}
export RL_TASKS_PER_STEP=${RL_TASKS_PER_STEP:-$RL_TASK_LIMIT} RL_LR=${RL_LR:-1e-4} RL_INNER_EPOCHS=${RL_INNER_EPOCHS:-2}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
left() { echo $((LIMIT_S - ($(date +%s) - t0))); }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# The CLI (and dice-worker) first; CALL=all builds the rest beside the run.
# SKIP_SETUP=1: $BUILD_DIR is configured (and dice built) already.
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  BUILD_DIR=$BUILD_DIR BUILD_TARGETS=dice bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
stamp "built dice"
source scripts/deps_env.sh
export SKIP_BUILD=1
run_phase() {  # $1 log name, $2 seconds kept back from the limit, then VAR=value... for gpu_train_eval.sh
  local log=$1 reserve=$2
  shift 2
  env "$@" timeout "$(($(left) - reserve))" bash training/scripts/gpu_train_eval.sh > "$OUT/$log.log" 2>&1
}
# RL on GPU 0 (until 60 s before LIMIT_S: the RL model's eval needs ~30 s)
# beside pass@k of the SFT model on GPU 1, then pass@k of the RL model.
rl_beside_sft_eval() {  # extra VAR=value for the RL phase
  (run_phase phase_eval_sft 0 CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft
   echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log"
   if [ "${DP:-0}" = 1 ]; then
     OUT="$OUT/dp" timeout "$(left)" bash training/scripts/dp_compare.sh > "$OUT/dp_compare.log" 2>&1
     echo "dp_compare exit $?" >> "$OUT/dp_compare.log"
   fi) &
  run_phase phase_rl 60 CUDA_VISIBLE_DEVICES=0 EVAL=0 PHASE=rl "$@"
  stamp "rl exit $? (124: stopped on time; the last step's checkpoint stays)"
  cp "$W/m2/rl_log.csv" "$OUT/" 2>/dev/null
  run_phase phase_eval_rl 0 CUDA_VISIBLE_DEVICES=0 PHASE=eval NAME=rl
  stamp "eval rl exit $?"
  wait
  stamp "side runs done"
}
case "$CALL" in
  all)
    export FOCUS_STEPS=${FOCUS_STEPS:-250} SFT_STEPS=${SFT_STEPS_ALL:-600}
    # The rest of the build with cmake directly (setup.sh has configured it):
    # up-to-date outputs (dice, the libraries) are not rewritten under the run.
    # SIDE_TESTS=0 leaves them out (the CPU dry run in ctest).
    if [ "${SIDE_TESTS:-1}" != 1 ]; then
      echo "side build and gpu tests left out (SIDE_TESTS=0)" > "$OUT/side.log"
    else (cmake --build "$BUILD_DIR" -j "${SIDE_JOBS:-12}" > "$OUT/build_tests.log" 2>&1 || { echo "test build failed"; tail -20 "$OUT/build_tests.log"; }
     stamp "tests built"
     (cd "$BUILD_DIR" && CUDA_VISIBLE_DEVICES=1 timeout 330 ctest --timeout 300 -j 2 -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1
      echo "ctest exit $?" >> "$OUT/ctest_gpu.log")
     stamp "gpu tests done"
     if grep -q "PythonBackendGpuTests.*SEGFAULT" "$OUT/ctest_gpu.log" && command -v cuda-gdb >/dev/null; then
       DICE_TORCH_LIB=$(ls "$BUILD_DIR"/torch_ext/libdice_torch_ext.so) PYTHONPATH=torch_ext/python DICE_MODE= CUDA_VISIBLE_DEVICES=1 \
         timeout 150 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary libdice" --args python3 -m pytest -q -x \
         -p no:cacheprovider -m gpu tests/torch_ext/python/test_backend_gpu.py > "$OUT/pytest_gpu_cuda_gdb.log" 2>&1
       stamp "cuda-gdb backtrace exit $?"
     fi) > "$OUT/side.log" 2>&1 &
    fi
    export CUDA_VISIBLE_DEVICES=0 SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-4} SWEEP_CANDIDATES=${SWEEP_CANDIDATES:-6}
    PHASE=sweep timeout 200 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sweep.log" 2>&1
    stamp "sweep exit $?"
    EVAL=0 PHASE=sft timeout 300 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sft.log" 2>&1
    stamp "sft done"
    unset CUDA_VISIBLE_DEVICES
    rl_beside_sft_eval
    grep -E "^sweep: [0-9]+ tasks" "$OUT/phase_sweep.log"; grep -E "^dataset:|^sft: (done|[0-9]+ training)" "$OUT/phase_sft.log"
    cat "$OUT/side.log"; grep -E "tests passed|\(Failed|SEGFAULT|ctest exit" "$OUT/ctest_gpu.log" | tail -6
    ;;
  more)
    export N=${N:-32} K=${K:-1,8,32}
    rl_beside_sft_eval RL_RESUME=1
    grep -E "^rl: resumed" "$OUT/rl.log"
    [ -f "$OUT/dp_compare.log" ] && tail -3 "$OUT/dp_compare.log"
    ;;
  *) echo "gpu_issue4_x2: CALL must be all or more, got '$CALL'" >&2; exit 2 ;;
esac
grep -E "^rl step" "$OUT/phase_rl.log" | tail -3; cat "$OUT/rl_log.csv" 2>/dev/null
# Per task, this call's policy rollouts rewarded at each step (rl.cc's group
# line; rl.log is the whole RL log, phase_rl.log only its tail).
grep -h "): policy rewarded" "$OUT/rl.log" |
  awk '{split($0, a, "policy rewarded "); split(a[2], b, ","); if (!($4 in seq)) order[n++] = $4; seq[$4] = seq[$4] " " b[1]}
       END {for (i = 0; i < n; ++i) print "rl task " order[i] ":" seq[order[i]]}'
grep -h "^eval: [0-9]* tasks, pass" "$OUT"/eval_*.log
