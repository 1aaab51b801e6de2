// dice::torch_ext::optimize, the process-wide options and the tuning
// helpers (optimize.h). The state behind them lives in torch-free modules
// (runtime_state.h, tune_queue.h); this file converts Options to their terms.
#include "dice/torch_ext/optimize.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/version.h>

#include "dice/core/log.h"
#include "dice/core/task.h"
#include "dice/core/tensor_layout.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/torch_ext/fusion_pass.h"
#include "attention_pass.h"
#include "conv_algo_pass.h"
#include "graph_pass_util.h"
#include "fusible_rewrites.h"
#include "conv_bias_pass.h"
#include "memory_format_pass.h"
#include "runtime_state.h"
#include "tune_queue.h"

namespace dice::torch_ext {

namespace {

RuntimeSettings ToSettings(const Options& o) {
  RuntimeSettings s;
  s.mode = o.mode;
  s.cache_dir = o.cache_dir;
  s.tune = o.tune;
  s.freeze = o.freeze;
  s.min_nontrivial_ops = o.min_nontrivial_ops;
  return s;
}

// torch.jit.freeze as a fallible step: PyTorch's own freezing passes can
// assert on models they do not handle (seen: frozen_conv_folding.cpp on a
// Conv2d -> subtract -> Mish model). Errors: kInternal naming the pass and
// PyTorch's first message line; the module is left as it was.
Expected<torch::jit::Module> FreezeOrExplain(const torch::jit::Module& module) {
  const char* inject = std::getenv("DICE_INJECT_CAPTURE_FAILURE");
  try {
    if (inject != nullptr && std::string(inject) == "freeze")
      throw std::runtime_error("injected failure (DICE_INJECT_CAPTURE_FAILURE=freeze)");
    return torch::jit::freeze_module(module);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    return Status(StatusCode::kInternal, "torch.jit.freeze failed: " + what);
  }
}

// torch.jit.freeze's frozen-graph optimizations, which Python's
// torch.jit.freeze runs after freezing and the C++ freeze_module does not
// (torch/csrc/jit/passes/frozen_graph_optimizations.h): a batch_norm, or a
// constant add/sub/mul/div, folded into the conv or linear before it.
// Runs on a clone (its own graph); on success `frozen` becomes it. Errors:
// kInternal naming the pass and PyTorch's first message line (seen: its
// conv folding asserting on a Conv2d -> subtract -> Mish model); `frozen`
// is left as freezing made it.
Status FoldFrozenOrExplain(torch::jit::Module& frozen) {
  const char* inject = std::getenv("DICE_INJECT_CAPTURE_FAILURE");
  torch::jit::Module folded = frozen.clone();
  try {
    if (inject != nullptr && std::string(inject) == "frozen_folding")
      throw std::runtime_error("injected failure (DICE_INJECT_CAPTURE_FAILURE=frozen_folding)");
    auto graph = folded.get_method("forward").graph();
    torch::jit::OptimizeFrozenGraph(graph, /*optimize_numerics=*/true);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return Status(StatusCode::kInternal,
                  "torch.jit.freeze's conv/linear folding (OptimizeFrozenGraph) failed: " + what.substr(0, what.find('\n')));
  }
  frozen = std::move(folded);
  return Status::Ok();
}

// Throws when DICE_INJECT_CAPTURE_FAILURE names `pass` ("inline",
// "functional", "observe", "batch_norm", "memory_format", "attention", "global_pool", "conv_bias",
// "conv_algorithm", "fusion"): tests of
// the capture fallback.
void InjectCaptureFailure(const char* pass) {
  const char* inject = std::getenv("DICE_INJECT_CAPTURE_FAILURE");
  if (inject != nullptr && std::string(inject) == pass)
    throw std::runtime_error(std::string("injected failure (DICE_INJECT_CAPTURE_FAILURE=") + pass + ")");
}

// options.memory_format, or DICE_MEMORY_FORMAT when that is kAuto (an
// unknown value: a warning in `report`, read as auto).
MemoryFormat RequestedMemoryFormat(const Options& options, OptimizeReport* report) {
  if (options.memory_format != MemoryFormat::kAuto) return options.memory_format;
  const char* env = std::getenv("DICE_MEMORY_FORMAT");
  if (env == nullptr || *env == '\0') return MemoryFormat::kAuto;
  auto parsed = ParseMemoryFormat(env);
  if (parsed.ok()) return *parsed;
  report->warnings.push_back("DICE_MEMORY_FORMAT: " + parsed.status().message() + "; read as auto");
  return MemoryFormat::kAuto;
}

// The memory-format pass (memory_format_pass.h) on the observed graph. A
// failure inside it leaves the graph unchanged (contiguous) with a warning
// naming the pass; the capture goes on. After a conversion the types are
// observed again (the fusion pass reads the new strides); a failure of that
// run throws (the caller's fallback restores the module).
void RunMemoryFormatPass(const std::shared_ptr<torch::jit::Graph>& graph, const Options& options,
                         const std::vector<c10::IValue>& inputs, OptimizeReport* report) {
  const MemoryFormat requested = RequestedMemoryFormat(options, report);
  Expected<MemoryFormatOutcome> outcome = MemoryFormatOutcome{};
  try {
    InjectCaptureFailure("memory_format");
    outcome = RunMemoryFormatStep(graph, requested, inputs);
  } catch (const std::exception& e) {
    std::string what = e.what();
    outcome = Status(StatusCode::kInternal, what.substr(0, what.find('\n')));
  }
  if (!outcome.ok()) {
    report->memory_format_reason = "the memory-format pass failed; left contiguous";
    report->warnings.push_back("capture pass 'memory_format' failed: " + outcome.status().message() +
                               "; the memory format is left unchanged (contiguous)");
    return;
  }
  report->memory_format = outcome->format;
  report->memory_format_reason = outcome->reason;
  report->memory_format_us = {outcome->contiguous_us, outcome->channels_last_us};
  if (outcome->format != "channels_last" || inputs.empty()) return;
  Status observed = ObserveTypes(graph, inputs);
  if (!observed.ok()) throw std::runtime_error("after channels_last: " + observed.message());
}

// The conv-algorithm decision (conv_algo_pass.h), made before the fusion
// pass on DICE_CONV_ALGORITHM's mode (auto when unset; an unknown value is a
// report warning and reads as auto). A failure leaves cuDNN's heuristics
// with a warning naming the pass; the capture goes on.
void RunConvAlgorithmPass(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs,
                          OptimizeReport* report) {
  ConvAlgorithm requested = ConvAlgorithm::kAuto;
  const char* env = std::getenv("DICE_CONV_ALGORITHM");
  if (env != nullptr && *env != '\0') {
    auto parsed = ParseConvAlgorithm(env);
    if (parsed.ok()) {
      requested = *parsed;
    } else {
      report->warnings.push_back("DICE_CONV_ALGORITHM: " + parsed.status().message() + "; read as auto");
    }
  }
  Expected<ConvAlgorithmOutcome> outcome = ConvAlgorithmOutcome{};
  try {
    InjectCaptureFailure("conv_algorithm");
    outcome = RunConvAlgorithmStep(graph, requested, inputs);
  } catch (const std::exception& e) {
    outcome = Status(StatusCode::kInternal, FirstLine(e));
  }
  if (!outcome.ok()) {
    report->conv_algorithm_reason = "the conv-algorithm pass failed; cuDNN's heuristics";
    report->warnings.push_back("capture pass 'conv_algorithm' failed: " + outcome.status().message() +
                               "; the convs are left as they are");
    return;
  }
  report->conv_algorithm = outcome->choice;
  report->conv_algorithm_reason = outcome->reason;
  report->conv_algorithm_us = {outcome->heuristic_us, outcome->benchmark_us};
  if (outcome->choice == "benchmark") AskCudnnToSearch(graph);  // the same convs as on the timed copy
}

// options.attention, or DICE_ATTENTION when that is kAuto (an unknown value
// is a report warning and reads as auto).
AttentionMode RequestedAttention(const Options& options, OptimizeReport* report) {
  if (options.attention != AttentionMode::kAuto) return options.attention;
  const char* env = std::getenv("DICE_ATTENTION");
  if (env == nullptr || *env == '\0') return AttentionMode::kAuto;
  auto parsed = ParseAttentionMode(env);
  if (parsed.ok()) return *parsed;
  report->warnings.push_back("DICE_ATTENTION: " + parsed.status().message() + "; read as auto");
  return AttentionMode::kAuto;
}

// The attention pass (attention_pass.h) on the observed graph. A failure
// inside it leaves the chains unfused with a warning naming the pass; the
// capture goes on.
void RunAttentionPass(const std::shared_ptr<torch::jit::Graph>& graph, const Options& options,
                      const std::vector<c10::IValue>& inputs, OptimizeReport* report) {
  const AttentionMode requested = RequestedAttention(options, report);
  Expected<AttentionOutcome> outcome = AttentionOutcome{};
  try {
    InjectCaptureFailure("attention");
    outcome = RunAttentionStep(graph, requested, inputs);
  } catch (const std::exception& e) {
    std::string what = e.what();
    outcome = Status(StatusCode::kInternal, what.substr(0, what.find('\n')));
  }
  if (!outcome.ok()) {
    report->attention_reason = "the attention pass failed; left unfused";
    report->warnings.push_back("capture pass 'attention' failed: " + outcome.status().message() +
                               "; attention is left as written");
    return;
  }
  report->attention = outcome->choice;
  report->attention_reason = outcome->reason;
  report->attention_us = {outcome->unfused_us, outcome->sdpa_us};
  report->attention_backend = SdpaBackendName(outcome->backend.backend);
  report->attention_backend_reason = outcome->backend.reason;
  report->attention_backends = outcome->backend.candidates;
  if (report->attention_backends.size() == 1) report->attention_backends.clear();  // only "dispatch": none measured
}

// The capture passes after freezing, on `module`'s forward graph: inlining,
// type observation on the example inputs, the memory-format pass, the fusion
// pass. `pass` names the one running (for the caller's warning when one
// throws). Errors: ObserveTypes' (the example run fails); a
// GetRegisteredGroup error.
Status RunCapturePasses(torch::jit::Module& module, const Options& options, OptimizeReport* report,
                        const char** pass) {
  auto graph = module.get_method("forward").graph();
  *pass = "inline";
  InjectCaptureFailure(*pass);
  torch::jit::Inline(*graph);
  *pass = "functional";
  InjectCaptureFailure(*pass);
  report->functional = MakeElementwiseFunctional(graph);
  // After the in-place ops are gone: alias analysis then sees no writer of a copy.
  *pass = "identity_copies";
  InjectCaptureFailure(*pass);
  report->identity_copies_removed = RemoveIdentityCopies(graph, /*remove_detach=*/report->frozen);
  std::vector<c10::IValue> inputs;  // self first, as the graph takes them; empty without example inputs
  if (!options.example_inputs.empty()) {
    *pass = "observe";
    InjectCaptureFailure(*pass);
    inputs.push_back(module._ivalue());
    inputs.insert(inputs.end(), options.example_inputs.begin(), options.example_inputs.end());
    DICE_RETURN_IF_ERROR(ObserveTypes(graph, inputs));
    // Needs the observed types (rank, channels, dtype of each batch_norm's input).
    *pass = "batch_norm";
    InjectCaptureFailure(*pass);
    report->batch_norms_folded = FoldInferenceBatchNorm(graph);
  }
  *pass = "memory_format";
  RunMemoryFormatPass(graph, options, inputs, report);
  *pass = "attention";
  RunAttentionPass(graph, options, inputs, report);
  // After the memory-format pass, which keeps the pool inside a region (its
  // exit copy then moves the pooled values, not the activation).
  *pass = "global_pool";
  InjectCaptureFailure(*pass);
  if (!inputs.empty()) report->global_pools_as_mean = GlobalPoolAsMean(graph);
  // Needs the observed types (whether the conv's reader is fusible).
  *pass = "conv_bias";
  InjectCaptureFailure(*pass);
  if (!inputs.empty()) MoveConvBiasIntoEpilogue(graph);
  // On the graph without groups (a conv group's capture reads _convolution as conv2d).
  *pass = "conv_algorithm";
  RunConvAlgorithmPass(graph, inputs, report);
  // Mode off: report what would fuse, leave the module's graph without groups.
  *pass = "fusion";
  InjectCaptureFailure(*pass);
  auto target = options.mode == Mode::kOff ? graph->copy() : graph;
  FusionPassResult res = FuseDiceGroups(target, options.min_nontrivial_ops);
  for (int id : res.group_ids) {
    auto g = GetRegisteredGroup(id);
    if (!g.ok()) return g.status();
    report->groups.push_back({id, std::move(g).value()});
  }
  report->left_out = std::move(res.left_out);
  report->graph = target->toString();
  return Status::Ok();
}

}  // namespace

Expected<Options> Options::FromEnv() {
  auto s = SettingsFromEnv();
  if (!s.ok()) return s.status();
  Options o;
  o.mode = s->mode;
  o.cache_dir = s->cache_dir;
  return o;
}

void SetRuntimeOptions(const Options& options) { SetRuntimeSettings(ToSettings(options)); }

void ApplyFrameworkPrecision(runtime::TuneOptions* options) {
  const at::Context& ctx = at::globalContext();
  // What ATen's kernels read. allowTF32CuDNN() without an op, and
  // allowTF32CuBLAS(), throw once the legacy allow_tf32 and the newer
  // fp32_precision settings were both used; these two forms do not.
  options->tf32_conv = ctx.allowTF32CuDNN(at::Float32Op::CONV);
  options->tf32_matmul =
      ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) == at::Float32Precision::TF32;
  options->torch_version = TORCH_VERSION;  // extension winners built against another are refused
}

