// Rewards of answers to one CuKe task: see dice/training/reward.h.
#include "dice/training/reward.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <utility>

#include "dice/generator/prompts.h"
#include "dice/runtime/compiler.h"

namespace dice::training {

Expected<std::vector<AnswerReward>> RewardAnswers(const CukeExample& task, const std::vector<std::string>& answers,
                                                  const RewardOptions& o) {
  const int64_t n = static_cast<int64_t>(answers.size());
  std::vector<AnswerReward> out(answers.size());
  std::vector<std::string> programs(answers.size());
  for (int64_t i = 0; i < n; ++i) {
    auto code = ExtractCodeBlock(answers[i]);
    if (!code.ok()) {
      out[i].why = code.status().message();
    } else if (o.judge) {
      programs[i] = o.stage == "infill" ? task.prefix + *code + task.suffix : *code;
    } else {
      auto cand = DeviceFormCandidate(*code, "reward:" + task.id + ":" + std::to_string(i));
      auto compiled = cand.ok() ? CompileCandidate(*cand, o.arch) : Expected<CompileResult>(cand.status());
      if (compiled.ok()) {
        out[i].compiled = true;
        out[i].reward = 1.0;
      } else {
        out[i].why = compiled.status().message();
      }
    }
  }
  const int64_t jobs = std::max<int64_t>(1, o.judge_jobs);
  for (int64_t first = 0; o.judge && first < n; first += jobs) {
    std::vector<std::pair<int64_t, std::future<Expected<ProgramVerdict>>>> running;
    for (int64_t i = first; i < std::min(n, first + jobs); ++i) {
      if (programs[i].empty()) continue;
      running.emplace_back(i, std::async(std::launch::async, [&, i] {
                             return JudgeProgram(task.reference, programs[i], o.judge_options);
                           }));
    }
    for (auto& [i, f] : running) {
      auto v = f.get();
      if (!v.ok()) return v.status().WithContext("judging answer " + std::to_string(i) + " of " + task.id);
      out[i].compiled = v->compiled;
      out[i].correct = v->correct;
      if (v->correct) {
        out[i].speedup = v->speedup;
        out[i].reward = 1.0 + (o.speedup_bonus > 0 && v->speedup > 0 ? o.speedup_bonus * std::log2(v->speedup) : 0.0);
      } else {
        out[i].why = v->outcome + ": " + v->error;
      }
    }
  }
  return out;
}

Expected<double> PassAtK(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || n < k || c < 0 || c > n) {
    return Status(StatusCode::kInvalidArgument, "pass@k needs 1 <= k <= n and 0 <= c <= n, got n=" +
                                                    std::to_string(n) + " c=" + std::to_string(c) +
                                                    " k=" + std::to_string(k));
  }
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
  double fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - fail;
}

}  // namespace dice::training
