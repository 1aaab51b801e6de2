#!/bin/bash
# Rounds 3 and 4 of session 25 (docs/PERF.md): the before binary (82a1252)
# against the final after binary (3ff4df5: the gate on page routes only),
# back to back per configuration, on the same 100k-entry file on tmpfs.
# Usage: round3.sh ROUND ORDER   (ORDER: "before after2" or "after2 before")
set -u
R=$1; shift
ORDER=$*
OUT=$(dirname "$0")  # bench/results/2026-12-06/session25/cache_load
COMMON="--db /dev/shm/s25/kernels.db --keys 100000 --payload-bytes 51200 --payload-max-bytes 512000 --spread-fraction 0.1 --no-integrity-check 1"
declare -A BIN=([before]=/tmp/s25-before/cache_load_bench [after2]=/tmp/s25-after2/cache_load_bench)
run() {  # label config args...
  local label=$1 config=$2; shift 2
  local f="$OUT/r${R}_${label}_${config}.txt"
  { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# ${BIN[${label%%-*}]} $COMMON $*"
    "${BIN[${label%%-*}]}" $COMMON "$@"; } > "$f" 2>&1
}
G16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0 --server-times 1"
L16="--clients 16 --seconds 15 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0 --server-times 1"
M16="--clients 16 --seconds 20 --put-fraction 0.1 --list-fraction 0.1 --dashboard-fraction 0.02"
L1="--clients 1 --seconds 8 --put-fraction 0 --list-fraction 1 --dashboard-fraction 0"
G1="--clients 1 --seconds 8 --put-fraction 0 --list-fraction 0 --dashboard-fraction 0"
# Per configuration, both binaries in ORDER (the pairs are back to back).
for cfg in get16 list16 mixed16 list1 get1; do
  for who in $ORDER; do
    case $cfg in
      get16) run $who get16 $G16 ;;
      list16) if [ $who = before ]; then run before list16 $L16; else run after2 list16 $L16; run after2-keyset list16 $L16 --list-mode keyset; fi ;;
      mixed16) if [ $who = before ]; then run before mixed16 $M16; else run after2 mixed16 $M16; run after2-keyset mixed16 $M16 --list-mode keyset; fi ;;
      list1) if [ $who = before ]; then run before list1 $L1; else run after2-keyset list1 $L1 --list-mode keyset; fi ;;
      get1) run $who get1 $G1 ;;
    esac
  done
done
