#!/usr/bin/env bash
# On the device machine: syncs the carried snapshot (.gpu-carry/tree, made by
# scripts/gpu_snapshot.sh) into build-src/ (git-ignored, kept between calls)
# by content, so files that did not change keep their times and the build in
# build-src/build stays incremental; then runs the given command there.
#   bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_check.sh -L gpu
# Before the command: processes a previous call left running in build-src/
# (a call past its limit is killed, but Inductor's compile workers and
# autotune subprocesses can outlive it, and on a warm machine they load the
# CPUs and the GPU under the next call's timings: session 31 saw eager run
# 2.3-2.8x slower) are killed and named. DICE_CALL_T0 (epoch s) is exported
# so scripts can fit their own limits inside the call's (gpu_compile_list.sh).
set -euo pipefail
export DICE_CALL_T0=${DICE_CALL_T0:-$(date +%s)}
here=$(cd "$(dirname "$0")/.." && pwd)   # .gpu-carry/tree
repo=$(cd "$here/../.." && pwd)
dest="$repo/build-src"
python3 - "$here" "$dest" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
seen = set()
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
        s, d = os.path.join(root, f), os.path.join(dst, rel, f)
        seen.add(os.path.normpath(d))
        if not os.path.exists(d) or not filecmp.cmp(s, d, shallow=False):
            shutil.copy(s, d)  # a changed file gets the time of now: newer than its objects
# Files gone from the snapshot (outside build/ and .deps/root) are removed.
for root, dirs, files in os.walk(dst):
    rel = os.path.relpath(root, dst)
    top = rel.split(os.sep)[0]
    if top == "build" or rel.startswith(os.path.join(".deps", "root")):
        continue
    for f in files:
        d = os.path.normpath(os.path.join(root, f))
        if d not in seen:
            os.remove(d)
PY
# Leftovers: processes whose working directory is inside build-src, other
# than this script and its ancestors.
keep=" $$ "
p=$$
while [ "$p" -gt 1 ]; do
  p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1)
  keep="$keep$p "
done
stray=()
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  case "$keep" in *" $pid "*) continue ;; esac
  cwd=$(readlink "$d/cwd" 2>/dev/null) || continue
  case "$cwd" in "$dest"|"$dest"/*) stray+=("$pid") ;; esac
done
if [ ${#stray[@]} -gt 0 ]; then
  names=""
  for pid in "${stray[@]}"; do
    names="$names $pid:$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-80);"
  done
  echo "gpu_from_snapshot: killing ${#stray[@]} process(es) left by an earlier call:$names"
  kill -9 "${stray[@]}" 2>/dev/null || true
  sleep 2
fi
if command -v nvidia-smi > /dev/null; then
  apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null || true)
  [ -n "$apps" ] && echo "gpu_from_snapshot: WARNING: the GPU is in use before the command: $apps"
fi
cd "$dest"
echo "gpu_from_snapshot: $(cat SNAPSHOT_COMMIT 2>/dev/null) in $dest"
"$@"
