// gpu_tune_util.h — the setup the template families' GPU tests share (label
// gpu): a Tuner over the template generator, the task serving builds for an
// IR text over input specs (dice/core/tensor_layout.h MakeServedTask: the
// output layouts the worker's verifier derives too), and the bytes a task
// moves (every input and output once, for the TB/s the tests print).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/core/tensor_layout.h"
#include "dice/generator/templates.h"
#include "dice/runtime/tuner.h"

namespace dice::tmpl_test {

/// A Tuner over the template generator alone: `max_candidates` (default 8)
/// candidates, 120 s a group.
inline std::unique_ptr<runtime::Tuner> TemplateTuner(int max_candidates = 8) {
  runtime::TuneOptions options;
  options.max_candidates = max_candidates;
  options.budget_s = 120;
  return std::make_unique<runtime::Tuner>(nullptr,
                                          std::vector<std::shared_ptr<KernelGenerator>>{
                                              std::make_shared<generator::TemplateGenerator>()},
                                          options);
}

/// The served task of `ir_text` over `specs` ("32x64x56x56:f32", ...), input
/// `layout_input` (-1: none) in `layout`'s canonical strides. Records a test
/// failure and returns nullopt when the text, a spec or the task is invalid.
inline std::optional<Task> ServedTask(const char* ir_text, const std::vector<const char*>& specs,
                                      const TargetInfo& target, int layout_input = -1,
                                      TensorLayout layout = TensorLayout::kChannelsLast) {
  auto graph = ir::Parse(ir_text);
  EXPECT_TRUE(graph.ok()) << graph.status().ToString();
  if (!graph.ok()) return std::nullopt;
  std::vector<ir::TensorSpec> inputs;
  for (const char* s : specs) {
    auto spec = ir::ParseInputSpec(s);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) return std::nullopt;
    inputs.push_back(*spec);
  }
  if (layout_input >= 0) inputs[layout_input].strides = LayoutStrides(inputs[layout_input].shape, layout);
  auto task = MakeServedTask(*graph, inputs, target);
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  if (!task.ok()) return std::nullopt;
  return std::move(task).value();
}

/// Bytes of every input and output of `t`, each moved once.
inline double MovedBytes(const Task& t) {
  double bytes = 0;
  for (const auto& s : t.inputs) bytes += static_cast<double>(s.numel() * ir::DTypeSize(s.dtype));
  for (const auto& s : t.outputs) bytes += static_cast<double>(s.numel() * ir::DTypeSize(s.dtype));
  return bytes;
}

/// Tunes `task` and checks what every GPU test of a family checks (test
/// failures, not exceptions): the tune succeeds and no candidate fails
/// verification or crashes. Prints one line per verified candidate (µs, TB/s
/// over MovedBytes) and a summary line (eager's baseline, the best, the
/// speedup, the winner), each starting "[<tag>] <name>". Returns the origins
/// of the verified candidates ("template:row/..."), empty when the tune failed.
inline std::vector<std::string> TuneAndPrintVerified(runtime::Tuner& tuner, const Task& task, const char* tag,
                                                     const char* name) {
  auto report = tuner.Tune(task);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return {};
  const double bytes = MovedBytes(task);
  auto tbps = [&](double us) { return us > 0 ? bytes / (us * 1e6) : 0.0; };
  std::vector<std::string> verified;
  for (const auto& o : report->outcomes) {
    EXPECT_NE(o.outcome, runtime::Outcome::kVerifyFailed) << o.origin << ": " << o.error;
    EXPECT_NE(o.outcome, runtime::Outcome::kCrashed) << o.origin << ": " << o.error;
    if (!runtime::IsVerified(o.outcome)) continue;
    verified.push_back(o.origin);
    std::printf("[%s] %-40s %-40s %9.2f us %6.2f TB/s\n", tag, name, o.origin.c_str(), o.time_us, tbps(o.time_us));
  }
  std::printf("[%s] %-40s baseline %9.2f us (%.2f TB/s)  best %9.2f us  speedup %5.2fx  %s\n", tag, name,
              report->baseline_us, tbps(report->baseline_us), report->best_us, report->speedup,
              report->winner_origin.c_str());
  return verified;
}

}  // namespace dice::tmpl_test
