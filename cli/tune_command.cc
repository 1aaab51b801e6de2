// `dice tune` (cli/model_commands.h): tunes the model's fusion groups, stores
// the winners, then runs the optimized module against eager and prints the
// per-group table, the end-to-end times and their attribution. The model
// loading and timing it shares with `dice run` / `dice profile`:
// model_common.h (model_commands.cc).
#include "model_commands.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/core/log.h"
#include "dice/runtime/outcome.h"
#include "dice/generator/dice_generator.h"
#include "dice/generator/templates.h"
#include "dice/reference/device_compare.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/torch_ext/optimize.h"
#include "dice/torch_ext/outputs.h"
#include "attribution.h"
#include "capture_decisions.h"
#include "model_common.h"
#include "model_inputs.h"
#include "progress.h"
#include "report.h"

namespace dice::cli {
namespace {

using namespace model_cmd;  // NOLINT(build/namespaces): the shared model command helpers

std::string Fixed(double v, int digits = 1) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

/// µs of one module.forward(inputs), GPU work synchronised.
double TimeOnce(LoadedModel& m) {
  const auto t0 = std::chrono::steady_clock::now();
  m.module.forward(m.inputs);
  Sync(m.on_gpu);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

/// The end-to-end times of `dice tune` (attribution.h), median µs; 0 = not timed.
struct SideBySide {
  double original_us = 0;
  double captured_us = 0;
  double optimized_us = 0;
};

/// Times `original`, `captured` (when given: a GPU run) and `tuned` side by
/// side, round-robin (RoundRobinMedians: 3 warm-up calls each, then `reps`
/// rounds). The tuned module runs with `options` (mode cache: its groups
/// serve the winners), the other two with mode off, so that no dice group
/// the graph executor's pass may have formed in them (DICE_MODE set) serves
/// a winner. Leaves the runtime options at `options`.
SideBySide TimeSideBySide(LoadedModel& original, LoadedModel* captured, LoadedModel& tuned,
                          const dice::torch_ext::Options& options, int reps) {
  torch::NoGradGuard no_grad;
  dice::torch_ext::Options off = options;
  off.mode = dice::torch_ext::Mode::kOff;
  std::vector<LoadedModel*> models = {&original};
  if (captured != nullptr) models.push_back(captured);
  models.push_back(&tuned);
  const std::vector<double> us = RoundRobinMedians(models.size(), reps, /*warmup=*/3, [&](size_t v) {
    dice::torch_ext::SetRuntimeOptions(models[v] == &tuned ? options : off);
    return TimeOnce(*models[v]);
  });
  dice::torch_ext::SetRuntimeOptions(options);
  return {us.front(), captured != nullptr ? us[1] : 0.0, us.back()};
}

/// Calls per forward of each task key, from the group statistics of the one
/// forward run since ResetGroupStats (CallsPerTask, attribution.h).
std::map<std::string, int64_t> CallsPerForward() {
  std::vector<GroupCalls> groups;
  for (const auto& s : dice::torch_ext::GetGroupStats()) groups.push_back({s.task_keys, s.calls});
  return CallsPerTask(groups);
}

/// The per-group result table of `dice tune`: times, speedup, what the winner
/// saved (µs per forward; "/call" when the calls per forward are not known),
/// candidate counts, winner, and each failed candidate's cause.
void PrintGroupTable(const std::vector<dice::runtime::TuneReport>& reports,
                     const std::map<std::string, int64_t>& calls_per_forward) {
  if (reports.empty()) {
    std::printf("\nno fusion group formed: every op of the model stays with PyTorch (nothing to tune)\n");
    return;
  }
  std::printf("\n%10s %10s %8s %13s %14s  %-34s %s\n", "base µs", "best µs", "speedup", "saved µs/fwd",
              "tried/comp/ver", "winner", "group (ops inputs)");
  for (const auto& r : reports) {
    const std::string origin = r.winner_origin.empty() ? "-" : r.winner_origin + (r.from_cache ? " (cached)" : "");
    auto calls = calls_per_forward.find(r.task_key);
    const WinnerSaving saved = SavedByWinner(
        r.baseline_us, r.best_us, calls == calls_per_forward.end() ? std::nullopt : std::optional<int64_t>(calls->second));
    const std::string saved_text =
        !saved.saved_us ? "-" : Fixed(*saved.saved_us) + (saved.calls_per_forward ? "" : "/call");
    std::printf("%10s %10s %8s %12s %6d/%3d/%3d  %-34s %s\n", r.baseline_us > 0 ? Fixed(r.baseline_us).c_str() : "-",
                r.best_us > 0 ? Fixed(r.best_us).c_str() : "-",
                r.speedup > 0 ? (Fixed(r.speedup, 2) + "x").c_str() : "-", saved_text.c_str(), r.tried, r.compiled,
                r.verified, origin.c_str(), r.description.c_str());
    // With DICE among the sources (--generator dice|both): what each source's
    // candidates came to (issue 21 item 4), e.g. "dice 8 decoded, 5 parsed,
    // 3 compiled, 1 verified, best 12.3 µs; template ... best 10.1 µs".
    const nlohmann::json by = GroupJson(r, true, std::nullopt)["by_generator"];
    if (by.contains("dice")) {
      std::string line;
      for (const auto& [src, n] : by.items()) {
        line += (line.empty() ? "" : "; ") + (src.empty() ? std::string("?") : src) + " " +
                std::to_string(n["candidates"].get<int64_t>()) + (src == "dice" ? " decoded, " : " candidates, ") +
                std::to_string(n["parsed"].get<int64_t>()) + " parsed, " +
                std::to_string(n["compiled"].get<int64_t>()) + " compiled, " +
                std::to_string(n["verified"].get<int64_t>()) + " verified, best " +
                (n["best_us"].is_number() ? Fixed(n["best_us"].get<double>()) + " µs" : std::string("-")) +
                (n["won"].get<bool>() ? " (won)" : "");
      }
      std::printf("    by source: %s\n", line.c_str());
    }
    for (const auto& o : r.outcomes) {
      if (!dice::runtime::IsVerified(o.outcome) && o.outcome != dice::runtime::Outcome::kCompiled) {
        std::printf("    %s: %s %s\n", o.origin.c_str(), std::string(dice::runtime::OutcomeName(o.outcome)).c_str(),
                    o.error.substr(0, 160).c_str());
      }
    }
  }
}

/// Writes the report document (report.h) to --json (invalid UTF-8 in
/// compiler logs replaced) and its HTML page to --report; fills `error`.
bool WriteTuneOutputs(const ModelArgs& args, const nlohmann::json& doc, std::string* error) {
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.close();
    if (!out) {
      *error = "cannot write --json " + args.json_path;
      return false;
    }
    std::printf("dice: JSON report written to %s\n", args.json_path.c_str());
  }
  if (!args.report_path.empty()) {
    const Status st = WriteReport(doc, args.report_path);
    if (!st.ok()) {
      *error = st.message();
      return false;
    }
    std::printf("dice: report written to %s\n", args.report_path.c_str());
  }
  return true;
}

/// Whether the folders of --json, --report and --save exist, checked before tuning
/// so a mistyped path does not cost the whole tune; fills `error`.
bool OutputFoldersExist(const ModelArgs& args, std::string* error) {
  const std::pair<const char*, const std::string*> outputs[] = {{"--json", &args.json_path},
                                                                {"--report", &args.report_path},
                                                                {"--save", &args.save_path}};
  for (const auto& [flag, path] : outputs) {
    if (path->empty()) continue;
    const std::filesystem::path parent = std::filesystem::path(*path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
      *error = std::string(flag) + " " + *path + ": folder " + parent.string() + " does not exist";
      return false;
    }
  }
  return true;
}

/// Compares outputs with DESIGN.md's per-dtype limits (f32 1e-4, f16/bf16
/// 1e-2) using the verifier's own comparator (CompareTensors, on the device).
bool OutputsMatch(const c10::IValue& got, const c10::IValue& want, std::string* detail) {
  auto g = dice::torch_ext::FlattenOutputs(got), w = dice::torch_ext::FlattenOutputs(want);
  if (g.size() != w.size()) {
    *detail = "output count differs";
    return false;
  }
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i].scalar_type() != w[i].scalar_type()) {
      *detail = "output " + std::to_string(i) + " dtype differs";
      return false;
    }
    auto dtype = dice::reference::FromScalarType(w[i].scalar_type());
    const dice::runtime::Tolerance tol = dtype.ok() ? dice::runtime::Tolerance::ForDType(*dtype) : dice::runtime::Tolerance{1e-4, 1e-4};
    const dice::runtime::CompareResult r = dice::reference::CompareTensors(g[i], w[i], tol);
    worst = std::max(worst, r.max_abs_err);
    if (!r.ok) {
      *detail = "output " + std::to_string(i) + ": " + r.reason;
      return false;
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "max abs err %.3g", worst);
  *detail = buf;
  return true;
}

