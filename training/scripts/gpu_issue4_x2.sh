#!/usr/bin/env bash
# Issue 4's H200 runs on one nvidia-h200-x2 machine, in two device calls
# (each < 10 minutes; the warm machine keeps build/ and the work directory):
#   CALL=1: build dice; GPU 0: template sweep -> dataset (imported items +
#           sweep winners, device_infill spans) -> SFT; then at once
#           GPU 0: stage-1 RL from the SFT model on device_infill tasks (a
#           checkpoint every step, stopped at LIMIT_S, default 570 s from
#           the call's start) and GPU 1: pass@k of the SFT model on the
#           held-out tasks.
#   CALL=2: GPU 0: pass@k of the RL model (same tasks, seed, samples and
#           reward); at the same time: the full build, then every
#           `gpu`-labelled test on GPU 1.
#           DP=1 also runs the 2-GPU vs 1-GPU loss curves (dp_compare.sh).
#   CALL=more: (after CALL=all, on the same warm machine) GPU 0 continues
#           the RL run (dice train rl --resume) until 60 s before LIMIT_S,
#           then pass@k of the RL model; GPU 1 meanwhile pass@k of the SFT
#           model; both with N (default 32) samples.
#   CALL=all: the whole of it in one call (when the device budget has room
#           for one): build dice; then GPU 0: sweep -> dataset -> SFT ->
#           focused SFT on device_infill (FOCUS_STEPS) -> RL on the first
#           RL_TASK_LIMIT training tasks -> pass@k of the RL model; beside it
#           the rest of the build, every `gpu`-labelled test on GPU 1 (a
#           failing python test run again under cuda-gdb for a backtrace),
#           and pass@k of the SFT model on GPU 1.
# Each process sees one GPU (CUDA_VISIBLE_DEVICES), so its judge children
# run on that GPU too. Sizes: gpu_train_eval.sh's variables. Before the
# call, here: bash scripts/gpu_prepare.sh; carry .deps.
set -uo pipefail
cd "$(dirname "$0")/../.."
CALL=${CALL:-1}
LIMIT_S=${LIMIT_S:-570}
# The device tool returns at most 8 files: everything is written under a
# scratch folder and packed into $OUT/issue4_call$CALL.tgz on exit.
FINAL_OUT=${OUT:-/tmp/dice-out}
OUT=$(mktemp -d /tmp/issue4-out.XXXXXX)
export OUT
mkdir -p "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/issue4_call$CALL.tgz" -C "$OUT" .' EXIT
export JOBS=${JOBS:-32} SFT_STEPS=${SFT_STEPS:-1000} RL_STEPS=${RL_STEPS:-200}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
left() { echo $((LIMIT_S - ($(date +%s) - t0))); }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# The CLI (and dice-worker) first; call 2 builds the tests beside its eval
# (ninja leaves the built dice alone, so the running eval is not disturbed).
BUILD_TARGETS=dice bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
stamp "built dice"
source scripts/deps_env.sh
export SKIP_BUILD=1
if [ "$CALL" = more ]; then
  export RL_TASK_LIMIT=${RL_TASK_LIMIT:-12} N=${N:-32} K=${K:-1,8,32}
  (CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
     > "$OUT/phase_eval_sft.log" 2>&1; echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log") &
  CUDA_VISIBLE_DEVICES=0 EVAL=0 PHASE=rl RL_RESUME=1 timeout "$(($(left) - 60))" bash training/scripts/gpu_train_eval.sh \
    > "$OUT/phase_rl.log" 2>&1
  stamp "rl exit $? (124: stopped on time; the last step's checkpoint stays)"
  cp build/train-eval/m2/rl_log.csv "$OUT/" 2>/dev/null
  CUDA_VISIBLE_DEVICES=0 PHASE=eval NAME=rl timeout "$(left)" bash training/scripts/gpu_train_eval.sh > "$OUT/phase_eval_rl.log" 2>&1
  stamp "eval rl exit $?"
  wait
  grep -E "^rl: resumed|^rl step" "$OUT/phase_rl.log" | tail -4; cat "$OUT/rl_log.csv" 2>/dev/null
  grep -h "^eval: [0-9]* tasks, pass" "$OUT"/eval_*.log
elif [ "$CALL" = all ]; then
  export FOCUS_STEPS=${FOCUS_STEPS:-200} RL_TASK_LIMIT=${RL_TASK_LIMIT:-12} SFT_STEPS=${SFT_STEPS_ALL:-600}
  # The rest of the build with cmake directly (setup.sh has configured it):
  # up-to-date outputs (dice, the libraries) are not rewritten under the run.
  (cmake --build build -j 12 > "$OUT/build_tests.log" 2>&1 || { echo "test build failed"; tail -20 "$OUT/build_tests.log"; }
   stamp "tests built"
   (cd build && CUDA_VISIBLE_DEVICES=1 timeout 330 ctest --timeout 300 -j 2 -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1
    echo "ctest exit $?" >> "$OUT/ctest_gpu.log")
   stamp "gpu tests done"
   if grep -q "PythonBackendGpuTests.*SEGFAULT" "$OUT/ctest_gpu.log" && command -v cuda-gdb >/dev/null; then
     DICE_TORCH_LIB=$(ls build/torch_ext/libdice_torch_ext.so) PYTHONPATH=torch_ext/python DICE_MODE= CUDA_VISIBLE_DEVICES=1 \
       timeout 150 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary libdice" --args python3 -m pytest -q -x \
       -p no:cacheprovider -m gpu tests/torch_ext/python/test_backend_gpu.py > "$OUT/pytest_gpu_cuda_gdb.log" 2>&1
     stamp "cuda-gdb backtrace exit $?"
   fi) > "$OUT/side.log" 2>&1 &
  side=$!
  export CUDA_VISIBLE_DEVICES=0 SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-4} SWEEP_CANDIDATES=${SWEEP_CANDIDATES:-6}
  PHASE=sweep timeout 200 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sweep.log" 2>&1
  stamp "sweep exit $?"
  EVAL=0 PHASE=sft timeout 300 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sft.log" 2>&1
  stamp "sft done"
  (CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
     > "$OUT/phase_eval_sft.log" 2>&1; echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log") &
  # RL until 60 s before LIMIT_S: the RL model's eval needs ~30 s.
  EVAL=0 PHASE=rl timeout "$(($(left) - 60))" bash training/scripts/gpu_train_eval.sh > "$OUT/phase_rl.log" 2>&1
  stamp "rl exit $? (124: stopped on time; the last step's checkpoint stays)"
  cp build/train-eval/m2/rl_log.csv "$OUT/" 2>/dev/null
  PHASE=eval NAME=rl timeout "$(left)" bash training/scripts/gpu_train_eval.sh > "$OUT/phase_eval_rl.log" 2>&1
  stamp "eval rl exit $?"
  wait
  stamp "side runs done"
  grep -E "^sweep: [0-9]+ tasks" "$OUT/phase_sweep.log"; grep -E "^dataset:|^sft: (done|[0-9]+ training)" "$OUT/phase_sft.log"
  grep -E "^rl step|^rl: [0-9]" "$OUT/phase_rl.log" | tail -4; cat "$OUT/rl_log.csv" 2>/dev/null
  grep -h "^eval: [0-9]* tasks" "$OUT"/eval_*.log
  cat "$OUT/side.log"; grep -E "tests passed|\(Failed|SEGFAULT|ctest exit" "$OUT/ctest_gpu.log" | tail -6
elif [ "$CALL" = 1 ]; then
  export CUDA_VISIBLE_DEVICES=0 SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-4} SWEEP_CANDIDATES=${SWEEP_CANDIDATES:-6}
  PHASE=sweep timeout 200 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sweep.log" 2>&1
  stamp "sweep exit $?"
  EVAL=0 PHASE=sft timeout 260 bash training/scripts/gpu_train_eval.sh > "$OUT/phase_sft.log" 2>&1
  stamp "sft done"
  (CUDA_VISIBLE_DEVICES=1 PHASE=eval NAME=sft timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
     > "$OUT/phase_eval_sft.log" 2>&1; echo "eval sft exit $?" >> "$OUT/phase_eval_sft.log") &
  EVAL=0 PHASE=rl timeout "$(left)" bash training/scripts/gpu_train_eval.sh > "$OUT/phase_rl.log" 2>&1
  stamp "rl exit $? (124: stopped at LIMIT_S; the last step's checkpoint stays)"
  cp build/train-eval/m2/rl_log.csv "$OUT/" 2>/dev/null
  wait
  stamp "eval sft done"
  grep -E "^sweep: [0-9]+ tasks" "$OUT/phase_sweep.log"; grep -E "^dataset:" "$OUT/phase_sft.log"
  grep -E "^sft: (done|[0-9]+ training)" "$OUT/phase_sft.log"
  grep -E "^rl step|^rl: " "$OUT/phase_rl.log" | tail -14; tail -2 "$OUT/phase_eval_sft.log"
