// dice/training/injection.h — when BiC-RL puts a task's known-good answer
// into its rollout groups (rl.h step 2, --inject-known-good), issue 21's
// "known-good injection only until the policy earns reward by itself".
// Torch-free.
//
// Injection gives a group of a model that cannot yet solve a task one
// rewarded rollout, so the group carries an advantage. Once the policy's
// own (decoded, not injected) rollouts earn reward on a task, the injected
// answer only pulls the policy toward one fixed answer (and the reported
// reward would mix injected and own samples), so it stops:
//   kAlways           every group of a task with a known-good answer, every
//                     step (the behaviour before issue 21);
//   kUntilTaskEarned  a task's groups get the answer until the policy's own
//                     rollouts have earned reward on that task `threshold`
//                     times in all, then never again for that task
//                     (the default: docs/DECISIONS.md);
//   kUntilAnyEarned   every task's groups get it until the policy's own
//                     rollouts have earned reward `threshold` times in all,
//                     over every task, then injection stops everywhere.
// Data parallel: every rank feeds Report with the step's totals over ranks,
// so all ranks decide alike. The state is not saved in a checkpoint: a run
// resumed with --resume injects again until the policy earns reward again.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dice/core/status.h"

namespace dice::training {

class InjectionSchedule {
 public:
  enum class Mode { kAlways, kUntilTaskEarned, kUntilAnyEarned };

  /// "always" | "task-earned" | "any-earned" (the --inject-until values).
  /// Errors: kInvalidArgument naming the flag and the value.
  static Expected<Mode> ParseMode(const std::string& name);
  static const char* ModeName(Mode mode);

  /// REQUIRES: threshold >= 1 (rewarded own rollouts that end injection).
  explicit InjectionSchedule(Mode mode = Mode::kUntilTaskEarned, int64_t threshold = 1);

  /// Whether the next group of task `task_id` gets its known-good answer.
  bool ShouldInject(const std::string& task_id) const;

  /// Books `own_rewarded` rewarded decoded (not injected) rollouts of one
  /// group of task `task_id`.
  void Report(const std::string& task_id, int64_t own_rewarded);

  /// Tasks on which the policy has reached the threshold by itself.
  int64_t tasks_earned() const;
  Mode mode() const { return mode_; }

 private:
  Mode mode_;
  int64_t threshold_;
  int64_t total_ = 0;                       // rewarded own rollouts over every task
  std::map<std::string, int64_t> earned_;   // rewarded own rollouts by task id
};

}  // namespace dice::training