/// The float64 second opinion of the benchmark (bench/kernelbench_bench.py
/// match_against_float64; docs/DECISIONS.md), for outputs OutputsMatch
/// refused: a conv or GEMM whose summation order PyTorch itself does not fix
/// (cuDNN picks another algorithm for a channels_last conv than for an NCHW
/// one) differs from eager by that order alone. A fresh copy of the model
/// runs in float64 on `inputs` converted; `got` passes when every element is
/// within atol + rtol * |ref64| + 2 * (eager's own worst error vs float64),
/// the per-dtype limits of OutputsMatch. `detail` says which opinion decided
/// and both errors. False (with the reason) when the float64 run fails.
bool MatchAgainstFloat64(const ModelArgs& args, bool gpu, const std::vector<c10::IValue>& inputs,
                         const c10::IValue& got, const c10::IValue& want, std::string* detail) {
  const std::string strict = *detail;
  std::vector<at::Tensor> ref;
  try {
    torch::NoGradGuard no_grad;
    // The module alone (the file loaded before; `inputs` are the ones to convert).
    torch::jit::Module m64 = torch::jit::load(args.model_path, gpu ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU));
    m64.eval();
    m64.to(torch::kDouble);
    // A frozen file keeps its weights as graph constants, which Module::to
    // leaves alone: their floating-point tensors become float64 too.
    auto graph = m64.get_method("forward").graph();
    torch::jit::Inline(*graph);
    std::vector<torch::jit::Node*> constants;
    for (torch::jit::Node* n : graph->nodes())
      if (n->kind() == c10::prim::Constant && n->output()->type()->cast<c10::TensorType>()) constants.push_back(n);
    for (torch::jit::Node* n : constants) {
      const at::Tensor t = torch::jit::toIValue(n->output())->toTensor();
      if (!t.is_floating_point()) continue;
      torch::jit::WithInsertPoint at(n);
      n->output()->replaceAllUsesWith(graph->insertConstant(t.to(torch::kDouble)));
      n->destroy();
    }
    std::vector<c10::IValue> in64;
    for (const auto& v : inputs) in64.push_back(v.isTensor() ? c10::IValue(v.toTensor().to(torch::kDouble)) : v);
    ref = dice::torch_ext::FlattenOutputs(m64.forward(in64));
  } catch (const std::exception& e) {
    *detail = strict + "; no float64 check: " + TorchErrorCause(e);
    return false;
  }
  auto g = dice::torch_ext::FlattenOutputs(got), w = dice::torch_ext::FlattenOutputs(want);
  if (ref.size() != g.size()) return false;
  double worst = 0, eager_worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    auto dtype = dice::reference::FromScalarType(w[i].scalar_type());
    const dice::runtime::Tolerance tol =
        dtype.ok() ? dice::runtime::Tolerance::ForDType(*dtype) : dice::runtime::Tolerance{1e-4, 1e-4};
    const at::Tensor r = ref[i].to(torch::kDouble);
    const double eager_err = r.numel() ? (w[i].to(torch::kDouble) - r).abs().nan_to_num(0).max().item<double>() : 0.0;
    const at::Tensor err = (g[i].to(torch::kDouble) - r).abs().nan_to_num(0);
    worst = std::max(worst, err.numel() ? err.max().item<double>() : 0.0);
    eager_worst = std::max(eager_worst, eager_err);
    if ((err > tol.atol + tol.rtol * r.abs() + 2 * eager_err).any().item<bool>()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "; worse than eager vs float64 (ours %.3g, eager %.3g)", worst, eager_err);
      *detail = strict + buf;
      return false;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof(buf), " vs eager; vs float64 ours %.3g, within 2x eager's own %.3g", worst, eager_worst);
  *detail = strict + buf;
  return true;
}

