#!/usr/bin/env bash
# On the device machine: syncs the carried snapshot (.gpu-carry/tree, made by
# scripts/gpu_snapshot.sh) into build-src/ (git-ignored, kept between calls)
# by content, so files that did not change keep their times and the build in
# build-src/build stays incremental; then runs the given command there.
#   bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_check.sh -L gpu
set -euo pipefail
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
cd "$dest"
echo "gpu_from_snapshot: $(cat SNAPSHOT_COMMIT 2>/dev/null) in $dest"
"$@"
