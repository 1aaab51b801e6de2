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
//   compile: the code's device form (examples.h DeviceFormCandidate)
//            compiles with NVRTC for `arch` (runtime/compiler.h, ~50 ms);
//            correctness is not checked.
// Follows DICE (arXiv 2602.11715): binary reward, an optional speedup
// bonus (bonus * log2(speedup) for judged-correct answers) off by default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/runtime/program_judge.h"
#include "dice/runtime/status.h"
#include "dice/training/examples.h"

namespace dice::training {

struct RewardOptions {
  std::string stage = "infill";  ///< "infill" | "e2e": how the judged program is put together
  bool judge = false;            ///< true: compiles AND correct (JudgeProgram); false: NVRTC compile only
  ProgramJudgeOptions judge_options;  ///< device, timeout, seed of the judge
  int64_t judge_jobs = 8;        ///< judged answers at once (each a child process)
  std::string arch = "sm_90";    ///< NVRTC target (compile mode)
  double speedup_bonus = 0.0;    ///< judge: added bonus * log2(speedup) when correct; 0 = off
};

/// The reward of one answer and why it earned nothing.
struct AnswerReward {
  double reward = 0;      ///< 1 (+ bonus) when it passes, else 0
  bool compiled = false;  ///< judge: the program imported/built; compile: NVRTC succeeded
  bool correct = false;   ///< judge only: every trial within tolerance (false in compile mode)
  double speedup = 0;     ///< judge only: reference ms / candidate ms when correct
  std::string why;        ///< cause of a zero reward ("" when it passed)
};

/// Scores `answers` (decoded texts) for `task`; result i belongs to answer i.
/// An answer with no code block, a compile error, a crash, a hang (past
/// judge_options.timeout_s) or a wrong output is a zero reward with its
/// cause in `why`, never an error. Errors: those of JudgeProgram that are
/// not about the answer (the judge script or interpreter cannot start).
Expected<std::vector<AnswerReward>> RewardAnswers(const CukeExample& task, const std::vector<std::string>& answers,
                                                  const RewardOptions& options);

/// Unbiased pass@k of one task from n samples of which c passed (Chen et
/// al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
/// 1 - C(n-c, k) / C(n, k), computed as a product to stay finite.
/// Errors: kInvalidArgument when k < 1, n < k, c < 0 or c > n.
Expected<double> PassAtK(int64_t n, int64_t c, int64_t k);

}  // namespace dice::training