/// Loads the model again on the GPU and captures it as optimize() does
/// (frozen unless freezing fails, inlined) in mode off, which leaves its graph
/// without dice groups: the "captured" model of the attribution
/// (attribution.h). Leaves the runtime mode off. `report_out` gets optimize()'s
/// report (its memory-format decision is the tuned copy's too). Errors (in
/// `error`): those of LoadModel, and optimize()'s.
bool LoadCaptured(const ModelArgs& args, bool gpu, LoadedModel* out, dice::torch_ext::OptimizeReport* report_out,
                  std::string* error, std::optional<dice::torch_ext::MemoryFormat> format = std::nullopt) {
  if (!LoadModel(args, gpu, out, error)) return false;
  dice::torch_ext::Options off = BaseOptions(args, out->inputs);
  off.mode = dice::torch_ext::Mode::kOff;
  if (format) off.memory_format = *format;
  auto report = dice::torch_ext::optimize(out->module, off);
  if (!report.ok()) *error = "capturing the model for its capture-alone time: " + report.status().message();
  if (report.ok()) *report_out = *report;
  return report.ok();
}

/// --save: writes `captured` (frozen, inlined, with this tune's memory-format
/// and attention decisions applied, no dice group: optimize() in mode off) as
/// a TorchScript file. Loaded with the dice library present and DICE_MODE=cache
/// (torch.jit.load in Python, or `dice run`), its forward forms the fusion groups
/// this tune cached, and serves their winners; loaded without the library it
/// runs with PyTorch alone. Errors: the file cannot be written (`error` names
/// it and the cause).
bool SaveCaptured(LoadedModel& captured, const std::string& path, std::string* error) {
  try {
    captured.module.save(path);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    *error = "cannot write --save " + path + ": " + what.substr(0, what.find('\n'));
    return false;
  }
  std::printf("dice: captured model written to %s (serve it with DICE_MODE=cache)\n", path.c_str());
  return true;
}