Options GetRuntimeOptions() {
  RuntimeSettings s = GetRuntimeSettings();
  Options o;  // example_inputs: not kept past optimize()
  o.mode = s.mode;
  o.cache_dir = std::move(s.cache_dir);
  o.tune = std::move(s.tune);
  o.freeze = s.freeze;
  o.min_nontrivial_ops = s.min_nontrivial_ops;
  return o;
}

void SetGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators) {
  SetTunerGenerators(std::move(generators));
}

void SetCaptureInputs(bool enabled) { SetCapturingInputs(enabled); }

std::vector<CapturedCall> TakeCapturedCalls() { return TakeStoredCapturedCalls(); }

TargetInfo CurrentTarget(int ordinal) {
  static std::mutex mu;
  static std::map<int, TargetInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(ordinal);
  if (it != cache.end()) return it->second;
  TargetInfo t = runtime::TargetForDevice(ordinal);
  cache[ordinal] = t;
  return t;
}

Expected<runtime::TuneReport> TuneCapturedCall(const CapturedCall& call, const Options& options,
                                      const runtime::TuneProgressCallback& on_progress) {
  SetRuntimeOptions(options);
  // Tuned on the GPU the call's inputs were on (the worker is bound there).
  const int device = call.device >= 0 ? call.device : options.tune.device;
  // Outputs follow the inputs' layout as serving allocates them
  // (dice/core/tensor_layout.h): a channels_last group is tuned for channels_last outputs.
  auto task = MakeServedTask(call.graph, call.inputs, CurrentTarget(device));
  if (!task.ok()) return task.status();
  return TuneNow(*task, call.input_bytes.empty() ? nullptr : &call.input_bytes, on_progress, device);
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
      auto frozen = FreezeOrExplain(module);
      if (frozen.ok()) {
        module = std::move(frozen).value();
        report.frozen = true;
        Status folded = FoldFrozenOrExplain(module);
        if (!folded.ok()) report.warnings.push_back(folded.message() + "; captured frozen without that folding");
      } else {
        report.warnings.push_back(frozen.status().message() +
                                  "; the module is captured unfrozen (no constant folding)");
      }
    }
    // A capture pass that throws (PyTorch's or dice's) leaves the model as
    // PyTorch runs it: the module goes back to its state before the passes
    // (clone() shares the data, copies the graphs) and no group is reported.
    torch::jit::Module before_passes = module.clone();
    const char* pass = "inline";
    try {
      DICE_RETURN_IF_ERROR(RunCapturePasses(module, options, &report, &pass));
    } catch (const std::exception& e) {
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));
      module = std::move(before_passes);
      report.groups.clear();
      report.left_out.clear();
      report.graph.clear();
      report.memory_format = "contiguous";
      report.memory_format_us = {0, 0};
      report.memory_format_reason = "the capture passes failed; left contiguous";
      report.attention = "unfused";
      report.attention_us = {0, 0};
      report.attention_reason = "the capture passes failed; left unfused";
      report.conv_algorithm = "heuristic";
      report.conv_algorithm_us = {0, 0};
      report.conv_algorithm_reason = "the capture passes failed; cuDNN's heuristics";
      report.attention_backend = "dispatch";
      report.attention_backend_reason.clear();
      report.attention_backends.clear();
      report.warnings.push_back(std::string("capture pass '") + pass + "' failed: " + what +
                                "; the model is left unchanged (PyTorch runs all of it)");
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("TorchScript pass failed: ") + e.what());
  }
  SetRuntimeOptions(options);
  return report;
}

