// dice/training/eval.h — `dice train eval`: pass@k of a checkpoint on a
// fixed split of CuKe tasks (by default the held-out ones: the split by
// task hash that `dice train dataset` writes, never trained on), so the SFT
// and RL models of issue 4 are compared on the same tasks, seeds and reward.
//
// Per task: the prompt of the stage's kind (infill/device or e2e/task), n
// samples decoded in one batch with the generator's block-diffusion decoder
// (dynamic remasking, temperature sampling: the rollout settings of rl.h),
// each scored by reward.h RewardAnswers (judge: compiles AND correct by
// KernelBench's protocol; compile: NVRTC only), then the unbiased pass@k
// estimator (reward.h PassAtK) per task and its mean over tasks.
// Decode throughput (tokens/s, counting every decoded token) is reported;
// on CUDA the decoder replays its step forward as CUDA graphs. All tasks are
// decoded first, then scored, several tasks at once (judge_jobs children in
// all). Every mean pass@k carries its 95% percentile bootstrap interval over
// tasks (stats.h, seeded with the run's seed), in the log line and the JSON;
// two reports on the same tasks are compared with eval_report.h
// CompareEvalFiles (a paired bootstrap of the difference).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/training/stats.h"

namespace dice::training {

struct EvalOptions {
  std::string model_dir;        ///< checkpoint to evaluate
  std::string tasks_path;       ///< CuKe JSONL
  std::string out_json;         ///< "" = no report file
  std::string stage = "infill"; ///< "infill" (kinds infill, device) | "e2e" (kinds e2e, task)
  std::string split = "heldout";///< "heldout" | "validation" | "train" | "all" (split.h)
  std::string templates_path;   ///< prompt templates JSON; "" = built-in
  std::string device = "cpu";
  std::string arch = "sm_90";   ///< NVRTC target (reward compile)
  std::string reward = "auto";  ///< "auto" (judge on CUDA) | "judge" | "compile"
  int64_t samples = 8;          ///< n answers per task
  std::vector<int64_t> ks = {1};///< each 1 <= k <= samples
  int64_t max_tasks = 0;        ///< 0 = every task of the split
  int64_t max_new_tokens = 256;
  int64_t denoising_steps = 4;
  double confidence_threshold = 0.9;
  double temperature = 1.0;
  int64_t judge_jobs = 8;
  double judge_timeout_s = 300;
  uint64_t seed = 0;
  int64_t bootstrap_resamples = 10000;  ///< draws of the pass@k interval (stats.h); seeded with `seed`
};

/// One task's outcome.
struct EvalTaskResult {
  std::string id;
  int level = 1;
  int64_t samples = 0;   ///< n
  int64_t passed = 0;    ///< c: reward > 0
  int64_t compiled = 0;
  std::vector<double> pass_at_k;  ///< per EvalOptions::ks
  std::string first_failure;      ///< why the first failing sample failed ("" when all passed)
};

struct EvalReport {
  std::string metric;             ///< "compiles AND correct (KernelBench protocol on DEV)" or "compiles (NVRTC ARCH)"
  std::vector<int64_t> ks;
  std::vector<double> pass_at_k;  ///< mean over tasks, per k
  std::vector<Interval> pass_at_k_ci;  ///< per k: the mean and its 95% bootstrap interval over tasks
  BootstrapOptions bootstrap;          ///< how pass_at_k_ci was drawn
  std::vector<EvalTaskResult> tasks;
  int64_t decoded_tokens = 0;
  double decode_s = 0;            ///< seconds spent decoding (rewarding excluded)
  double tokens_per_s = 0;        ///< decoded_tokens / decode_s
  double seconds = 0;             ///< whole evaluation, seconds
};

/// Evaluates. Errors: kInvalidArgument for bad options (naming the flag: k
/// outside 1..samples, unknown stage/split/reward) or no task of the stage
/// in the split; those of the checkpoint/tokenizer loaders and ReadExamples;
/// kNoDevice for cuda without a GPU; kIoError when out_json cannot be
/// written; kInternal when LibTorch fails. A sample that does not compile,
/// crashes or is wrong is a zero, not an error.
Expected<EvalReport> RunEval(const EvalOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace dice::training