/// TuneGroups on `model` with one progress line per group and phase
/// (cli/progress.h), each line starting with `prefix`.
Expected<std::vector<dice::runtime::TuneReport>> TuneWithProgress(LoadedModel& model,
                                                                  const dice::torch_ext::Options& options,
                                                                  const std::string& prefix) {
  ProgressLine progress;
  std::optional<TuneHeartbeat> heartbeat(std::in_place, progress, prefix);  // a line every 10 s through a long nvcc build
  auto reports = dice::torch_ext::TuneGroups(
      model.module, model.inputs, options, [&heartbeat](const dice::torch_ext::GroupTuneProgress& g) {
        heartbeat->Show(g.group, g.groups, g.tune);
      });
  heartbeat.reset();  // its thread prints no more
  progress.Finish();
  return reports;
}

/// The tuned model of one memory format: the module, its optimize() report
/// and the tune reports of its groups.
struct TunedVariant {
  LoadedModel model;
  dice::torch_ext::OptimizeReport report;
  std::vector<dice::runtime::TuneReport> tuned;
};

/// The memory-format decision with the dice groups in place (issue 18 item 2).
/// The capture times channels_last with PyTorch's own layout copies at the
/// conv regions' edges (a strided copy at ~0.9 TB/s on the H200), which cost
/// more than the channels_last conv saves; as fusion-group ops the copies get
/// generated tiled-transpose kernels and the exit copy is fused into the
/// epilogue group (fusion_policy.h rule 5). So when the capture kept
/// contiguous after timing both layouts (the model has conv regions) and the
/// user left --memory-format at auto, a channels_last copy of the model is
/// optimized and its groups tuned too (about double the tune time of a conv
/// model), and the two tuned models are timed side by side serving their
/// winners (mode cache, round-robin, 3 warm-up calls, `args.reps` rounds).
/// channels_last replaces `variant` when its median is >= 2% below (the rule
/// of kAuto, memory_format_pass.h KeepsChannelsLast); `captured` and
/// `capture_report` are then re-made in channels_last (its capture-alone time
/// and --save file), and the reason names both medians in µs; a
/// `dice: memory format:` line says which was kept. Returns false
/// only when the channels_last copy cannot be loaded or captured (`error`);
/// a tune error of the copy keeps contiguous with a warning.
bool DecideLayoutWithGroups(const ModelArgs& args, const dice::torch_ext::Options& options, TunedVariant* variant,
                            LoadedModel* captured, dice::torch_ext::OptimizeReport* capture_report,
                            std::string* error) {
  const bool forced = !args.memory_format.empty() && args.memory_format != "auto";
  if (forced || capture_report->memory_format != "contiguous" ||
      capture_report->memory_format_us.second <= 0) {
    return true;  // forced, already channels_last, or no conv region was timed
  }
  Notice(dice::LogLevel::kInfo, "dice: channels_last measured slower with PyTorch's layout copies; tuning it with "
         "the copies as fusion groups");
  TunedVariant cl;
  if (!LoadModel(args, true, &cl.model, error)) return false;
  dice::torch_ext::Options o = options;
  o.memory_format = dice::torch_ext::MemoryFormat::kChannelsLast;
  auto report = dice::torch_ext::optimize(cl.model.module, o);
  if (!report.ok()) {
    Warn("channels_last with fused layout copies not tried: " + report.status().message());
    return true;
  }
  auto reports = TuneWithProgress(cl.model, o, "dice: channels_last: ");
  if (!reports.ok()) {
    Warn("channels_last with fused layout copies not tried: " + reports.status().message());
    return true;
  }
  dice::torch_ext::SetRuntimeOptions(options);
  std::vector<double> us;
  {
    torch::NoGradGuard no_grad;
    us = RoundRobinMedians(2, args.reps, /*warmup=*/3,
                           [&](size_t v) { return TimeOnce(v == 0 ? variant->model : cl.model); });
  }
  char reason[256];
  const bool keep_cl = us[0] > 0 && us[1] > 0 && us[1] <= 0.98 * us[0];
  std::snprintf(reason, sizeof(reason), "measured with the dice groups served: contiguous %.1f µs, channels_last "
                "with fused layout copies %.1f µs; %s", us[0], us[1],
                keep_cl ? "channels_last kept (>= 2% faster)" : "contiguous kept");
  Notice(dice::LogLevel::kInfo, "dice: memory format: %s (%s)", keep_cl ? "channels_last" : "contiguous", reason);
  if (!keep_cl) {
    capture_report->memory_format_reason += std::string("; ") + reason;
    return true;
  }
  LoadedModel captured_cl;
  dice::torch_ext::OptimizeReport captured_cl_report;
  if (!LoadCaptured(args, true, &captured_cl, &captured_cl_report, error,
                    dice::torch_ext::MemoryFormat::kChannelsLast)) {
    return false;
  }
  captured_cl_report.memory_format_reason = reason;
  captured_cl_report.memory_format_us = {us[0], us[1]};
  *captured = std::move(captured_cl);
  *capture_report = std::move(captured_cl_report);
  cl.report = std::move(report).value();
  cl.tuned = std::move(reports).value();
  *variant = std::move(cl);
  return true;
}

