// `dice train eval` (pass@k on held-out tasks): see dice/training/eval.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/eval.h"

#include <algorithm>
#include <memory>
#include <chrono>
#include <future>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dice/generator/decode_session.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/training/eval_report.h"
#include "dice/training/examples.h"
#include "dice/training/reward.h"
#include "trainer_common.h"

namespace dice::training {
namespace {

Status Bad(const std::string& m) { return Status(StatusCode::kInvalidArgument, "dice train eval: " + m); }

Status CheckOptions(const EvalOptions& o) {
  if (o.model_dir.empty()) return Bad("--model is required");
  if (o.tasks_path.empty()) return Bad("--tasks is required");
  if (o.stage != "infill" && o.stage != "e2e") return Bad("--stage must be infill or e2e, got '" + o.stage + "'");
  if (o.split != "heldout" && o.split != "validation" && o.split != "train" && o.split != "all") {
    return Bad("--split must be heldout, validation, train or all, got '" + o.split + "'");
  }
  if (o.reward != "auto" && o.reward != "judge" && o.reward != "compile") {
    return Bad("--reward must be auto, judge or compile, got '" + o.reward + "'");
  }
  if (o.samples < 1) return Bad("--samples must be >= 1");
  if (o.ks.empty()) return Bad("-k needs at least one value");
  for (int64_t k : o.ks) {
    if (k < 1 || k > o.samples) {
      return Bad("-k " + std::to_string(k) + " must be in 1..n (-n/--samples " + std::to_string(o.samples) + ")");
    }
  }
  if (o.max_tasks < 0) return Bad("--max-tasks must be >= 0");
  if (o.max_new_tokens < 1) return Bad("--max-new-tokens must be >= 1");
  if (o.denoising_steps < 1) return Bad("--denoising-steps must be >= 1");
  if (!(o.temperature >= 0)) return Bad("--temperature must be >= 0");
  if (o.judge_jobs < 1) return Bad("--judge-jobs must be >= 1");
  if (!(o.judge_timeout_s > 0)) return Bad("--judge-timeout must be > 0");
  if (o.bootstrap_resamples < 1) return Bad("--bootstrap-resamples must be >= 1");
  return Status::Ok();
}

nlohmann::json ToJson(const EvalOptions& o, const EvalReport& r) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& t : r.tasks) {
    tasks.push_back({{"id", t.id}, {"level", t.level}, {"samples", t.samples}, {"passed", t.passed},
                     {"compiled", t.compiled}, {"pass_at_k", t.pass_at_k}, {"first_failure", t.first_failure}});
  }
  nlohmann::json ci = nlohmann::json::array();
  for (size_t j = 0; j < r.ks.size() && j < r.pass_at_k_ci.size(); ++j) {
    ci.push_back({{"k", r.ks[j]}, {"mean", r.pass_at_k_ci[j].estimate}, {"lo", r.pass_at_k_ci[j].lo},
                  {"hi", r.pass_at_k_ci[j].hi}});
  }
  const nlohmann::json bootstrap = {{"method", "percentile bootstrap over tasks"},
                                    {"resamples", r.bootstrap.resamples},
                                    {"confidence", r.bootstrap.confidence},
                                    {"seed", r.bootstrap.seed}};
  return {{"model", o.model_dir}, {"tasks_file", o.tasks_path}, {"stage", o.stage}, {"split", o.split},
          {"metric", r.metric}, {"samples", o.samples}, {"k", r.ks}, {"pass_at_k", r.pass_at_k},
          {"pass_at_k_ci", ci}, {"bootstrap", bootstrap},
          {"temperature", o.temperature}, {"seed", o.seed}, {"max_new_tokens", o.max_new_tokens},
          {"decoded_tokens", r.decoded_tokens}, {"decode_s", r.decode_s}, {"tokens_per_s", r.tokens_per_s},
          {"seconds", r.seconds}, {"tasks", tasks}};
}

}  // namespace

