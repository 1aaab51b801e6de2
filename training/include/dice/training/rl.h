// dice/training/rl.h — `dice train rl`: BiC-RL (DICE arXiv 2602.11715), the
// TraceRL objective (dice/training/losses.h) on rollouts of the generator's
// block-diffusion decoder, rewarded by the runtime's NVRTC compiler.
//
// One step:
//   1. The data schedule (examples.h TaskSchedule) picks tasks_per_step
//      tasks (stage "infill": kind infill/device/device_infill examples; "e2e": kind e2e
//      and task).
//   2. Each task is decoded G = group_size times (one batch, temperature
//      sampling, DecodeOptions from the options) and every token's
//      denoising step is recorded (DecodeResult::trace_*). With
//      --inject-known-good, the last `inject_per_group` rollouts of a group
//      whose task has a known-good answer are replaced by that answer,
//      traced left to right (token j of a block revealed at step
//      j * steps / block_size), so a random model's groups still carry an
//      advantage. An answer whose prompt + tokens would not fit the
//      model's context is not injected (logged). Injection stops once the
//      policy earns reward by itself (inject_until, injection.h: by default
//      per task, after its first own rewarded rollout).
//   3. Reward per rollout (--reward): "judge" = compiles AND correct: the
//      answer's program (stage infill: the task's prefix + the answer's code
//      block + suffix; e2e: the code block, a whole ModelNew program) is run
//      against the task's reference program by KernelBench's protocol
//      (runtime/program_judge.h JudgeProgram: a child Python process builds
//      it with load_inline, seeded trials, allclose 1e-2; judge_jobs at a
//      time) — reward 1 when correct, else 0 with the verdict logged for
//      known-good answers; a "device" or "device_infill" task (cache winner;
//      device_infill: its preamble + prefix + answer + suffix) is judged in the
//      device form by reward.h DeviceFormJudge (the runtime's Tuner and one
//      kept dice-worker: NVRTC, trials, timing; seconds per group). "compile" = the code block turned into the device
//      form (DeviceFormCandidate) compiles with NVRTC for `arch`
//      (runtime/compiler.h), ~50 ms a rollout, correctness not checked (the
//      reason is logged). "auto" (default) = judge when the device is CUDA,
//      compile otherwise. With speedup_bonus > 0 a judged-correct answer
//      with speedup s adds bonus * log2(s) (off by default, as in the paper).
//   4. Group-normalised advantages; groups with equal rewards are dropped.
//   5. The rollout policy's log-probs (logp_old) and the frozen reference
//      model's (logp_ref, the starting checkpoint) are computed once, on each
//      rollout's trace packed in forwards of at most max_trace_tokens tokens
//      (losses.h PackTraceChunks: the same log-probs as one forward); then
//      inner_epochs AdamW updates on the TraceRL loss (token mean over the
//      step's scored tokens), gradients clipped to grad_clip.
// A checkpoint (checkpoint_io.h) is written every save_every steps and at
// the end. Progress, mean reward and throughput are logged and written to a
// CSV. Only split "train" tasks are used.
//
// Rollout decoding (issue 19 item 5): on a CUDA model with rollout_graphs
// (default) rollouts run the fast decoder (CUDA graphs, merged commit,
// masked-row logits, the model's fused kernels) with graphs kept across
// tasks and steps (generator::DecodeSession); otherwise eagerly. The TraceRL
// ratio always uses the trainer's own recomputed logp_old; how far the
// decoder's log-probabilities of the sampled tokens are from it is
// measured every step (RlStepReport::logp_gap_*, the CSV's logp_gap_mean
// and logp_gap_max; rollout_numerics.h).
//
// Data parallel (dice/training/distributed.h): launched as WORLD_SIZE
// processes with the torchrun variables, every rank follows the same
// schedule; rank r decodes and rewards the r-th contiguous share of the
// step's tasks (ShardRange), the TraceRL token mean runs over the scored
// tokens of all ranks, and gradients are averaged before clipping and the
// AdamW step. Rewards, counts and throughput in the log and CSV are over all
// ranks; the schedule sees every rank's rewards. Rank 0 alone prints,
// writes the CSV and checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

