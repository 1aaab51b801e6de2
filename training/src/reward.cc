// Rewards of answers to one CuKe task: see dice/training/reward.h.
#include "dice/training/reward.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <future>
#include <utility>

#include <map>
#include <mutex>

#include "dice/generator/fixed_generator.h"
#include "dice/generator/prompts.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"

namespace dice::training {

struct DeviceFormJudge::Impl {
  int ordinal = 0;
  double candidate_timeout_s = 20;
  std::mutex mu;
  std::shared_ptr<generator::FixedGenerator> generator = std::make_shared<generator::FixedGenerator>(std::vector<Candidate>{}, "answers");
  std::unique_ptr<runtime::Tuner> tuner;  // created at the first Judge (its worker starts then)
};

DeviceFormJudge::DeviceFormJudge(const std::string& device, double candidate_timeout_s)
    : impl_(std::make_unique<Impl>()) {
  const size_t colon = device.find(':');
  impl_->ordinal = colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
  impl_->candidate_timeout_s = candidate_timeout_s;
}

DeviceFormJudge::~DeviceFormJudge() = default;

Expected<std::vector<AnswerReward>> DeviceFormJudge::Judge(const CukeExample& task,
                                                           const std::vector<std::string>& codes) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "device-form judge: task " + task.id + ": " + why);
  };
  if (task.graph.empty() || task.input_specs.empty() || task.launch_plan.empty()) {
    return bad("no graph/input_specs/launch_plan (rebuild the dataset with this version of dice train dataset)");
  }
  auto graph = ir::Parse(task.graph);
  if (!graph.ok()) return bad("graph: " + graph.status().message());
  auto specs = ParseInputSpecs(task.input_specs);
  if (!specs.ok()) return bad(specs.status().message());
  auto plan = LaunchPlan::FromJson(task.launch_plan);
  if (!plan.ok()) return bad("launch_plan: " + plan.status().message());
  auto device = runtime::QueryDevice(impl_->ordinal);
  if (!device.ok()) return device.status().WithContext("device-form judge");
  auto t = Task::Make(*graph, *specs, runtime::TargetForDevice(impl_->ordinal));
  if (!t.ok()) return bad(t.status().message());

  std::vector<AnswerReward> out(codes.size());
  std::vector<Candidate> candidates;
  std::vector<std::string> hashes(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i].empty()) continue;
    Candidate c;
    c.origin = "answer:" + std::to_string(i);
    c.form = CandidateForm::kDevice;
    c.source = codes[i];
    c.plan = *plan;
    hashes[i] = c.Hash();
    candidates.push_back(std::move(c));
  }
  if (candidates.empty()) return out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->tuner) {
    runtime::TuneOptions o;
    o.max_candidates = 1 << 20;
    o.budget_s = 1e9;  // every answer is judged; each is bounded by candidate_timeout_s
    o.candidate_timeout_s = impl_->candidate_timeout_s;
    o.device = impl_->ordinal;
    impl_->tuner = std::make_unique<runtime::Tuner>(nullptr, std::vector<std::shared_ptr<KernelGenerator>>{impl_->generator}, o);
  }
  impl_->generator->SetCandidates(std::move(candidates));
  auto report = impl_->tuner->Tune(*t);
  if (!report.ok()) return report.status().WithContext("device-form judge: task " + task.id);
  std::map<std::string, const runtime::CandidateOutcome*> by_hash;  // the same code twice is tuned once
  for (const auto& o : report->outcomes) by_hash.emplace(o.hash, &o);
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i].empty()) continue;
    auto it = by_hash.find(hashes[i]);
    if (it == by_hash.end()) {
      out[i].why = "not judged (no outcome from the tuner)";
      continue;
    }
    const runtime::CandidateOutcome& o = *it->second;
    out[i].compiled = o.outcome != runtime::Outcome::kCompileError && o.outcome != runtime::Outcome::kParseError &&
                      o.outcome != runtime::Outcome::kSkipped;
    out[i].correct = runtime::IsVerified(o.outcome);
    if (out[i].correct) {
      out[i].speedup = o.time_us > 0 ? report->baseline_us / o.time_us : 0.0;
    } else {
      out[i].why = std::string(runtime::OutcomeName(o.outcome)) + (o.error.empty() ? "" : ": " + o.error);
    }
  }
  return out;
}

