// dice/training/reward.h — the reward of a model's answers to one CuKe task,
// shared by BiC-RL rollouts (rl.h) and held-out evaluation (eval.h), so both
// score an answer the same way. Torch-free.
//
// An answer is decoded text. Its first fenced code block is the CUDA part
// (stage infill: the middle; e2e: a whole ModelNew program). Two modes:
//   judge:   compiles AND correct. The program (infill: the task's prefix +
//            code + suffix; e2e: the code) runs against the task's reference
//            program by KernelBench's protocol (runtime/program_judge.h
//            JudgeProgram: a child Python process, load_inline build, seeded
//            trials, allclose 1e-2). `judge_jobs` children at once.
//            A device-form task (kind "device", from a cache winner, with
//            its graph, input specs and launch plan) is judged in the
//            device form instead: the answer's source with the task's
//            launch plan goes through the runtime's Tuner and dice-worker
//            (NVRTC, ~50 ms a compile; random-input trials against the
//            reference executor; timed against PyTorch) — DeviceFormJudge.
//   compile: the code's device form (examples.h DeviceFormCandidate)
//            compiles with NVRTC for `arch` (runtime/compiler.h, ~50 ms);
//            correctness is not checked.
// Follows DICE (arXiv 2602.11715): binary reward, an optional speedup
// bonus (bonus * log2(speedup) for judged-correct answers) off by default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/runtime/program_judge.h"
#include "dice/core/status.h"
#include "dice/training/examples.h"

namespace dice::training {

/// The reward of one answer and why it earned nothing.
struct AnswerReward {
  double reward = 0;      ///< 1 (+ bonus) when it passes, else 0
  bool compiled = false;  ///< judge: the program imported/built; compile: NVRTC succeeded
  bool correct = false;   ///< judge only: every trial within tolerance (false in compile mode)
  double speedup = 0;     ///< judge only: reference ms / candidate ms when correct
  std::string why;        ///< cause of a zero reward ("" when it passed)
};

/// Verifies device-form answers on a GPU through the runtime's Tuner (one
/// dice-worker process kept across tasks, so a task costs its compiles and
/// trials, not a worker start). Candidates are never stored (no cache).
/// Thread-safe: Judge calls are serialised (one Tune at a time).
class DeviceFormJudge {
 public:
  /// `device` "cuda" or "cuda:N"; `candidate_timeout_s` bounds each
  /// candidate in the worker (a hang is a zero reward, the worker restarts).
  DeviceFormJudge(const std::string& device, double candidate_timeout_s);
  ~DeviceFormJudge();
  DeviceFormJudge(const DeviceFormJudge&) = delete;
  DeviceFormJudge& operator=(const DeviceFormJudge&) = delete;

  /// `codes[i]` is answer i's code block ("" = none: not judged). Result i:
  /// compiled/correct from the worker's outcome (verified, slower or winner
  /// = correct), speedup = PyTorch µs / candidate µs, why = outcome and
  /// error otherwise. Errors: kInvalidArgument when the task lacks graph,
  /// input_specs or launch_plan (a dataset written before they existed) or
  /// they do not parse; kNoDevice without a GPU; the Tuner's errors (worker
  /// cannot start, arch mismatch).
  Expected<std::vector<AnswerReward>> Judge(const CukeExample& task, const std::vector<std::string>& codes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct RewardOptions {
  std::string stage = "infill";  ///< "infill" | "e2e": how the judged program is put together
  bool judge = false;            ///< true: compiles AND correct (JudgeProgram); false: NVRTC compile only
  runtime::ProgramJudgeOptions judge_options;  ///< device, timeout, seed of the judge
  int64_t judge_jobs = 8;        ///< judged answers at once (each a child process)
  std::string arch = "sm_90";    ///< NVRTC target (compile mode)
  double speedup_bonus = 0.0;    ///< judge: added bonus * log2(speedup) when correct; 0 = off
  /// judge: verifies kind "device" tasks (required for them; not owned).
  DeviceFormJudge* device_judge = nullptr;
};

/// The RewardOptions of one RL or eval run on `device` ("cpu", "cuda",
/// "cuda:N"): `mode` "judge", or "auto" on a CUDA device, judges (the
/// KernelBench judge on `device`, `judge_jobs` at once, `judge_timeout_s`
/// each, seeded with `seed`; device tasks through a DeviceFormJudge created
/// into `*device_judge`, each candidate bounded by min(judge_timeout_s, 60)
/// s); otherwise the NVRTC compile for `arch`. `*device_judge` must outlive
/// the options (they point to it). No errors: `mode` is checked by the
/// callers' option checks.
RewardOptions MakeRewardOptions(const std::string& mode, const std::string& stage, const std::string& device,
                                int64_t judge_jobs, double judge_timeout_s, const std::string& arch,
                                double speedup_bonus, uint64_t seed, std::unique_ptr<DeviceFormJudge>* device_judge);

/// Scores `answers` (decoded texts) for `task`; result i belongs to answer i.
/// An answer with no code block, a compile error, a crash, a hang (past
/// judge_options.timeout_s) or a wrong output is a zero reward with its
/// cause in `why`, never an error. Errors: those of JudgeProgram that are
/// not about the answer (the judge script or interpreter cannot start);
/// kInvalidArgument for a judged device task without `device_judge`; those
/// of DeviceFormJudge::Judge.
Expected<std::vector<AnswerReward>> RewardAnswers(const CukeExample& task, const std::vector<std::string>& answers,
                                                  const RewardOptions& options);

/// Unbiased pass@k of one task from n samples of which c passed (Chen et
/// al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
/// 1 - C(n-c, k) / C(n, k), computed as a product to stay finite.
/// Errors: kInvalidArgument when k < 1, n < k, c < 0 or c > n.
Expected<double> PassAtK(int64_t n, int64_t c, int64_t k);

}  // namespace dice::training
