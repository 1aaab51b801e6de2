#!/bin/bash
# One paired round of session 25 (docs/PERF.md): every configuration with
# the before binary (82a1252, schema v5 as session 24 left it) and the after
# binary (9d87372), back to back, on one 100k-entry file on tmpfs.
# Usage: round.sh ROUND ORDER   (ORDER: "before after" or "after before")
set -u
R=$1; shift
ORDER=$*
OUT=$(dirname "$0")  # bench/results/2026-12-06/session25/cache_load
COMMON="--db /dev/shm/s25/kernels.db --keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
declare -A BIN=([before]=/tmp/s25-before/cache_load_bench [after]=/tmp/s25-after/cache_load_bench)
run() {  # label config env args...
  local label=$1 config=$2 env=$3; shift 3
  local f="$OUT/r${R}_${label}_${config}.txt"
  { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) env: ${env:-none}"
    echo "# ${BIN[${label%%-*}]} $COMMON $*"
    env $env "${BIN[${label%%-*}]}" $COMMON "$@"; } > "$f" 2>&1
}
G16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0"
L16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0"
M16="--clients 16 --seconds 20 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
L1="--clients 1 --seconds 8 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0"
G1="--clients 1 --seconds 8 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0"
for who in $ORDER; do
  if [ "$who" = before ]; then
    run before get16 "" $G16 --server-times 1
    run before list16 "" $L16 --server-times 1
    run before mixed16 "" $M16
    run before list1 "" $L1
    run before get1 "" $G1
  else
    run after get16 "" $G16 --server-times 1
    run after-json get16 "" $G16 --server-times 1 --get-form json
    run after-nogate get16 "DICE_CACHE_SERVE_HANDLERS=0" $G16 --server-times 1
    run after list16 "" $L16 --server-times 1
    run after-keyset list16 "" $L16 --server-times 1 --list-mode keyset
    run after-keyset-nogate list16 "DICE_CACHE_SERVE_HANDLERS=0" $L16 --server-times 1 --list-mode keyset
    run after mixed16 "" $M16
    run after-keyset mixed16 "" $M16 --list-mode keyset
    run after list1 "" $L1
    run after-keyset list1 "" $L1 --list-mode keyset
    run after get1 "" $G1
  fi
done
