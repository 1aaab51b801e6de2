#!/bin/bash
# Round 8 of session 25 (docs/PERF.md): the final default (after3 binary
# with DICE_CACHE_SERVE_HANDLERS=0, which is the code path of 3ab2b32) against the
# before binary (82a1252), back to back per configuration.
set -u
OUT=$(dirname "$0")  # bench/results/2026-12-06/session25/cache_load
COMMON="--db /dev/shm/s25/kernels.db --keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
M16="--clients 16 --seconds 20 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
L16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0 --server-times 1"
run() {  # label binary config args...
  local label=$1 bin=$2 config=$3; shift 3
  { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) env: DICE_CACHE_SERVE_HANDLERS=0"
    echo "# $bin $COMMON $*"
    DICE_CACHE_SERVE_HANDLERS=0 $bin $COMMON "$@"; } > "$OUT/r8_${label}_${config}.txt" 2>&1
}
run final-keyset /tmp/s25-after3/cache_load_bench mixed16 $M16 --list-mode keyset
run before /tmp/s25-before/cache_load_bench mixed16 $M16
run final /tmp/s25-after3/cache_load_bench mixed16 $M16
run final-keyset /tmp/s25-after3/cache_load_bench list16 $L16 --list-mode keyset
run before /tmp/s25-before/cache_load_bench list16 $L16