else
  if [ "${DP:-0}" = 1 ]; then
    (OUT="$OUT/dp" timeout "$(left)" bash training/scripts/dp_compare.sh > "$OUT/dp_compare.log" 2>&1
     echo "dp_compare exit $?" >> "$OUT/dp_compare.log") &
  fi
  (bash scripts/setup.sh > "$OUT/build_tests.log" 2>&1 || { echo "test build failed"; tail -20 "$OUT/build_tests.log"; }
   cd build && CUDA_VISIBLE_DEVICES=1 timeout "$(left)" ctest --timeout 300 -j 2 -L gpu > "$OUT/ctest_gpu.log" 2>&1
   echo "ctest exit $?" >> "$OUT/ctest_gpu.log") &
  CUDA_VISIBLE_DEVICES=0 PHASE=eval NAME=rl timeout "$(left)" bash training/scripts/gpu_train_eval.sh \
    > "$OUT/phase_eval_rl.log" 2>&1
  stamp "eval rl exit $?"
  wait
  stamp "side runs done"
  tail -2 "$OUT/phase_eval_rl.log"
  grep -E "tests passed|tests failed|\*\*\*Failed|SKIPPED|ctest exit" "$OUT/ctest_gpu.log" | tail -12
  [ -f "$OUT/dp_compare.log" ] && tail -3 "$OUT/dp_compare.log"
fi
