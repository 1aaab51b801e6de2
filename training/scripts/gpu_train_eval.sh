#!/usr/bin/env bash
# Issue 4's H200 run, in device calls of < 10 minutes each (a warm machine
# keeps the ignored build/, where the work directory lives):
#   PHASE=sweep bash training/scripts/gpu_train_eval.sh  # build, template sweep into $W/sweep.db (optional, ~5 min)
#   PHASE=sft  bash training/scripts/gpu_train_eval.sh   # build, init, dataset, SFT, eval of the SFT model
#   PHASE=rl   bash training/scripts/gpu_train_eval.sh   # stage-1 RL from the SFT model, eval of the RL model
#   PHASE=eval NAME=sft|rl bash training/scripts/gpu_train_eval.sh  # eval only (of $W/m1 or $W/m2)
# EVAL=0 leaves the eval out of the sft and rl phases (run it as PHASE=eval,
# e.g. on the other GPU of nvidia-h200-x2); GPU=N picks the device (cuda:N).
# Both evals use the same held-out tasks (split by task hash in `dice train
# dataset`), seed, sample count and judged reward (compiles AND correct,
# KernelBench protocol), so pass@k of SFT and RL compare directly. Sizes
# and steps are environment variables (defaults below). CSVs, eval JSONs
# and logs go to $OUT. On a device machine (no Debian registry, no
# ../shared): run bash scripts/gpu_prepare.sh on this side first and carry
# .deps. DEV=cpu runs the whole flow on CPU at toy sizes (README "Scripts").
# K is the pass@k list (default 1,4,N; every k <= N).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice-out}
PHASE=${PHASE:-sft}
W=${W:-build/train-eval}
HELDOUT=${HELDOUT:-30}  # percent of split keys (op-chains; corpus items: task hashes) held out for eval
VALIDATION=${VALIDATION:-20}  # percent of split keys for validation (split.h)
HIDDEN=${HIDDEN:-512}
LAYERS=${LAYERS:-8}
SFT_STEPS=${SFT_STEPS:-400}
RL_STEPS=${RL_STEPS:-40}  # LIMIT_S (gpu_issue4_x2.sh) stops it; a checkpoint every step
N=${N:-8}
MAX_NEW=${MAX_NEW:-2048}  # bytes: the 99 items' middles are 647-7518 bytes (median 1676)
TEMP=${TEMP:-0.7}
RL_MAX_NEW=${RL_MAX_NEW:-512}  # device_infill middles are <= 384 bytes
RL_LR=${RL_LR:-3e-5}
RL_GROUP=${RL_GROUP:-8}             # G rollouts per task (1 of them the injected known-good answer)
RL_INNER_EPOCHS=${RL_INNER_EPOCHS:-1}  # TraceRL updates per batch of rollouts (PPO clip bounds the later ones)
# RL and eval tasks: dev_infill (kernel lines of sweep winners, judged by
# NVRTC in the device form, ~50 ms) or infill (all stage-1 kinds; the
# imported items are judged by load_inline builds, ~60 s each).
RL_TASKS=${RL_TASKS:-dev_infill}
EVAL_TASKS=${EVAL_TASKS:-dev_infill}
# FOCUS_STEPS > 0: after SFT on the whole set ($W/m1_all), a second SFT
# stage from it on the training device_infill examples only ($W/m1), so that
# the RL start model earns some reward on stage-1 tasks (a model that never
# does gives every group the same reward). 0: $W/m1 is the whole-set model.
FOCUS_STEPS=${FOCUS_STEPS:-0}
FOCUS_LR=${FOCUS_LR:-5e-4}
# RL_TASK_LIMIT > 0: RL takes only the first N training tasks of $RL_TASKS
# (written to $W/rl_tasks.jsonl), so that a short run visits each several
# times and a per-task reward trend can show; 0: all of them.
RL_TASK_LIMIT=${RL_TASK_LIMIT:-0}
# RL_RESUME=1: PHASE=rl continues the RL run in $W/m2 (dice train rl
# --resume; RL_STEPS is the total) instead of starting one from $W/m1.
RL_RESUME=${RL_RESUME:-0}
JUDGE_JOBS=${JUDGE_JOBS:-16}
EVAL=${EVAL:-1}
GPU=${GPU:-0}
DEV=${DEV:-cuda:$GPU}  # DEV=cpu: the same flow on CPU (compile-only sweep and reward), to check the script
DICE=${DICE:-./build/cli/dice}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
if [ "${SKIP_BUILD:-0}" != 1 ]; then  # SKIP_BUILD=1: build/cli/dice is built (two phases at once share it)
  JOBS=${JOBS:-16} BUILD_TARGETS=dice bash scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