/// Which generators `dice tune` asks (--generator, --model, --samples).
struct GeneratorArgs {
  std::string kind = "templates";  ///< templates | dice | both
  std::string model_dir;           ///< DICE/SDAR checkpoint directory (dice, both)
  int samples = 4;                 ///< DICE samples per fusion group
  int64_t max_new_tokens = 2048;   ///< DICE tokens per sample at most (a kernel answer is ~1-2k tokens)
};

/// The generators for `g`; DICE decodes on the GPU in bf16 with CUDA graphs
/// when one is present, else on the CPU in f32. Errors (bad input): dice/both without
/// --model, an unloadable checkpoint.
bool MakeGenerators(const GeneratorArgs& g, bool gpu, std::vector<std::shared_ptr<dice::KernelGenerator>>* out,
                    std::string* error) {
  if (g.kind == "templates" || g.kind == "both") out->push_back(std::make_shared<dice::generator::TemplateGenerator>());
  if (g.kind == "dice" || g.kind == "both") {
    if (g.model_dir.empty()) {
      *error = "--generator " + g.kind + " needs --model DIR (a DICE/SDAR checkpoint directory)";
      return false;
    }
    dice::generator::DiceGeneratorOptions o;
    o.model_dir = g.model_dir;
    o.model.device = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    o.model.dtype = gpu ? torch::kBFloat16 : torch::kFloat32;
    o.num_samples = g.samples;
    o.decode.max_new_tokens = g.max_new_tokens;
    o.decode.cuda_graphs = gpu;  // graphed decode: 2.1-5.9x the eager one on the H200 (docs/PERF.md)
    o.progress = true;
    Notice(dice::LogLevel::kInfo, "dice: loading the DICE checkpoint %s on %s", g.model_dir.c_str(),
           gpu ? "cuda:0 (bf16)" : "cpu (f32)");
    auto gen = dice::generator::DiceGenerator::Load(std::move(o));
    if (!gen.ok()) {
      *error = "--model " + g.model_dir + ": " + gen.status().message();
      return false;
    }
    out->push_back(std::shared_ptr<dice::KernelGenerator>(std::move(*gen)));
  }
  return true;
}

