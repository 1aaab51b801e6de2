#!/usr/bin/env bash
# Issue 19 item 5: `dice train rl` rollout tokens/s with the rollouts' CUDA
# graphs off (eager, the earlier behaviour) and on (graphs kept across tasks
# and steps, generator::DecodeSession), same model, tasks, seeds and steps;
# plus the decoder-vs-trainer log-probability gap of each step. A random
# byte-tokenizer model of HIDDEN x LAYERS (bf16 is not used: `dice train rl`
# trains in f32) on the repo's tiny corpus, reward compile (NVRTC only).
# Device call after a build (scripts/setup.sh): DICE=build/cli/dice.
# Prints the step lines and both CSVs; writes them under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
DICE=${DICE:-build/cli/dice}
DEV=${DEV:-cuda}
OUT=${OUT:-/tmp/dice-out}
W=${W:-/tmp/dice-rollout-graphs}
HIDDEN=${HIDDEN:-1024}
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-3}
GROUP=${GROUP:-16}
TASKS_PER_STEP=${TASKS_PER_STEP:-4}
MAX_NEW=${MAX_NEW:-256}
rm -rf "$W"; mkdir -p "$W" "$OUT"
$DICE train init --out "$W/m0" --byte-tokenizer --hidden "$HIDDEN" --layers "$LAYERS" --heads 8 --kv-heads 4 \
  --head-dim $((HIDDEN / 8)) --intermediate $((HIDDEN * 3)) --context 8192 --seed 1 > "$OUT/rg_init.log" 2>&1 ||
  { tail "$OUT/rg_init.log"; exit 1; }
$DICE train dataset --corpus "${CORPUS:-tests/data/training/tiny_corpus.json}" --out "$W/cuke.jsonl" --verify none \
  > "$OUT/rg_dataset.log" 2>&1 || { tail "$OUT/rg_dataset.log"; exit 1; }
grep -E '"kind":"infill"' "$W/cuke.jsonl" | grep '"split":"train"' > "$W/tasks.jsonl"
echo "tasks: $(wc -l < "$W/tasks.jsonl")"
for g in off on; do
  $DICE train rl --model "$W/m0" --tasks "$W/tasks.jsonl" --inject-known-good "$W/tasks.jsonl" --out "$W/rl_$g" \
    --device "$DEV" --stage infill --steps "$STEPS" --tasks-per-step "$TASKS_PER_STEP" --group-size "$GROUP" \
    --max-new-tokens "$MAX_NEW" --reward compile --seed 1 --rollout-graphs "$g" > "$OUT/rg_rl_$g.log" 2>&1
  echo "rollout graphs $g: exit $?"
  grep -E "^rl step|rollouts decode|rl: step .*error" "$OUT/rg_rl_$g.log" | tail -$((STEPS + 1))
  cp "$W/rl_$g/rl_log.csv" "$OUT/rg_rl_log_$g.csv" 2>/dev/null && cat "$OUT/rg_rl_log_$g.csv"
done
