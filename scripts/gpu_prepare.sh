#!/usr/bin/env bash
# Run HERE (a machine with Debian's registry) before a device call: the GPU
# machine has no registry and lacks some -dev packages (seen: sqlite3.h,
# httplib.h). Downloads them as .deb files into .deps/ (git-ignored), which
# the device call carries (`carry: [".deps", ...]`) and scripts/setup.sh
# unpacks there. Also copies the KernelBench task files the benchmark needs
# into .deps/kernelbench (../shared does not travel), the infilling items and
# SDAR configs into .deps/dice-rl and .deps/sdar, pytest wheels into
# .deps/wheels and the CUTLASS headers' wheel into .deps/cutlass.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
(cd .deps && apt-get download libsqlite3-dev libsqlite3-0 libssl-dev libssl3 libcpp-httplib-dev libcpp-httplib0.11 \
   libhiredis-dev libhiredis0.14 nlohmann-json3-dev libcli11-dev libicu-dev libicu72 >/dev/null)
# pytest (+ wheel) for the Python frontend's tests, installed offline there by setup.sh.
python3 -m pip download -q -d .deps/wheels pytest wheel
# The CUTLASS headers' wheel (pinned in scripts/setup.sh): without it the GPU
# machine builds no gemm/conv candidate and their GPU tests skip or fail.
cutlass=$(sed -n 's/^CUTLASS_VERSION=//p' scripts/setup.sh)
python3 -m pip download -q --no-deps -d .deps/cutlass "nvidia-cutlass==$cutlass"
if [ -d ../shared/data/kernelbench ]; then
  rm -rf .deps/kernelbench && cp -r ../shared/data/kernelbench .deps/kernelbench
fi
# The DICE kernel-infilling evaluation items (bench/infill_eval.py) and the
# SDAR configs (bench/sdar_decode_reference.py, sdar_decode_bench).
if [ -d ../shared/data/dice-rl ]; then
  mkdir -p .deps/dice-rl && cp ../shared/data/dice-rl/kernel_infilling_evaluation.json .deps/dice-rl/
fi
if [ -d ../shared/data/sdar ]; then
  mkdir -p .deps/sdar && cp ../shared/data/sdar/config-*.json .deps/sdar/
fi
du -sh .deps