/// At debug: every candidate's outcome, one line each (the table keeps counts only).
void NoticeCandidateOutcomes(const std::vector<dice::runtime::TuneReport>& tuned_reports) {
  for (size_t g = 0; g < tuned_reports.size(); ++g) {
    for (const auto& o : tuned_reports[g].outcomes) {
      const std::string err = o.error.substr(0, o.error.find('\n'));
      char timed[32] = "not timed";
      if (o.time_us > 0) std::snprintf(timed, sizeof(timed), "%.1f µs", o.time_us);
      Notice(dice::LogLevel::kDebug, "dice: group %zu candidate %s: %s, compile %.0f ms, %s%s%s", g + 1,
             o.origin.c_str(), std::string(dice::runtime::OutcomeName(o.outcome)).c_str(), o.compile_ms, timed,
             err.empty() ? "" : ": ", err.c_str());
    }
  }
}

/// The end-to-end part of the tune document (report.h): the times `t`
/// (timed on a GPU only), the output check, the calls per forward, and the
/// capture's decisions from `layout`.
EndToEnd EndToEndOf(bool gpu, const SideBySide& t, bool match, const std::string& detail, bool frozen,
                    const std::map<std::string, int64_t>& calls, const dice::torch_ext::OptimizeReport& layout) {
  EndToEnd e2e;  // field by field: an aggregate list would leave the later fields to -Wmissing-field-initializers
  e2e.timed = gpu;
  e2e.before_us = t.original_us;
  e2e.captured_us = t.captured_us;
  e2e.after_us = t.optimized_us;
  e2e.outputs_match = match;
  e2e.match_detail = detail;
  e2e.frozen = frozen;
  e2e.calls_per_forward = calls;
  CopyCaptureDecisions(layout, &e2e);
  return e2e;
}

