// dice::torch_ext::optimize and the profiling/tuning helpers (optimize.h).
#include "dice/torch_ext/optimize.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include <cstdio>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "dice/torch_ext/fusion_pass.h"

namespace dice::torch_ext {

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kOff: return "off";
    case Mode::kObserve: return "observe";
    case Mode::kCache: return "cache";
    case Mode::kTune: return "tune";
    case Mode::kTuneSync: return "tune-sync";
  }
  return "off";
}

Expected<Mode> ParseMode(std::string_view text) {
  if (text.empty() || text == "off" || text == "0") return Mode::kOff;
  if (text == "observe") return Mode::kObserve;
  if (text == "cache") return Mode::kCache;
  if (text == "tune") return Mode::kTune;
  if (text == "tune-sync" || text == "tune_sync") return Mode::kTuneSync;
  return Status(StatusCode::kInvalidArgument,
                "unknown DICE mode '" + std::string(text) + "' (expected off|observe|cache|tune|tune-sync)");
}

Expected<Options> Options::FromEnv() {
  Options o;
  const char* mode = std::getenv("DICE_MODE");
  auto m = ParseMode(mode ? mode : "");
  if (!m.ok()) return m.status().WithContext("DICE_MODE");
  o.mode = *m;
  if (const char* dir = std::getenv("DICE_CACHE_DIR")) o.cache_dir = dir;
  return o;
}

void EnsureRegistered() {
  // The operator and the pass are static registrations in this library; a
  // call into it is what keeps the library (and so them) loaded.
  static const c10::Symbol sym = FusionGroupSymbol();
  (void)sym;
}

Expected<OptimizeReport> optimize(torch::jit::Module& module, const Options& options) {
  EnsureRegistered();
  OptimizeReport report;
  try {
    if (!module.find_method("forward"))
      return Status(StatusCode::kInvalidArgument, "module has no forward method");
    if (options.freeze) {
      module.eval();
      module = torch::jit::freeze_module(module);
    }
    auto graph = module.get_method("forward").graph();
    torch::jit::Inline(*graph);
    if (!options.example_inputs.empty()) {
      std::vector<c10::IValue> inputs;
      inputs.push_back(module._ivalue());
      inputs.insert(inputs.end(), options.example_inputs.begin(), options.example_inputs.end());
      DICE_RETURN_IF_ERROR(ObserveTypes(graph, inputs));
    }
    // Mode off: report what would fuse, leave the module's graph untouched.
    auto target = options.mode == Mode::kOff ? graph->copy() : graph;
    FusionPassResult res = FuseDiceGroups(target, options.min_nontrivial_ops);
    for (int id : res.group_ids) {
      auto g = GetRegisteredGroup(id);
      if (!g.ok()) return g.status();
      report.groups.push_back({id, std::move(g).value()});
    }
    report.left_out = std::move(res.left_out);
    report.graph = target->toString();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("TorchScript pass failed: ") + e.what());
  }
  SetRuntimeOptions(options);
  return report;
}

std::string FormatProfile(const std::vector<GroupStats>& stats) {
  std::vector<GroupStats> s = stats;
  std::sort(s.begin(), s.end(), [](const GroupStats& a, const GroupStats& b) {
    if (a.total_us != b.total_us) return a.total_us > b.total_us;
    return a.calls > b.calls;
  });
  std::ostringstream os;
  // LibTorch bundles its own fmt, so torch TUs format with snprintf.
  char line[512];
  std::snprintf(line, sizeof(line), "%4s  %-28s %-36s %8s %8s %9s %12s %10s  %s\n", "id", "group", "inputs", "calls",
                "hits", "fallback", "total_us", "mean_us", "top fallback reason");
  os << line;
  for (const auto& g : s) {
    std::string inputs;
    for (size_t i = 0; i < g.input_specs.size(); ++i) inputs += (i ? "," : "") + g.input_specs[i];
    double mean = g.timed_calls > 0 ? g.total_us / static_cast<double>(g.timed_calls) : 0.0;
    std::string reason = g.fallback_reasons.empty() ? "" : g.fallback_reasons.front().first;
    std::snprintf(line, sizeof(line), "%4d  %-28s %-36s %8lld %8lld %9lld %12.1f %10.2f  %s\n", g.id,
                  g.summary.c_str(), inputs.c_str(), static_cast<long long>(g.calls), static_cast<long long>(g.hits),
                  static_cast<long long>(g.fallbacks), g.total_us, mean, reason.c_str());
    os << line;
  }
  return os.str();
}

Expected<std::vector<TuneReport>> TuneGroups(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                                             const Options& options) {
  EnsureRegistered();
  // Run once in observe mode with capture on: every group records its inputs.
  Options run_opts = options;
  run_opts.mode = Mode::kObserve;
  SetRuntimeOptions(run_opts);
  SetCaptureInputs(true);
  try {
    module.forward(inputs);
  } catch (const std::exception& e) {
    SetCaptureInputs(false);
    SetRuntimeOptions(options);
    return Status(StatusCode::kInvalidArgument, std::string("running the module failed: ") + e.what());
  }
  SetCaptureInputs(false);
  std::vector<CapturedCall> calls = TakeCapturedCalls();

  std::vector<TuneReport> reports;
  std::set<std::string> seen;
  for (const auto& call : calls) {
    std::string sig = ir::Canonical(call.graph);
    for (const auto& s : call.inputs) sig += ";" + s.ToString();
    if (!seen.insert(sig).second) continue;
    auto rep = TuneCapturedCall(call, options);
    if (!rep.ok()) {
      if (rep.status().code() == StatusCode::kNoDevice || rep.status().code() == StatusCode::kIoError ||
          rep.status().code() == StatusCode::kCorrupt) {
        SetRuntimeOptions(options);
        return rep.status();
      }
      TuneReport failed;
      failed.description = "group " + std::to_string(call.group_id) + ": " + rep.status().ToString();
      reports.push_back(std::move(failed));
      continue;
    }
    reports.push_back(std::move(rep).value());
  }
  SetRuntimeOptions(options);
  return reports;
}

}  // namespace dice::torch_ext
