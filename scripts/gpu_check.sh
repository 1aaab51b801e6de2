#!/usr/bin/env bash
# Device call: build, then every test (GPU tests run for real there). Logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
JOBS=${JOBS:-16} bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
tail -3 "$OUT/build.log"
source scripts/deps_env.sh
cd build && ctest --output-on-failure --timeout 300 -j 4 "$@" 2>&1 | tee "$OUT/ctest.log" | grep -E "Failed|FAILED|Skipped|SKIPPED|tests passed|tests failed|\*\*\*" | tail -60
