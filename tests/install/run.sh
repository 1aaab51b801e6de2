#!/usr/bin/env bash
# ctest InstallConsumer: docs/EMBEDDING.md, run as written. Extracts the
# doc's files (fences tagged file=PATH) and its commands (fences tagged
# run=install-test), runs the commands in a scratch directory whose `build`
# is this build tree, with the doc's prefix $HOME/opt/dice replaced by a
# temporary one, and expects the consumer's line. Then checks the package
# itself with the project beside this script: every exported target exists,
# a dice::core-only program builds, diceConfig.cmake finds Torch through
# python3 when it is not on the prefix path, and says what to add when it
# cannot find it at all.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
doc="$src/../../docs/EMBEDDING.md"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/work"
ln -s "$build" "$tmp/work/build"
# Dependencies unpacked from .deps (scripts/setup.sh on machines without root) are one more prefix.
if [ -d "$src/../../.deps/root/usr" ]; then
  export CMAKE_PREFIX_PATH="$(cd "$src/../../.deps/root/usr" && pwd)${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
fi
export DICE_CACHE_DIR="$tmp/cache"
unset DICE_MODE

# The doc's blocks: file=PATH fences become files under work/, run=install-test fences one script.
awk -v out="$tmp/work" -v script="$tmp/commands.sh" '
  /^```/ && inside { inside = 0; target = ""; next }
  /^```.*file=/ { match($0, /file=[^ ]+/); target = out "/" substr($0, RSTART + 5, RLENGTH - 5); inside = 1;
                  dir = target; sub(/\/[^\/]*$/, "", dir); system("mkdir -p \"" dir "\""); printf "" > target; next }
  /^```.*run=install-test/ { target = script; inside = 1; next }
  inside { print >> target }
' "$doc"
for f in my_app/CMakeLists.txt my_app/main.cc; do
  [ -s "$tmp/work/$f" ] || { echo "docs/EMBEDDING.md has no block file=$f" >&2; exit 1; }
done
[ -s "$tmp/commands.sh" ] || { echo "docs/EMBEDDING.md has no run=install-test block" >&2; exit 1; }
sed -i "s|\$HOME/opt/dice|$tmp/prefix|g" "$tmp/commands.sh"
(cd "$tmp/work" && bash -euo pipefail "$tmp/commands.sh") > "$tmp/doc.log" 2>&1 || { cat "$tmp/doc.log"; exit 1; }
grep -q '^my_app: 1 fusion group(s), output \[8, 8\]$' "$tmp/doc.log" || { cat "$tmp/doc.log"; echo "the doc's program did not print its line" >&2; exit 1; }
grep '^my_app:' "$tmp/doc.log"

# The installed tools start as they are, with no LD_LIBRARY_PATH (install RPATH: lib/ and LibTorch's).
env -u LD_LIBRARY_PATH "$tmp/prefix/bin/dice" --help > "$tmp/dice-help.log" 2>&1 ||
  { cat "$tmp/dice-help.log"; echo "the installed bin/dice does not start" >&2; exit 1; }
grep -q 'tune' "$tmp/dice-help.log" || { cat "$tmp/dice-help.log"; echo "bin/dice --help lists no tune" >&2; exit 1; }

# The package: targets + a core-only program, Torch found through python3 (not on the prefix path).
cmake -S "$src" -B "$tmp/check" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; exit 1; }
cmake --build "$tmp/check" > "$tmp/check-build.log" 2>&1 || { cat "$tmp/check-build.log"; exit 1; }
"$tmp/check/core_consumer"
# No Torch anywhere: find_package(dice) fails and names the flag to add.
if cmake -S "$src" -B "$tmp/notorch" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DDICE_PYTHON=/nonexistent/python3 > "$tmp/notorch.log" 2>&1; then
  cat "$tmp/notorch.log"; echo "find_package(dice) succeeded without Torch" >&2; exit 1
fi
grep -q 'torch.utils.cmake_prefix_path' "$tmp/notorch.log" || { cat "$tmp/notorch.log"; echo "no hint on how to find Torch" >&2; exit 1; }
echo "InstallConsumer: all checks passed"
