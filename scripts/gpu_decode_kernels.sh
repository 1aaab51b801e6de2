#!/usr/bin/env bash
# One device call: the kernels of one SDAR decode forward (issue 19), by
# difference of two Nsight Compute runs of bench/sdar_decode_bench
# (bench/ncu_kernel_table.py says why and how). CUDA graphs stay on, as the
# decoder runs: ncu profiles every kernel node of a replayed graph
# (--graph-profiling node), and the two runs capture the same graphs, so
# captures cancel in the difference.
#   bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh env BATCH=128 bash scripts/gpu_decode_kernels.sh
# Env: BATCH (128), CONFIG (.deps/sdar/config-4b.json), PROMPT (512), NEW1 (4),
# NEW2 (8), STEPS (4), EXTRA (more sdar_decode_bench flags), NCU (ncu's path).
# Writes $OUT/ncu_b<BATCH>_new<N>.csv, ..._table.md and the bench's output.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
if [ ! -x build/bench/sdar_decode_bench ]; then
  BUILD_TARGETS="sdar_decode_bench" JOBS=16 bash scripts/setup.sh > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
b=${BATCH:-128} steps=${STEPS:-4} n1=${NEW1:-4} n2=${NEW2:-8}
for n in "$n1" "$n2"; do
  "$NCU" --csv --print-units base --clock-control none --graph-profiling node --metrics gpu__time_duration.sum \
    --log-file "$OUT/ncu_b${b}_new$n.csv" ./build/bench/sdar_decode_bench --config "${CONFIG:-.deps/sdar/config-4b.json}" \
    --batch "$b" --prompt "${PROMPT:-512}" --new "$n" --steps "$steps" --cuda-graphs on --fused on ${EXTRA:-} \
    > "$OUT/bench_b${b}_new$n.log" 2>&1
  echo "ncu new=$n rc $? ($(grep -c gpu__time_duration "$OUT/ncu_b${b}_new$n.csv" 2>/dev/null) kernels)"
done
# New tokens per forward: one token a step (static schedule, merged commit), so
# each sample gets (n2 - n1) more tokens in (n2 - n1) more forwards.
python3 bench/ncu_kernel_table.py "$OUT/ncu_b${b}_new$n1.csv" "$OUT/ncu_b${b}_new$n2.csv" --forwards $(( n2 - n1 )) \
  --top 40 | tee "$OUT/ncu_b${b}_table.md"
