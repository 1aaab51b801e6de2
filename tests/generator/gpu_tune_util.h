// gpu_tune_util.h — the setup the template families' GPU tests share (label
// gpu): a Tuner over the template generator, the task serving builds for an
// IR text over input specs (dice/core/tensor_layout.h MakeServedTask: the
// output layouts the worker's verifier derives too), and the bytes a task
// moves (every input and output once, for the TB/s the tests print).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/core/tensor_layout.h"
#include "dice/generator/templates.h"
#include "dice/runtime/tuner.h"

namespace dice::tmpl_test {

/// A Tuner over the template generator alone: 8 candidates, 120 s a group.
inline std::unique_ptr<runtime::Tuner> TemplateTuner() {
  runtime::TuneOptions options;
  options.max_candidates = 8;
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

}  // namespace dice::tmpl_test
