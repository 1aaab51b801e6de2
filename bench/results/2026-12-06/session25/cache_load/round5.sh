#!/bin/bash
# Rounds 5 and 6 of session 25 (docs/PERF.md): the mixed run again after the
# gate was narrowed to the list and batch routes (after3, the commit after
# 3ff4df5), paired with the before binary (82a1252). Usage: round5.sh ROUND
set -u
R=$1
OUT=$(dirname "$0")  # bench/results/2026-12-06/session25/cache_load
COMMON="--db /dev/shm/s25/kernels.db --keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
declare -A BIN=([before]=/tmp/s25-before/cache_load_bench [after3]=/tmp/s25-after3/cache_load_bench)
run() {  # label config args...
  local label=$1 config=$2; shift 2
  { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# ${BIN[${label%%-*}]} $COMMON $*"
    "${BIN[${label%%-*}]}" $COMMON "$@"; } > "$OUT/r${R}_${label}_${config}.txt" 2>&1
}
M16="--clients 16 --seconds 20 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
L16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0 --server-times 1"
if [ "$R" = 5 ]; then
  run after3-keyset mixed16 $M16 --list-mode keyset; run before mixed16 $M16; run after3 mixed16 $M16
  run after3-keyset list16 $L16 --list-mode keyset
else
  run before mixed16 $M16; run after3-keyset mixed16 $M16 --list-mode keyset; run after3 mixed16 $M16
fi
