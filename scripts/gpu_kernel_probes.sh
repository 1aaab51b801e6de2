#!/usr/bin/env bash
# One device call: the kernel probes that choose between template forms
# (issues 18 and 19), each a GPU test that prints its timings:
#   1. GemvProbeGpu.* and SdarFusedGpuTest.SkinnyGemms*: the gemv family's
#      staged and direct forms in 11 geometries against cuBLAS at SDAR-4B's
#      decode shapes (CUDA graphs over 8 weight copies);
#   2. GemmGpu.Bf16Sm90*: the CUTLASS 3.x Hopper GEMM candidates
#      (DICE_GEMM_SM90) verified and timed against eager (two nvcc builds);
#   3. with DECODE=1, SDAR-4B decode at batch 1 with the GEMMs on cuBLAS and
#      the staged gemv form (one run), then the direct form (DICE_SDAR_GEMV_DIRECT=1),
#      then cuBLAS with the measured step attention (DICE_SDAR_SPLIT_KV=2).
# The first step also runs SdarGpuTest.SmallBatchGraphsMeasure* (the measured
# attention choice); GEMV_FILTER replaces the probe part of its filter.
#   bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_kernel_probes.sh
# Logs: $OUT/gemv_probe.log, $OUT/gemm_sm90.log, $OUT/decode_gemv*.jsonl.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
t0=$(date +%s)
targets="sdar_gpu_tests generator_gpu_tests dice-worker"
[ "${DECODE:-0}" = 1 ] && targets="$targets sdar_decode_bench"
if [ ! -x build/tests/sdar_gpu_tests ] || [ ! -x build/tests/generator_gpu_tests ]; then
  BUILD_TARGETS="$targets" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
else
  source scripts/deps_env.sh
  cmake --build build --target $targets -j16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
echo "[probes] built at $(( $(date +%s) - t0 )) s"
timeout 240 ./build/tests/sdar_gpu_tests --gtest_filter="${GEMV_FILTER:-GemvProbeGpu.*:SdarFusedGpuTest.SkinnyGemms*}:SdarGpuTest.SmallBatchGraphsMeasure*" > "$OUT/gemv_probe.log" 2>&1
echo "[probes] gemv rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[gemv-probe\]|^(qkv|o_proj|gate|down) |^batch 1 step forward|OK \]|FAILED' "$OUT/gemv_probe.log" | head -120
timeout 300 ./build/tests/generator_gpu_tests --gtest_filter='GemmGpu.Bf16Sm90*' > "$OUT/gemm_sm90.log" 2>&1
echo "[probes] gemm sm90 rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[gemm-gpu\]|OK \]|FAILED|Failure|error' "$OUT/gemm_sm90.log" | head -20
if [ "${DECODE:-0}" = 1 ]; then
  # The bench sets DICE_SDAR_GEMV itself from --gemv; the direct form is the extra variable.
  # staged: cuBLAS and the staged gemv form in one run; direct: the direct
  # form; splitkv: cuBLAS with the measured step attention (DICE_SDAR_SPLIT_KV=2)
  # and, in the same run, the default SDPA one is the staged run's first row.
  for mode in staged direct splitkv; do
    flags=(--gemv off,on)
    env_mode=()
    [ "$mode" = direct ] && flags=(--gemv on) && env_mode=(DICE_SDAR_GEMV_DIRECT=1)
    [ "$mode" = splitkv ] && flags=(--gemv off) && env_mode=(DICE_SDAR_SPLIT_KV=2)
    env "${env_mode[@]}" timeout 200 ./build/bench/sdar_decode_bench --config .deps/sdar/config-4b.json --batch 1 \
      --prompt 512 --new 256 --steps 4 --cuda-graphs on --fused on "${flags[@]}" --json "$OUT/decode_gemv_$mode.jsonl" \
      > "$OUT/decode_gemv_$mode.log" 2>&1
    echo "[probes] decode ($mode run) rc $?: $(grep -o '"impl":"[^"]*"\|"tokens_per_s":[0-9.]*\|"step_attention":"[^"]*"' "$OUT/decode_gemv_$mode.jsonl" | paste -sd' ')"
  done
fi