Expected<EvalReport> RunEval(const EvalOptions& o, const std::function<void(const std::string&)>& log_fn) {
  auto log = [&](const std::string& line) {
    if (log_fn) log_fn(line);
  };
  DICE_RETURN_IF_ERROR(CheckOptions(o));
  const auto t0 = std::chrono::steady_clock::now();
  auto device = ParseTrainDevice(o.device);
  if (!device.ok()) return device.status();
  auto tokenizer = generator::Tokenizer::Load(o.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  generator::SdarModelOptions mo;
  mo.device = *device;
  auto model = generator::SdarModel::Load(o.model_dir, mo);
  if (!model.ok()) return model.status();
  auto eos = EndOfTurnId(*tokenizer, model->config());
  if (!eos.ok()) return eos.status();
  auto loaded_templates = LoadTemplatesOrDefault(o.templates_path);
  if (!loaded_templates.ok()) return loaded_templates.status();
  const generator::PromptTemplates& templates = *loaded_templates;
  auto read = ReadStageTasks(o.tasks_path, o.stage, o.split, o.max_tasks, "dice train eval",
                             [&](const std::string& s) { log("eval: skipped malformed line: " + s); });
  if (!read.ok()) return read.status();
  const std::vector<CukeExample> tasks = std::move(*read);

  std::unique_ptr<DeviceFormJudge> device_judge;  // kind "device" tasks: Tuner + dice-worker
  RewardOptions ro = MakeRewardOptions(o.reward, o.stage, device->str(), o.judge_jobs, o.judge_timeout_s, o.arch,
                                       /*speedup_bonus=*/0.0, o.seed, &device_judge);
  EvalReport report;
  report.ks = o.ks;
  report.metric = ro.judge ? "compiles AND correct (KernelBench protocol on " + device->str() + ")"
                           : "compiles (NVRTC " + o.arch + "; correctness not checked)";
  report.pass_at_k.assign(o.ks.size(), 0.0);
  log("eval: " + std::to_string(tasks.size()) + " tasks (split " + o.split + ", stage " + o.stage + "), " +
      std::to_string(o.samples) + " samples each, metric: " + report.metric);

  // Decode every task first, then score: judged answers are child
  // processes, so several tasks' answers are judged at once (judge_jobs in
  // all), while the model holds the GPU only during decoding.
  std::vector<std::vector<std::string>> answers(tasks.size());
  // CUDA: the step graphs captured for the first task are replayed for the
  // others (one capture per batch size, not per task; decode_session.h).
  std::unique_ptr<generator::DecodeSession> session;
  if (device->is_cuda()) session = std::make_unique<generator::DecodeSession>(*model);
  try {
    for (size_t ti = 0; ti < tasks.size(); ++ti) {
      const CukeExample& task = tasks[ti];
      auto pa = ExamplePromptAndAnswer(task, templates);
      if (!pa.ok()) return pa.status();
      const generator::DecodeOptions d =
          RolloutDecodeOptions(o.max_new_tokens, o.denoising_steps, o.confidence_threshold, o.temperature, o.samples,
                               o.seed * 1000003ULL + ti, AnswerStopIds(*tokenizer, *eos), device->is_cuda());
      auto decoded = generator::Decode(*model, tokenizer->Encode(pa->prompt), d, session.get());
      if (!decoded.ok()) return decoded.status().WithContext("decoding " + task.id);
      report.decode_s += decoded->seconds;
      for (const auto& toks : decoded->tokens) {
        report.decoded_tokens += static_cast<int64_t>(toks.size());
        answers[ti].push_back(tokenizer->Decode(toks));
      }
    }
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("dice train eval: LibTorch: ") + e.what_without_backtrace());
  }
  session.reset();  // its graphs and cache back to the allocator before the judges run
  log("eval: decoded " + std::to_string(report.decoded_tokens) + " tokens; scoring");
  const int64_t per_task_jobs = std::min(o.samples, o.judge_jobs);
  const size_t tasks_at_once = ro.judge ? static_cast<size_t>(std::max<int64_t>(1, o.judge_jobs / per_task_jobs)) : 1;
  ro.judge_jobs = per_task_jobs;
  for (size_t first = 0; first < tasks.size(); first += tasks_at_once) {
    std::vector<std::future<Expected<std::vector<AnswerReward>>>> running;
    const size_t last = std::min(tasks.size(), first + tasks_at_once);
    for (size_t ti = first; ti < last; ++ti) {
      running.push_back(std::async(std::launch::async, [&, ti] { return RewardAnswers(tasks[ti], answers[ti], ro); }));
    }
    for (size_t ti = first; ti < last; ++ti) {
      auto scored = running[ti - first].get();
      if (!scored.ok()) return scored.status();
      EvalTaskResult tr;
      tr.id = tasks[ti].id;
      tr.level = tasks[ti].level;
      tr.samples = o.samples;
      for (const auto& sc : *scored) {
        if (sc.reward > 0) ++tr.passed;
        if (sc.compiled) ++tr.compiled;
        if (sc.reward <= 0 && tr.first_failure.empty()) tr.first_failure = sc.why.substr(0, 300);
      }
      for (size_t j = 0; j < o.ks.size(); ++j) {
        auto p = PassAtK(tr.samples, tr.passed, o.ks[j]);
        if (!p.ok()) return p.status();
        tr.pass_at_k.push_back(*p);
        report.pass_at_k[j] += *p / static_cast<double>(tasks.size());
      }
      log("eval: task " + std::to_string(ti + 1) + "/" + std::to_string(tasks.size()) + " " + tr.id + ": " +
          std::to_string(tr.passed) + "/" + std::to_string(tr.samples) + " passed, " + std::to_string(tr.compiled) +
          " compiled" +
          (tr.first_failure.empty() ? "" : "; first failure: " + Printable(tr.first_failure, 160)));
      report.tasks.push_back(std::move(tr));
    }
  }
  report.tokens_per_s = report.decode_s > 0 ? static_cast<double>(report.decoded_tokens) / report.decode_s : 0.0;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every mean pass@k with its 95% bootstrap interval over tasks (stats.h).
  report.bootstrap = BootstrapOptions{o.bootstrap_resamples, 0.95, o.seed};
  auto ci = PassAtKIntervals(report, report.bootstrap);
  if (!ci.ok()) return ci.status();
  report.pass_at_k_ci = std::move(*ci);
  const std::string summary = "eval: " + std::to_string(report.tasks.size()) + " tasks" + FormatPassAtK(report);
  char tail[96];
  std::snprintf(tail, sizeof(tail), "; decode %.1f tokens/s; %.1f s", report.tokens_per_s, report.seconds);
  log(summary + " (" + report.metric + ")" + tail);
  if (!o.out_json.empty()) {
    std::ofstream out(o.out_json, std::ios::trunc);
    out << ToJson(o, report).dump(2) << "\n";
    if (!out) return Status(StatusCode::kIoError, "dice train eval: cannot write --json " + o.out_json);
  }
  return report;
}

}  // namespace dice::training