source scripts/deps_env.sh
run_eval() {  # $1 model dir, $2 tasks file, $3 split, $4 max new tokens, $5 output name, $6 summary lines shown
  $DICE train eval --model "$1" --tasks "$2" --split "$3" --templates "$W/templates.json" --device "$DEV" \
    --stage infill -n "$N" -k "${K:-1,4,$N}" --max-new-tokens "$4" --temperature "$TEMP" --seed 11 \
    --judge-jobs "$JUDGE_JOBS" --judge-timeout 240 --json "$OUT/$5.json" 2>&1 | tee "$OUT/$5.log" | tail -"$6"
}
eval_model() {  # $1 model dir, $2 name
  if [ "$EVAL_TASKS" = dev_infill ] && ! grep -q '"split":"heldout"' "$W/dev_infill.jsonl" 2>/dev/null; then
    echo "eval: no held-out device_infill task: evaluating on infill"; EVAL_TASKS=infill
  fi
  local max_new=$MAX_NEW; [ "$EVAL_TASKS" = dev_infill ] && max_new=$RL_MAX_NEW
  run_eval "$1" "$W/$EVAL_TASKS.jsonl" heldout "$max_new" "eval_$2" 3
  # A later stage against the SFT model on the same held-out tasks: the
  # paired bootstrap interval of the difference (dice train compare).
  if [ "$2" != sft ] && [ -f "$OUT/eval_sft.json" ]; then
    $DICE train compare --base "$OUT/eval_sft.json" --new "$OUT/eval_$2.json" 2>&1 | tee "$OUT/compare_sft_$2.log" || true
  fi
  # The RL run's own (training) tasks too, when RL_TASK_LIMIT chose them:
  # what RL changed on the tasks it was rewarded on, beside the held-out pass@k.
  if [ -f "$W/rl_tasks.jsonl" ]; then run_eval "$1" "$W/rl_tasks.jsonl" train "$RL_MAX_NEW" "eval_$2_rltasks" 1; fi
}
# $W/rl_tasks.jsonl: the first RL_TASK_LIMIT training tasks of $RL_TASKS
# (once; PHASE=sft empties $W), so that the SFT model's eval beside RL and
# the RL run score the same tasks.
write_rl_task_subset() {
  [ "$RL_TASK_LIMIT" -gt 0 ] && [ ! -f "$W/rl_tasks.jsonl" ] &&
    grep '"split":"train"' "$W/$RL_TASKS.jsonl" | head -n "$RL_TASK_LIMIT" > "$W/rl_tasks.jsonl"
  return 0
}
sft() {  # $1 start model, $2 data, $3 out, $4 steps, $5 lr, $6 warm-up steps, $7 save every, $8 log name
  $DICE train sft --model "$1" --data "$2" --templates "$W/templates.json" --out "$3" \
    --device "$DEV" --steps "$4" --batch-size "${SFT_BATCH:-8}" --max-length 3072 --lr "$5" --warmup-steps "$6" \
    --save-every "$7" > "$OUT/$8.log" 2>&1; echo "$8 exit $?"
  grep -v "^sft step" "$OUT/$8.log"
}
if [ "$PHASE" = sweep ]; then
  mkdir -p "$W"
  $DICE train sweep --cache-db "$W/sweep.db" --gpu "$GPU" ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} --budget-s "${SWEEP_BUDGET_S:-30}" --max-candidates "${SWEEP_CANDIDATES:-8}" 2>&1 | tee "$OUT/sweep.log" | tail -40
