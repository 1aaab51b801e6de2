#!/usr/bin/env bash
# ctest InstallConsumer: installs the build tree into a temporary prefix and
# builds + runs a program that finds it with find_package(dice).
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
torch_prefix=$(python3 -c 'import torch,sys;sys.stdout.write(torch.utils.cmake_prefix_path)' 2>/dev/null)
deps=""
[ -d "$src/../../.deps/root/usr" ] && deps="$(cd "$src/../../.deps/root/usr" && pwd);"
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix;$deps$torch_prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
