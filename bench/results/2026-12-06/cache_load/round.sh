#!/bin/bash
# One paired round: each configuration runs with both binaries back to back.
# $1: round label; $2: "after-first" or "before-first"
set -u
OUT=/work/main/bench/results/2026-12-06/cache_load
mkdir -p "$OUT"
AFTER="/work/main/build/bench/cache_load_bench --db /dev/shm/h20m-a/kernels.db"
BEFORE="/tmp/cache-v4-before/cache_load_bench --db /dev/shm/h20m-b/kernels.db"
COMMON="--keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
configs=(
  "mixed16|--clients 16 --seconds 30 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
  "get16|--clients 16 --seconds 15 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0"
  "list16|--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0"
  "list1|--clients 1 --seconds 10 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0"
  "get1|--clients 1 --seconds 10 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0"
  "list16_server|--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0 --server-times 1"
  "mixed16_server|--clients 16 --seconds 30 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02 --server-times 1"
)
for c in "${configs[@]}"; do
  name=${c%%|*}; flags=${c#*|}
  if [ "$2" = after-first ]; then order="after before"; else order="before after"; fi
  for which in $order; do
    if [ $which = after ]; then bin=$AFTER; else bin=$BEFORE; fi
    f="$OUT/${1}_${which}_${name}.txt"
    { echo "# $(date -u +%FT%TZ) $(cat /proc/loadavg) | $which | $bin $COMMON $flags"; $bin $COMMON $flags; echo "# exit $?"; } > "$f" 2>&1
  done
done
