#!/usr/bin/env bash
# Device call (GPU machine, carry .deps): the cache-sharing scenario of issue 5.
#   1. `dice warmup` a KernelBench model into cache A (tune-sync on the GPU);
#   2. `dice cache serve` on loopback and `dice cache push` A to it;
#   3. wipe the local cache; `dice run` with DICE_REMOTE_CACHE pulls every
#      winner on its local miss, re-verifies and re-times it on this GPU, and
#      serves it (hit per group); step time vs an empty cache (all PyTorch).
# Builds only dice + dice-worker when build/cli/dice is missing. Logs under $OUT.
#   TASK=level2/76_Gemm_Add_ReLU.py bash scripts/gpu_cache_share.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dice-out}
mkdir -p "$OUT"
TASK=${TASK:-level2/76_Gemm_Add_ReLU.py}
if [ ! -x build/cli/dice ] || [ ! -x build/runtime/dice-worker ]; then
  JOBS=${JOBS:-16} BUILD_TARGETS="dice dice-worker" bash scripts/setup.sh > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
fi
DICE=$PWD/build/cli/dice
W=$(mktemp -d /tmp/dice-share-XXXXXX)
python3 examples/make_kernelbench_models.py ".deps/kernelbench/$TASK" --out "$W/models" > "$OUT/make_model.log" 2>&1 ||
  { cat "$OUT/make_model.log"; exit 1; }
dir="$W/models/$(dirname "$TASK")_$(basename "$TASK" .py)"
set_spec=$(python3 -c "import json;print(','.join(json.load(open('$dir/meta.json'))['inputs']))")
inputs=$(python3 -c "import json;print(' '.join('--input '+s for s in json.load(open('$dir/meta.json'))['inputs']))")
echo "== task $TASK, inputs $set_spec"

echo "== 1. warmup into cache A"
"$DICE" warmup "$dir/model.pt" --input "$set_spec" --cache "$W/a" --budget-s 30 2>&1 | tee "$OUT/warmup.log"
"$DICE" cache stats --cache "$W/a"

echo "== 2. serve + push"
echo "scenario-token" > "$W/token"
"$DICE" cache serve --db "$W/server.db" --listen 127.0.0.1:0 --token-file "$W/token" > "$W/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
URL=""
for _ in $(seq 100); do
  URL=$(grep -o 'http://[0-9.:]*' "$W/serve.log" | head -1 || true)
  [ -n "$URL" ] && break
  sleep 0.1
done
"$DICE" cache push "$URL" --token-file "$W/token" --cache "$W/a" | tee "$OUT/push.log"

echo "== 3. wipe local cache; dice run with an empty cache (every group on PyTorch)"
rm -rf "$W/a"
"$DICE" run "$dir/model.pt" $inputs --cache "$W/empty" --reps 50 | tee "$OUT/run_empty.log"

echo "== 4. dice run with DICE_REMOTE_CACHE=$URL (pull on miss, re-verify, serve)"
DICE_REMOTE_CACHE="$URL" "$DICE" run "$dir/model.pt" $inputs --cache "$W/b" --reps 50 | tee "$OUT/run_pulled.log"
"$DICE" cache stats --cache "$W/b" | tee "$OUT/stats_pulled.log"
"$DICE" cache ls --cache "$W/b"

echo "== 5. again from the now-local verified cache (no remote)"
"$DICE" run "$dir/model.pt" $inputs --cache "$W/b" --reps 50 | tee "$OUT/run_local.log"
curl -s "$URL/" > "$OUT/dashboard.html" || true
kill $SERVER; wait $SERVER || true
trap - EXIT
rm -rf "$W"
