#!/usr/bin/env bash
# Run HERE (a machine with Debian's registry) before a device call: the GPU
# machine has no registry and lacks some -dev packages (seen: sqlite3.h,
# httplib.h). Downloads them as .deb files into .deps/ (git-ignored), which
# the device call carries (`carry: [".deps", ...]`) and scripts/setup.sh
# unpacks there. Also copies the KernelBench task files the benchmark needs
# into .deps/kernelbench (../shared does not travel), and pytest wheels into
# .deps/wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
(cd .deps && apt-get download libsqlite3-dev libsqlite3-0 libssl-dev libssl3 libcpp-httplib-dev libcpp-httplib0.11 \
   nlohmann-json3-dev libcli11-dev libicu-dev libicu72 >/dev/null)
# pytest (+ wheel) for the Python frontend's tests, installed offline there by setup.sh.
python3 -m pip download -q -d .deps/wheels pytest wheel
if [ -d ../shared/data/kernelbench ]; then
  rm -rf .deps/kernelbench && cp -r ../shared/data/kernelbench .deps/kernelbench
fi
du -sh .deps