int CmdTune(const ModelArgs& args, double budget_s, int max_candidates, bool require_gpu,
            const GeneratorArgs& generator_args) {
  // Bad input first, on any machine: the --input values' own syntax (exit 2
  // before --require-gpu's exit 3), then - the device known - the model, the
  // inputs against it and its first run, the cache. Only then the notice of
  // how this machine tunes, so that a bad --input is the one line shown.
  std::string error;
  if (std::vector<InputSpec> specs; !ParseInputs(args, &specs, &error)) return Fail(kExitBadInput, error);
  auto device = dice::runtime::QueryDevice(0);
  const bool gpu = device.ok() && torch::cuda::is_available();
  const std::string no_gpu_why = gpu ? "" : device.ok() ? "PyTorch sees no CUDA device" : device.status().message();
  if (!gpu && require_gpu) return Fail(kExitNoGpu, "no CUDA device present (" + no_gpu_why + ")");
  const int cpu_threads = gpu ? 0 : CpuTimingThreads();
  LoadedModel eager, tuned;
  if (!LoadModel(args, gpu, &eager, &error) || !LoadModel(args, gpu, &tuned, &error)) {
    return Fail(kExitBadInput, error);
  }
  c10::IValue reference;
  {
    torch::NoGradGuard no_grad;
    try {
      reference = eager.module.forward(eager.inputs);
    } catch (const std::exception& e) {
      return Fail(kExitBadInput, ModelRunError(args, e));
    }
  }
  // The cache last: opening it creates it, and a rejected command leaves nothing behind.
  if (!OutputFoldersExist(args, &error)) return Fail(kExitBadInput, error);
  if (!CheckCache(args.cache_dir, &error)) return Fail(kExitBadInput, error);
  UseCacheDirForBuilds(args.cache_dir);
  if (!gpu) {
    Notice(dice::LogLevel::kWarn, "dice: no CUDA device present (%s).\n"
           "dice: running compile-only: candidates are generated and compiled for sm_90 (NVRTC for device form, nvcc for extension form); "
           "nothing is verified, timed or cached as a winner.", no_gpu_why.c_str());
  } else {
    Notice(dice::LogLevel::kInfo, "dice: tuning on %s (%s)", device->name.c_str(), device->arch.c_str());
  }
  // Capture alone (GPU runs, where it is timed): a third copy, frozen and
  // inlined as the tuned one but optimize()d in mode off, which leaves its
  // graph without dice groups. Before the tuned optimize(): it sets the mode.
  LoadedModel captured;
  dice::torch_ext::OptimizeReport capture_report;
  // (--save writes this copy, so it is made without a GPU too.)
  if ((gpu || !args.save_path.empty()) && !LoadCaptured(args, gpu, &captured, &capture_report, &error)) {
    return Fail(kExitFailure, error);
  }

  std::vector<std::shared_ptr<dice::KernelGenerator>> generators;
  if (!MakeGenerators(generator_args, gpu, &generators, &error)) return Fail(kExitBadInput, error);
  dice::torch_ext::SetGenerators(std::move(generators));

  auto options = BaseOptions(args, tuned.inputs);
  options.mode = dice::torch_ext::Mode::kCache;
  options.tune.compile_only = !gpu;
  options.tune.budget_s = budget_s;
  options.tune.max_candidates = max_candidates;
  if (gpu) {  // the layout is measured once, on the captured copy; the tuned copy takes its decision
    options.memory_format = capture_report.memory_format == "channels_last" ? dice::torch_ext::MemoryFormat::kChannelsLast
                                                                            : dice::torch_ext::MemoryFormat::kContiguous;
    options.attention = capture_report.attention == "sdpa" ? dice::torch_ext::AttentionMode::kSdpa
                                                           : dice::torch_ext::AttentionMode::kUnfused;
  }
  auto optimized = dice::torch_ext::optimize(tuned.module, options);
  if (!optimized.ok()) return Fail(kExitFailure, optimized.status().message());
  for (const auto& w : optimized->warnings) Warn(w);
  TunedVariant variant{std::move(tuned), std::move(optimized).value(), {}};
  const dice::torch_ext::OptimizeReport* layout = gpu ? &capture_report : &variant.report;
  NoticeCaptureDecisions(*layout);
  Notice(dice::LogLevel::kInfo, "dice: %zu fusion group(s) formed, %zu op(s) left with PyTorch",
         variant.report.groups.size(), variant.report.left_out.size());
  auto tuned_groups = TuneWithProgress(variant.model, options, "dice: ");
  if (!tuned_groups.ok()) return Fail(kExitFailure, tuned_groups.status().message());
  variant.tuned = std::move(tuned_groups).value();
  if (gpu && !DecideLayoutWithGroups(args, options, &variant, &captured, &capture_report, &error)) {
    return Fail(kExitFailure, error);
  }
  LoadedModel& tuned_model = variant.model;
  const dice::torch_ext::OptimizeReport* report = &variant.report;
  const std::vector<dice::runtime::TuneReport>* tuned_reports = &variant.tuned;
  NoticeCandidateOutcomes(*tuned_reports);

  // End to end: one forward of the optimized module serving the cached
  // winners (mode cache) checks its outputs and counts each group's calls;
  // then original, captured and optimized are timed side by side.
  dice::torch_ext::ResetGroupStats();
  c10::IValue got;
  {
    torch::NoGradGuard no_grad;
    got = tuned_model.module.forward(tuned_model.inputs);
  }
  const std::map<std::string, int64_t> calls = CallsPerForward();
  PrintGroupTable(*tuned_reports, calls);
  std::string detail;
  bool match = OutputsMatch(got, reference, &detail);
  if (!match) match = MatchAgainstFloat64(args, gpu, eager.inputs, got, reference, &detail);
  SideBySide t;
  {
    CpuTimingScope timing(gpu, cpu_threads);
    t = TimeSideBySide(eager, gpu ? &captured : nullptr, tuned_model, options, args.reps);
  }
  if (gpu) {
    std::printf("\nend to end (median of %d, round-robin): original %.1f µs, captured %.1f µs (frozen graph, no dice "
                "group), optimized %.1f µs; outputs %s eager (%s)\n", args.reps, t.original_us, t.captured_us,
                t.optimized_us, match ? "match" : "DIFFER FROM", detail.c_str());
  } else {
    std::printf("\nend to end (%s, every group on its fallback; not a speedup measurement): before %.1f µs, "
                "after %.1f µs; outputs %s eager (%s)\n", TimedOn(gpu, cpu_threads).c_str(), t.original_us,
                t.optimized_us, match ? "match" : "DIFFER FROM", detail.c_str());
  }
  const Attribution attribution = gpu ? Attribute(t.original_us, t.captured_us, t.optimized_us) : Attribution{};
  std::printf("%s\n", AttributionLine(attribution, report->frozen, report->memory_format).c_str());
  const EndToEnd e2e = EndToEndOf(gpu, t, match, detail, report->frozen, calls, *layout);
  if (!WriteTuneOutputs(args, TuneDocument(args.model_path, *tuned_reports, e2e), &error)) {
    return Fail(kExitFailure, error);
  }
  if (!args.save_path.empty() && !SaveCaptured(captured, args.save_path, &error)) return Fail(kExitFailure, error);
  return match ? kExitOk : kExitFailure;
}

