#!/bin/bash
# Round 7 of session 25 (docs/PERF.md): the after3 binary with the gate off
# (DICE_CACHE_SERVE_HANDLERS=0) against its default (2 on this machine), mixed runs back to back.
set -u
OUT=$(dirname "$0")  # bench/results/2026-12-06/session25/cache_load
B=/tmp/s25-after3/cache_load_bench
COMMON="--db /dev/shm/s25/kernels.db --keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
M16="--clients 16 --seconds 20 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
run() {  # label env args...
  local label=$1 env=$2; shift 2
  { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) env: $env"
    echo "# $B $COMMON $*"
    env $env $B $COMMON "$@"; } > "$OUT/r7_${label}_mixed16.txt" 2>&1
}
run after3-nogate-keyset DICE_CACHE_SERVE_HANDLERS=0 $M16 --list-mode keyset
run after3-keyset DICE_CACHE_SERVE_HANDLERS=2 $M16 --list-mode keyset
run after3-nogate DICE_CACHE_SERVE_HANDLERS=0 $M16
run after3 DICE_CACHE_SERVE_HANDLERS=2 $M16
