#!/usr/bin/env bash
# Cache-hit dispatch overhead of two builds, side by side on one machine:
# runs A and B's dispatch_bench alternately (A B A B ...) ROUNDS times and
# prints each run's µs per call, then the median per benchmark and build.
# Host timings drift with machine load, so only runs interleaved like this
# (same machine, same minutes) are compared. Used for issue 16's "dispatch
# not slower" check: A = the commit before the redesign, B = this tree.
#   bash bench/dispatch_side_by_side.sh OLD/build/bench/dispatch_bench build/bench/dispatch_bench [ROUNDS]
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-3}
tmp=$(mktemp -d)
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    "$bin" --benchmark_min_time=0.3s 2>/dev/null |
      awk -v s="$side" -v r="$r" '$1 ~ /^(BareCuLaunchKernel|LoadedKernelLaunch|FusionGroupCacheHit)$/ {print s, r, $1, $2}' |
      tee -a "$tmp/rows"
  done
done
echo "median µs per call (A = $A, B = $B):"
for bm in BareCuLaunchKernel LoadedKernelLaunch FusionGroupCacheHit; do
  for side in A B; do
    awk -v s="$side" -v b="$bm" '$1 == s && $3 == b {print $4}' "$tmp/rows" | sort -g |
      awk -v s="$side" -v b="$bm" '{v[NR]=$1} END {if (NR) printf "%-22s %s %.2f\n", b, s, v[int((NR+1)/2)]}'
  done
done
rm -rf "$tmp"