namespace {

// DICE's binary reward, plus bonus * log2(speedup) for a correct answer when
// the bonus is on.
double CorrectReward(double speedup, double bonus) {
  return 1.0 + (bonus > 0 && speedup > 0 ? bonus * std::log2(speedup) : 0.0);
}

}  // namespace

RewardOptions MakeRewardOptions(const std::string& mode, const std::string& stage, const std::string& device,
                                int64_t judge_jobs, double judge_timeout_s, const std::string& arch,
                                double speedup_bonus, uint64_t seed, std::unique_ptr<DeviceFormJudge>* device_judge) {
  RewardOptions o;
  o.stage = stage;
  o.judge = mode == "judge" || (mode == "auto" && device.rfind("cuda", 0) == 0);
  o.judge_jobs = judge_jobs;
  o.arch = arch;
  o.speedup_bonus = speedup_bonus;
  o.judge_options.device = device;
  o.judge_options.timeout_s = judge_timeout_s;
  o.judge_options.seed = static_cast<long long>(seed);
  if (o.judge) {
    *device_judge = std::make_unique<DeviceFormJudge>(device, std::min(judge_timeout_s, 60.0));
    o.device_judge = device_judge->get();
  }
  return o;
}

Expected<std::vector<AnswerReward>> RewardAnswers(const CukeExample& task, const std::vector<std::string>& answers,
                                                  const RewardOptions& o) {
  const int64_t n = static_cast<int64_t>(answers.size());
  std::vector<AnswerReward> out(answers.size());
  std::vector<std::string> codes(answers.size());  // "" = no code block (its reason is in `why`)
  for (int64_t i = 0; i < n; ++i) {
    auto code = generator::ExtractCodeBlock(answers[i]);
    if (!code.ok()) {
      out[i].why = code.status().message();
    } else if (code->empty()) {
      out[i].why = "the code block is empty";
    } else {
      codes[i] = *code;
    }
  }
  if (!o.judge) {
    for (int64_t i = 0; i < n; ++i) {
      if (codes[i].empty()) continue;
      auto cand = DeviceFormCandidate(AnswerSource(task, codes[i]), "reward:" + task.id + ":" + std::to_string(i));
      auto compiled = cand.ok() ? runtime::CompileCandidate(*cand, o.arch) : Expected<runtime::CompileResult>(cand.status());
      if (compiled.ok()) {
        out[i].compiled = true;
        out[i].reward = 1.0;
      } else {
        out[i].why = compiled.status().message();
      }
    }
    return out;
  }
  if (IsDeviceKind(task.kind)) {
    if (o.device_judge == nullptr) {
      return Status(StatusCode::kInvalidArgument, "RewardAnswers: judged device task " + task.id +
                                                      " needs RewardOptions::device_judge");
    }
    std::vector<std::string> sources(codes.size());  // an empty code stays empty: not judged
    for (size_t i = 0; i < codes.size(); ++i) sources[i] = codes[i].empty() ? "" : AnswerSource(task, codes[i]);
    auto judged = o.device_judge->Judge(task, sources);
    if (!judged.ok()) return judged.status();
    for (int64_t i = 0; i < n; ++i) {
      if (codes[i].empty()) continue;
      out[i] = (*judged)[i];
      if (out[i].correct) out[i].reward = CorrectReward(out[i].speedup, o.speedup_bonus);
    }
    return out;
  }
  // Each judged program is a child process (a load_inline build): judge_jobs at once.
  const int64_t jobs = std::max<int64_t>(1, o.judge_jobs);
  for (int64_t first = 0; first < n; first += jobs) {
    std::vector<std::pair<int64_t, std::future<Expected<runtime::ProgramVerdict>>>> running;
    for (int64_t i = first; i < std::min(n, first + jobs); ++i) {
      if (codes[i].empty()) continue;
      running.emplace_back(i, std::async(std::launch::async, [&, i] {
                             const std::string program =
                                 o.stage == "infill" ? task.prefix + codes[i] + task.suffix : codes[i];
                             return runtime::JudgeProgram(task.reference, program, o.judge_options);
                           }));
    }
    for (auto& [i, f] : running) {
      auto v = f.get();
      if (!v.ok()) return v.status().WithContext("judging answer " + std::to_string(i) + " of " + task.id);
      out[i].compiled = v->compiled;
      out[i].correct = v->correct;
      if (v->correct) {
        out[i].speedup = v->speedup;
        out[i].reward = CorrectReward(v->speedup, o.speedup_bonus);
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