/// `dice tune` flags beyond the model's.
struct TuneArgs {
  ModelArgs model;
  double budget_s = 60;
  int max_candidates = 16;
  bool require_gpu = false;
  GeneratorArgs generator;
};

}  // namespace

void RegisterTune(CLI::App& app, CommandTable& table) {
  auto a = std::make_shared<TuneArgs>();
  auto* tune = app.add_subcommand("tune", "tune the model's fusion groups and cache the winners");
  AddModelArgs(tune, &a->model);
  tune->add_option("--budget-s", a->budget_s, "tuning budget per fusion group, seconds (nvcc-built GEMM "
                                                  "candidates take ~40 s each; without a GPU one not yet built "
                                                  "starts only with >= 40 s left)")->capture_default_str();
  tune->add_option("--max-candidates", a->max_candidates, "candidates per generator and group")->check(CLI::Range(1, 256));
  tune->add_option("--memory-format", a->model.memory_format, "conv regions' layout: auto (default: measured on the GPU, "
                   "or $DICE_MEMORY_FORMAT), contiguous or channels_last")->check(CLI::IsMember({"auto", "contiguous", "channels_last"}));
  tune->add_flag("--require-gpu", a->require_gpu, "exit 3 instead of running compile-only when no GPU is present");
  tune->add_option("--report", a->model.report_path, "also write the tuning report as one self-contained HTML page "
                                                     "to this file (docs/CLI.md)");
  tune->add_option("--save", a->model.save_path, "also write the captured model (frozen, with the memory-format and "
                   "attention decisions of this tune applied) as TorchScript, to serve with DICE_MODE=cache");
  tune->add_option("--generator", a->generator.kind, "candidate sources: templates (default), dice or both")
      ->check(CLI::IsMember({"templates", "dice", "both"}));
  tune->add_option("--model", a->generator.model_dir, "DICE/SDAR checkpoint directory (for --generator dice|both)");
  tune->add_option("--samples", a->generator.samples, "DICE samples per fusion group (also capped by "
                                                      "--max-candidates)")->check(CLI::Range(1, 1024));
  tune->add_option("--max-new-tokens", a->generator.max_new_tokens, "DICE tokens per sample at most")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  table.Add(tune, [a] { return CmdTune(a->model, a->budget_s, a->max_candidates, a->require_gpu, a->generator); });
}

}  // namespace dice::cli