namespace {

// Every group's nvcc candidates built at once before the first tune
// (runtime/prebuild.h), so that each tune verifies and times instead of
// waiting on its own builds; a failure here leaves the tunes to build as
// before. One line on stderr at info when there is anything to build.
void PrebuildGroups(const std::vector<const CapturedCall*>& calls, const Options& options) {
  std::vector<std::pair<Task, int>> tasks;
  for (const CapturedCall* call : calls) {
    const int device = call->device >= 0 ? call->device : options.tune.device;
    auto task = MakeServedTask(call->graph, call->inputs, CurrentTarget(device));
    if (task.ok()) tasks.emplace_back(std::move(*task), device);
  }
  SetRuntimeOptions(options);
  auto r = PrebuildNow(tasks);
  if (r.ok() && r->distinct > 0 && LogEnabled(LogLevel::kInfo)) {
    std::fprintf(stderr, "dice: prebuilt %d distinct nvcc candidate(s) of %zu group(s): %d built, %d cached, %d failed in %.1f s\n",
                 r->distinct, tasks.size(), r->built, r->cached, r->failed, r->seconds);
  }
}

}  // namespace

Expected<std::vector<runtime::TuneReport>> TuneGroups(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                                             const Options& options, const GroupTuneProgressCallback& on_progress) {
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

  // The distinct tasks, in first-call order (known up front: "group i of N").
  std::vector<const CapturedCall*> distinct;
  std::set<std::string> seen;
  for (const auto& call : calls) {
    std::string sig = ir::Canonical(call.graph);
    for (const auto& s : call.inputs) sig += ";" + s.ToString();
    if (seen.insert(sig).second) distinct.push_back(&call);
  }
  PrebuildGroups(distinct, options);
  std::vector<runtime::TuneReport> reports;
  for (size_t i = 0; i < distinct.size(); ++i) {
    const CapturedCall& call = *distinct[i];
    runtime::TuneProgressCallback group_progress;
    if (on_progress) {
      group_progress = [&, i](const runtime::TuneProgress& p) {
        on_progress(GroupTuneProgress{static_cast<int>(i) + 1, static_cast<int>(distinct.size()), call.group_id, p});
      };
    }
    auto rep = TuneCapturedCall(call, options, group_progress);
    if (!rep.ok()) {
      if (rep.status().code() == StatusCode::kNoDevice || rep.status().code() == StatusCode::kIoError ||
          rep.status().code() == StatusCode::kCorrupt) {
        SetRuntimeOptions(options);
        return rep.status();
      }
      runtime::TuneReport failed;
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