elif [ "$PHASE" = sft ]; then
  # Keep a sweep's cache (PHASE=sweep) when there is one: its winners become device examples.
  find "$W" -mindepth 1 -maxdepth 1 ! -name sweep.db -exec rm -rf {} + 2>/dev/null; mkdir -p "$W"
  printf '%s' '{"system": "", "infilling": "Reference:\n{reference}\nPrefix:\n{prefix}\nSuffix:\n{suffix}", "end_to_end": "Reference:\n{reference}"}' > "$W/templates.json"
  $DICE train init --out "$W/m0" --byte-tokenizer --hidden "$HIDDEN" --layers "$LAYERS" --heads 8 --kv-heads 4 \
    --head-dim $((HIDDEN / 8)) --intermediate $((HIDDEN * 3)) --context 8192 --seed 1 | tee "$OUT/init.log"
  sweep_db=(); [ -f "$W/sweep.db" ] && sweep_db=(--cache-db "$W/sweep.db")
  $DICE train dataset --corpus "${CORPUS:-.deps/dice-rl/kernel_infilling_evaluation.json}" "${sweep_db[@]}" --out "$W/cuke.jsonl" --heldout-percent "$HELDOUT" \
    --validation-percent "$VALIDATION" --verify none | tee "$OUT/dataset.log"
  grep -E '"kind":"(infill|device|device_infill)"' "$W/cuke.jsonl" > "$W/infill.jsonl"
  grep -E '"kind":"device_infill"' "$W/cuke.jsonl" > "$W/dev_infill.jsonl" ||
    { echo "no device_infill examples (no sweep winners): RL/eval fall back to infill"; cp "$W/infill.jsonl" "$W/dev_infill.jsonl"; }
  write_rl_task_subset
  sft "$W/m0" "$W/infill.jsonl" "$W/m1" "$SFT_STEPS" 1e-3 20 100 sft
  cp "$W/m1/sft_log.csv" "$OUT/" 2>/dev/null
  if [ "$FOCUS_STEPS" -gt 0 ]; then
    mv "$W/m1" "$W/m1_all"
    sft "$W/m1_all" "$W/dev_infill.jsonl" "$W/m1" "$FOCUS_STEPS" "$FOCUS_LR" 10 "$FOCUS_STEPS" sft_focus
    cp "$W/m1/sft_log.csv" "$OUT/sft_focus_log.csv" 2>/dev/null
  fi
  if [ "$EVAL" = 1 ]; then eval_model "$W/m1" sft; fi
elif [ "$PHASE" = rl ]; then
  [ -d "$W/m1" ] || { echo "gpu_train_eval: $W/m1 missing: run PHASE=sft first on this (warm) machine" >&2; exit 2; }
  rl_max_new=$MAX_NEW; [ "$RL_TASKS" = dev_infill ] && rl_max_new=$RL_MAX_NEW
  rl_tasks="$W/$RL_TASKS.jsonl"
  if [ "$RL_TASK_LIMIT" -gt 0 ]; then
    write_rl_task_subset
    rl_tasks="$W/rl_tasks.jsonl"
    echo "rl: the first $(wc -l < "$rl_tasks") training tasks of $RL_TASKS.jsonl ($rl_tasks)"
  fi
  resume=()
  if [ "$RL_RESUME" = 1 ]; then
    [ -f "$W/m2/trainer_state.json" ] || { echo "gpu_train_eval: RL_RESUME=1 but $W/m2 holds no RL run" >&2; exit 2; }
    resume=(--resume "$W/m2")
  fi
  $DICE train rl --model "$W/m1" "${resume[@]}" --tasks "$rl_tasks" --templates "$W/templates.json" --out "$W/m2" \
    --device "$DEV" --stage infill --steps "$RL_STEPS" --tasks-per-step "${RL_TASKS_PER_STEP:-4}" --group-size "$RL_GROUP" --max-new-tokens "$rl_max_new" --temperature "$TEMP" \
    --inject-known-good "$rl_tasks" --save-every 1 --lr "$RL_LR" --inner-epochs "$RL_INNER_EPOCHS" --judge-jobs "$JUDGE_JOBS" 2>&1 | tee "$OUT/rl.log" | tail -12
  cp "$W/m2/rl_log.csv" "$OUT/" 2>/dev/null
  if [ "$EVAL" = 1 ]; then eval_model "$W/m2" rl; fi
elif [ "$PHASE" = eval ]; then
  NAME=${NAME:-sft}
  case "$NAME" in sft) m="$W/m1" ;; rl) m="$W/m2" ;; *) echo "gpu_train_eval: NAME must be sft or rl" >&2; exit 2 ;; esac
  [ -d "$m" ] || { echo "gpu_train_eval: $m missing: run PHASE=$NAME first on this (warm) machine" >&2; exit 2; }
  eval_model "$m" "$NAME"
else
  echo "gpu_train_eval: PHASE must be sweep, sft, rl or eval, got '$PHASE'" >&2; exit 2
fi
