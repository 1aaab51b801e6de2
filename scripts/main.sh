#!/usr/bin/env bash
# The main job: set up, build, turn KernelBench tasks into TorchScript models
# and tune them with `dice tune`. On a machine without a GPU, models are made
# at reduced shapes and `dice tune` runs compile-only (it says so).
#   bash scripts/main.sh                 # default task list
#   TASKS="level1/23_Softmax.py" bash scripts/main.sh
#   FORCE=1 bash scripts/main.sh         # redo every step, even those up to date
# A second run skips what is up to date: setup.sh does not configure again
# (and the build is a no-op), a model is not made again while its meta.json
# is newer than the task file and the converter and was made for this
# machine's device, and a model is not tuned again while its tune.json is
# newer than the model and the dice binary (same for the C++ example and its
# log, one per kind of machine). Each skip says so.
set -euo pipefail
# A relative KB_DIR names a folder from where the command was typed.
if [ -n "${KB_DIR:-}" ] && [ -d "$KB_DIR" ]; then KB_DIR=$(cd "$KB_DIR" && pwd); fi
cd "$(dirname "$0")/.."
# KernelBench task files: $KB_DIR, else ../shared/data/kernelbench, else .deps/kernelbench.
# Looked for before the build, so a missing copy is said up front, not after it.
KB=""
for d in ${KB_DIR:+"$KB_DIR"} ../shared/data/kernelbench .deps/kernelbench; do [ -d "$d/level1" ] && { KB=$d; break; }; done
if [ -n "${KB_DIR:-}" ] && [ "$KB" != "$KB_DIR" ]; then
  echo "[main] KB_DIR=$KB_DIR has no level1/ folder of KernelBench task files" >&2; exit 2
fi
[ -n "$KB" ] || echo "[main] KernelBench task files not found (set KB_DIR, or put them at ../shared/data/kernelbench or .deps/kernelbench): only the C++ example will run"
# Only what this job runs: the dice tool (which builds dice-worker) and the C++
# example, about half of the full build; scripts/test.sh builds the test suites.
BUILD_TARGETS=${BUILD_TARGETS:-dice mlp_block} bash scripts/setup.sh
source scripts/deps_env.sh
BUILD_DIR=${BUILD_DIR:-build}
DICE="$BUILD_DIR/cli/dice"
OUT=${MODELS_DIR:-models}
mkdir -p "$OUT"

GPU=0
python3 -c 'import torch,sys;sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && GPU=1
SMALL=()
[ "$GPU" = 1 ] || { SMALL=(--small); echo "[main] no CUDA device: models at reduced shapes, dice tune runs compile-only"; }

FORCE=${FORCE:-0}
# up_to_date OUTPUT INPUT...: OUTPUT exists and is newer than every INPUT.
up_to_date() {
  local out=$1; shift
  [ "$FORCE" = 1 ] && return 1
  [ -f "$out" ] || return 1
  for f in "$@"; do [ "$out" -nt "$f" ] || return 1; done
}

# 1. The C++-only example: a transformer MLP block built from TorchScript source.
# One log per kind of machine: a CPU run's log never stands for a GPU run.
MLP_LOG="$OUT/mlp_block.$([ "$GPU" = 1 ] && echo gpu || echo cpu).log"
if up_to_date "$MLP_LOG" "$BUILD_DIR/examples/mlp_block"; then
  echo "[main] examples/mlp_block: up to date, its last run: $MLP_LOG (FORCE=1 runs it again)"
else
  echo "[main] examples/mlp_block (C++ only, no Python model file needed)"
  rm -f "$MLP_LOG"
  if DICE_CACHE_DIR="$OUT/cache" "$BUILD_DIR/examples/mlp_block" 2>&1 | tee "$MLP_LOG.tmp"; then
    mv "$MLP_LOG.tmp" "$MLP_LOG"
  else
    echo "[main] mlp_block failed (exit ${PIPESTATUS[0]})"
  fi
fi

# 2. KernelBench tasks -> TorchScript models -> dice tune.
if [ -z "$KB" ]; then
  echo "[main] no KernelBench task files (see the first line); skipping the models"
  exit 0
fi
TASKS=${TASKS:-"level1/23_Softmax.py level1/26_GELU_.py level1/36_RMSNorm_.py level1/40_LayerNorm.py level2/12_Gemm_Multiply_LeakyReLU.py"}
for t in $TASKS; do
  dir="$OUT/$(dirname "$t")_$(basename "$t" .py)"
  # Made for this machine: full shapes on cuda, reduced (--small) on cpu.
  made_for=$(python3 -c "import json;print(json.load(open('$dir/meta.json')).get('device',''))" 2>/dev/null || true)
  if up_to_date "$dir/meta.json" "$KB/$t" examples/make_kernelbench_models.py "$dir/model.pt" &&
     [ "$made_for" = "$([ "$GPU" = 1 ] && echo cuda || echo cpu)" ]; then
    echo "[main] $t: model up to date ($dir)"
  else
    rm -f "$dir/meta.json"
    python3 examples/make_kernelbench_models.py "$KB/$t" --out "$OUT" "${SMALL[@]}" ||
      { echo "[main] $t: could not make a TorchScript model (exit $?); next task"; continue; }
  fi
  if up_to_date "$dir/tune.json" "$dir/model.pt" "$dir/meta.json" "$DICE"; then
    echo "[main] $t: tuned already, results in $dir/tune.json (FORCE=1 tunes again)"
    continue
  fi
  inputs=$(python3 -c "import json;print(' '.join('--input '+s for s in json.load(open('$dir/meta.json'))['inputs']))")
  echo "[main] dice tune $dir/model.pt $inputs"
  # A failed tune leaves no tune.json behind, so the next run tunes again.
  rm -f "$dir/tune.json"
  # shellcheck disable=SC2086
  "$DICE" tune "$dir/model.pt" $inputs --cache "$OUT/cache" --json "$dir/tune.json" ||
    { echo "[main] $t: exit $?"; rm -f "$dir/tune.json"; }
done
