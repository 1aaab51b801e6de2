#!/usr/bin/env bash
# Device call (issue 18 item 2): are Hopper's own conv kernels worth a conv
# template? Each PART fits one device call (< 10 min on the H200 machine);
# logs and JSONL go to $OUT.
#   PART=probe  (default) build dice + the generator GPU tests (~2.5 min),
#               bench/conv_sm90_probe.py (12 CUTLASS 3.x sm90 builds in
#               parallel, then the kernel alone vs cuDNN NCHW / channels_last /
#               torch.compile on the level-2 conv shapes), then the ConvGpu
#               tests verbose (the 2.x and the sm90 candidate's µs side by side).
#   PART=tune   the level-2 conv tasks through `dice tune` with conv groups
#               and the sm90 candidates on (DICE_CONV_GROUPS=f32
#               DICE_CONV_SM90=1), against eager and torch.compile
#               (bench/kernelbench_bench.py; session 16 measured the 2.x
#               kernels there at 0.63-0.68x of torch.compile).
# Run as: bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh env PART=probe bash scripts/gpu_conv_sm90.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
PART=${PART:-probe}
mkdir -p "$OUT"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
targets="dice dice-worker dice_torch_ext"
[ "$PART" = probe ] && targets="$targets generator_gpu_tests"
BUILD_TARGETS="$targets" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "[conv-sm90] build $(( $(date +%s) - t0 )) s"
source scripts/deps_env.sh
KB=${KB:-.deps/kernelbench}/level2
case "$PART" in
  probe)
    timeout 330 python3 -u bench/conv_sm90_probe.py --out "$OUT/conv_sm90_probe.jsonl" > "$OUT/conv_sm90_probe.log" 2>&1
    echo "[conv-sm90] probe rc=$? at $(( $(date +%s) - t0 )) s"
    grep -E "^\| " "$OUT/conv_sm90_probe.log" | head -80
    left=$(( 570 - ($(date +%s) - t0) ))
    if [ "$left" -gt 60 ]; then
      (cd build && timeout "$left" ./tests/generator_gpu_tests --gtest_filter='ConvGpu.ConvMish*:ConvGpu.Sm90*' > "$OUT/conv_gpu.log" 2>&1)
      echo "[conv-sm90] ConvGpu rc=$? at $(( $(date +%s) - t0 )) s"
      grep -E "\[conv-gpu\]|OK \]|FAILED|Failure" "$OUT/conv_gpu.log"
    fi
    ;;
  tune)
    export DICE_CONV_GROUPS=f32 DICE_CONV_SM90=1
    timeout $(( 580 - ($(date +%s) - t0) )) python3 -u bench/kernelbench_bench.py "$KB/4_Conv2d_Mish_Mish.py" \
      "$KB/1_Conv2D_ReLU_BiasAdd.py" "$KB/54_Conv2d_Multiply_LeakyReLU_GELU.py" \
      --out "$OUT/conv_sm90_tune.jsonl" --reps 30 --budget-s 60 --task-timeout 200 --cache /tmp/dc-sm90 > "$OUT/conv_sm90_tune.log" 2>&1
    echo "[conv-sm90] tune rc=$? at $(( $(date +%s) - t0 )) s"
    cp /tmp/dice-bench/*.json "$OUT/" 2>/dev/null
    python3 bench/report.py "$OUT/conv_sm90_tune.jsonl" | tee "$OUT/conv_sm90_tune_table.md"
    ;;
  *) echo "gpu_conv_sm90.sh: unknown PART '$PART' (probe|tune)" >&2; exit 2 ;;
esac
