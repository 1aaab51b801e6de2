#!/usr/bin/env bash
# Sets up, builds and runs every test. GPU tests (ctest label `gpu`) skip
# themselves with a reason on machines without a CUDA device.
#   bash scripts/test.sh            # all tests
#   bash scripts/test.sh -L gpu     # extra args go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Redis remote-cache tests start a real redis-server on loopback (Debian's
# package); without it they skip. Installed here when missing, as root, where
# a registry is reachable (not on the GPU machine, which carries .deps/).
if ! command -v redis-server >/dev/null && [ ! -d .deps ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[test] installing redis-server (Redis cache tests)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; } \
    >/dev/null 2>&1 || echo "[test] redis-server not installed; the Redis cache tests will skip"
fi
# The tokenizer fixture is checked against Hugging Face's tokenizer (PyPI).
python3 -c 'import transformers' 2>/dev/null || python3 -m pip install -q transformers
# The Python frontend's tests (torch_ext/python) run under pytest; wheel lets
# them pip-install the package offline (--no-build-isolation). Both from PyPI.
python3 -c 'import pytest, wheel' 2>/dev/null || python3 -m pip install -q pytest wheel
# The SDAR model tests write their reference checkpoints with safetensors (PyPI).
python3 -c 'import safetensors' 2>/dev/null || python3 -m pip install -q safetensors
# ctest SourceSizeLimits (scripts/check_sizes.py) measures functions with
# lizard, pinned so every machine counts the same lines (PyPI).
python3 -c 'from lizard_ext import version; assert version == "1.17.13"' 2>/dev/null ||
  python3 -m pip install -q lizard==1.17.13
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 600 -j "${JOBS:-2}" "$@"