struct RlOptions {
  std::string model_dir;        ///< starting checkpoint (the SFT model); also the KL reference
  /// An RL checkpoint of an earlier run (optimizer.pt, trainer_state.json of
  /// kind "rl"): the policy and the AdamW state load from it and the run
  /// goes on from its step to `steps` (total), with the same per-step seeds
  /// and task order as one uninterrupted run; model_dir stays the KL
  /// reference. "" = a fresh run. Ordered schedule only (the adaptive one's
  /// running success rate is not saved).
  std::string resume_dir;
  std::string tasks_path;       ///< CuKe JSONL of tasks
  std::string out_dir;
  std::string stage = "infill"; ///< "infill" (stage 1) | "e2e" (stage 2)
  std::string inject_path;      ///< JSONL {"id", "answer"} or CuKe lines (middle/program) of known-good answers
  std::string templates_path;   ///< prompt templates JSON; "" = built-in
  std::string csv_path;         ///< "" = out_dir/rl_log.csv
  std::string device = "cpu";
  std::string arch = "sm_90";   ///< NVRTC target of the reward compile
  std::string schedule = "ordered";  ///< "ordered" | "adaptive"
  double advance_at = 0.5;      ///< adaptive: running success rate that advances the level
  int64_t steps = 1;
  int64_t tasks_per_step = 1;
  int64_t group_size = 16;      ///< G rollouts per task
  int64_t inject_per_group = 1;
  /// When injection stops (injection.h): "task-earned" (default: a task's
  /// groups get its answer until the policy's own rollouts earned reward on
  /// it inject_earn_threshold times), "any-earned" (injection stops
  /// everywhere at that many own rewards over all tasks) or "always".
  std::string inject_until = "task-earned";
  int64_t inject_earn_threshold = 1;
  int64_t max_new_tokens = 256;
  int64_t denoising_steps = 4;
  double confidence_threshold = 0.9;  ///< dynamic low-confidence remasking
  double temperature = 1.0;
  /// CUDA model: rollouts decode through the fast decoder's CUDA graphs,
  /// kept across tasks and steps in one generator::DecodeSession (a capture
  /// per batch size seen, not per task; the optimizer's in-place updates keep
  /// the graphs valid). false: eager rollouts (no graphs). No effect on a
  /// CPU, where rollouts always decode eagerly.
  bool rollout_graphs = true;
  int64_t inner_epochs = 1;
  int64_t max_trace_tokens = 12288;  ///< TraceRL forward: packed tokens per chunk (losses.h PackTraceChunks; 0 = no cap)
  int64_t save_every = 0;
  double lr = 1e-6;
  double clip_eps = 0.2;
  double beta = 0.01;
  double grad_clip = 1.0;
  double speedup_bonus = 0.0;   ///< off by default (paper: binary reward)
  std::string reward = "auto";  ///< "auto" | "judge" | "compile" (see step 3 above)
  int64_t judge_jobs = 8;       ///< judge: rollouts judged at once (each a child process, a load_inline build)
  double judge_timeout_s = 300; ///< judge: limit per rollout (build + trials + timing), seconds
  uint64_t seed = 0;
  int64_t dist_timeout_s = 60;         ///< data parallel: rendezvous timeout, seconds
  int64_t collective_timeout_s = 1800; ///< data parallel: wait for the other ranks per collective, seconds
};

/// What one RL step did.
struct RlStepReport {
  int64_t step = 0;
  int level = 0;               ///< level of the step's first task
  double mean_reward = 0;      ///< over all rollouts of the step (injected included)
  double policy_reward = 0;    ///< over the decoded (not injected) rollouts only
  int64_t rollouts = 0, injected = 0, compiled = 0;
  int64_t groups_used = 0, groups_dropped = 0;
  int64_t scored_tokens = 0;
  double loss = 0;
  double rollout_tokens_per_s = 0;  ///< trace tokens decoded / decode wall time (all ranks)
  double seconds = 0;
  /// Decoder vs trainer log-probabilities of the decoded rollouts' tokens
  /// (rollout_numerics.h): mean and max |logp_decoder - logp_old| in nats
  /// over logp_gap_tokens tokens of the groups used (0 when none).
  double logp_gap_mean = 0, logp_gap_max = 0;
  int64_t logp_gap_tokens = 0;
  int64_t rollout_graphs_made = 0;  ///< step graphs captured during the step's rollouts (all ranks)
};

struct RlReport {
  std::vector<RlStepReport> steps;
  double parameter_change = 0;  ///< L2 norm of (final - initial) weights
  std::string correctness_note; ///< why correctness was not checked, when it was not
  std::string checkpoint;        ///< "" on ranks other than 0
  int rank = 0;                  ///< this process's data-parallel rank
  int world_size = 1;            ///< data-parallel world size
  std::string parameter_digest;  ///< ParameterDigest of the final weights (distributed.h): equal on all ranks
  int64_t first_step = 0;        ///< 0, or the step resume_dir was saved at
};

/// Runs BiC-RL. Errors: kInvalidArgument for bad options (naming the flag),
/// no task of the stage's kind, a malformed inject file, a resume_dir whose
/// weights do not fit model_dir's architecture or whose step is not before
/// `steps`; kNotFound for a resume_dir without trainer_state.json; those of the
/// checkpoint/model/tokenizer loaders; kNoDevice for cuda without a GPU;
/// kInternal when LibTorch fails (the last checkpoint stays intact); data
/// parallel: those of DataParallel::Join and its collectives, the message
/// prefixed with "rank R of N".
Expected<RlReport> RunRl(const RlOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace dice::training
