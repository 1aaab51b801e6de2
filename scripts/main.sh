#!/usr/bin/env bash
# The main job: set up, build, turn KernelBench tasks into TorchScript models
# and tune them with `dice tune`. On a machine without a GPU, models are made
# at reduced shapes and `dice tune` runs compile-only (it says so).
#   bash scripts/main.sh                 # default task list
#   TASKS="level1/23_Softmax.py" bash scripts/main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/deps_env.sh
BUILD_DIR=${BUILD_DIR:-build}
DICE="$BUILD_DIR/cli/dice"
OUT=${MODELS_DIR:-models}
mkdir -p "$OUT"

KB=""
for d in ../shared/data/kernelbench .deps/kernelbench; do [ -d "$d/level1" ] && { KB=$d; break; }; done
GPU=0
python3 -c 'import torch,sys;sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && GPU=1
SMALL=()
[ "$GPU" = 1 ] || { SMALL=(--small); echo "[main] no CUDA device: models at reduced shapes, dice tune runs compile-only"; }

# 1. The C++-only example: a transformer MLP block built from TorchScript source.
echo "[main] examples/mlp_block (C++ only, no Python model file needed)"
DICE_CACHE_DIR="$OUT/cache" "$BUILD_DIR/examples/mlp_block" || echo "[main] mlp_block failed (exit $?)"

# 2. KernelBench tasks -> TorchScript models -> dice tune.
if [ -z "$KB" ]; then
  echo "[main] KernelBench task files not found (../shared/data/kernelbench or .deps/kernelbench); skipping"
  exit 0
fi
TASKS=${TASKS:-"level1/23_Softmax.py level1/26_GELU_.py level1/36_RMSNorm_.py level1/40_LayerNorm.py level2/12_Gemm_Multiply_LeakyReLU.py"}
for t in $TASKS; do
  dir="$OUT/$(dirname "$t")_$(basename "$t" .py)"
  python3 examples/make_kernelbench_models.py "$KB/$t" --out "$OUT" "${SMALL[@]}" ||
    { echo "[main] $t: could not make a TorchScript model (exit $?); next task"; continue; }
  inputs=$(python3 -c "import json;print(' '.join('--input '+s for s in json.load(open('$dir/meta.json'))['inputs']))")
  echo "[main] dice tune $dir/model.pt $inputs"
  # shellcheck disable=SC2086
  "$DICE" tune "$dir/model.pt" $inputs --cache "$OUT/cache" --json "$dir/tune.json" || echo "[main] $t: exit $?"
done
