#!/usr/bin/env bash
# Run HERE before a device call when the working tree is not the tree to
# test (e.g. helpers have edits in progress): writes a commit's tree (default
# HEAD) plus the carried .deps (without the unpacked .deps/root) into
# .gpu-carry/tree (git-ignored), which the call carries:
#   bash scripts/gpu_snapshot.sh [COMMIT]
#   device call: carry [".gpu-carry"], command
#     bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash scripts/gpu_check.sh -L gpu
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
rm -rf .gpu-carry/tree
mkdir -p .gpu-carry/tree
git archive "$rev" | tar -x -C .gpu-carry/tree
if [ -d .deps ]; then
  mkdir -p .gpu-carry/tree/.deps
  for f in .deps/*; do [ "$(basename "$f")" = root ] || cp -r "$f" .gpu-carry/tree/.deps/; done
fi
git rev-parse "$rev" > .gpu-carry/tree/SNAPSHOT_COMMIT
echo "snapshot of $(cat .gpu-carry/tree/SNAPSHOT_COMMIT) in .gpu-carry/tree ($(du -sh .gpu-carry | cut -f1))"
