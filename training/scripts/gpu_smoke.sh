#!/usr/bin/env bash
# Device call (H200): build the CLI and the training tests, run them with the
# GPU present, then a small CUDA run of the whole training flow: a random
# SDAR-architecture model with a byte tokenizer -> CuKe set from the DICE RL
# infilling items -> SFT in bf16 autocast -> two stage-1 RL steps. CSVs and
# logs go to $OUT. Before the call, here: bash scripts/gpu_prepare.sh and
#   mkdir -p .deps/dice-rl && cp ../shared/data/dice-rl/kernel_infilling_evaluation.json .deps/dice-rl/
# and carry .deps. SKIP_TESTS=1 skips the training_tests binary (run 2026-11-30:
# 224 s on the H200 with an incremental build); JUDGE_JOBS (default 8) is the
# number of rollouts the RL reward judges at once.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
JOBS=16 BUILD_TARGETS="dice training_tests" bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
source scripts/deps_env.sh
[ "${SKIP_TESTS:-0}" = 1 ] || ./build/tests/training_tests 2>&1 | tail -25 | tee "$OUT/training_tests.log"
DICE=./build/cli/dice
W=/tmp/dice-train
rm -rf "$W" && mkdir -p "$W"
printf '%s' '{"system": "", "infilling": "Reference:\n{reference}\nPrefix:\n{prefix}\nSuffix:\n{suffix}", "end_to_end": "Reference:\n{reference}"}' > "$W/templates.json"
{
$DICE train init --out "$W/m0" --byte-tokenizer --hidden 256 --layers 4 --heads 8 --kv-heads 4 --head-dim 32 \
  --intermediate 768 --context 8192 --seed 1
$DICE train dataset --corpus .deps/dice-rl/kernel_infilling_evaluation.json --out "$W/cuke.jsonl" --verify none
grep '"kind":"infill"' "$W/cuke.jsonl" > "$W/infill.jsonl"
$DICE train sft --model "$W/m0" --data "$W/infill.jsonl" --templates "$W/templates.json" --out "$W/m1" --device cuda \
  --steps ${SFT_STEPS:-150} --batch-size 8 --max-length 3072 --lr 1e-3 --warmup-steps 15 --save-every 50
$DICE train rl --model "$W/m1" --tasks "$W/infill.jsonl" --templates "$W/templates.json" --out "$W/m2" --device cuda \
  --stage infill --steps 2 --group-size 8 --max-new-tokens 256 --inject-known-good "$W/infill.jsonl" --lr 1e-5 \
  --judge-jobs ${JUDGE_JOBS:-8}
} 2>&1 | tee "$OUT/train.log" | grep -v "^sft step" ; grep "^sft step" "$OUT/train.log" | awk 'NR%10==0'
cp "$W/m1/sft_log.csv" "$W/m2/rl_log.csv" "$OUT/" 2>/dev/null
