// transpose_gpu_test.cc — (label gpu) the tiled-transpose candidates of the
// elementwise family (generator/src/templates/transpose.cc) pass the real
// verifier (worker process, eager reference at the tasks' own strides,
// poisoned outputs, repeat-run agreement): the conv epilogue relu(x + b)
// with x channels_last and a contiguous output, f32 and bf16, at a size
// with partial tiles on both plane axes and at a ResNet-like size, and the
// contiguous -> channels_last copy. Times are printed, not asserted (bench/
// holds the performance targets). Skipped without a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/tuner.h"

namespace dice::generator {
namespace {

struct Case {
  const char* name;
  const char* ir;
  std::vector<const char*> inputs;
  int channels_last_input;   // -1: none
  bool channels_last_output;
};

std::vector<int64_t> ChannelsLastStrides(const std::vector<int64_t>& s) {
  return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]};
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"bias_relu_cl_to_nchw_f32_partial",
       "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\noutput %3\n",
       {"2x3x5x126:f32", "3x1x1:f32"}, 0, false},
      {"bias_relu_cl_to_nchw_bf16_partial",
       "dice-ir v1\ninput %0 bf16 rank=4\ninput %1 bf16 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\noutput %3\n",
       {"4x96x33x31:bf16", "96x1x1:bf16"}, 0, false},
      {"bias_relu_cl_to_nchw_f32",
       "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\noutput %3\n",
       {"8x64x56x56:f32", "64x1x1:f32"}, 0, false},
      {"bias_relu_cl_to_nchw_bf16",
       "dice-ir v1\ninput %0 bf16 rank=4\ninput %1 bf16 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\noutput %3\n",
       {"8x64x56x56:bf16", "64x1x1:bf16"}, 0, false},
      {"copy_nchw_to_cl_bf16", "dice-ir v1\ninput %0 bf16 rank=4\noutput %0\n", {"8x64x56x58:bf16"}, -1, true},
  };
  return cases;
}

TEST(TransposeGpu, TransposeCandidatesPassTheVerifier) {
  auto dev = runtime::QueryDevice(0);
  if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
  const TargetInfo target = runtime::TargetForDevice(0);
  runtime::TuneOptions options;
  options.max_candidates = 8;
  options.budget_s = 120;
  runtime::Tuner tuner(nullptr, {std::make_shared<TemplateGenerator>()}, options);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto graph = ir::Parse(c.ir);
    ASSERT_TRUE(graph.ok()) << graph.status().ToString();
    std::vector<ir::TensorSpec> inputs;
    for (const char* s : c.inputs) inputs.push_back(*ir::ParseInputSpec(s));
    if (c.channels_last_input >= 0) {
      auto& in = inputs[c.channels_last_input];
      in.strides = ChannelsLastStrides(in.shape);
    }
    auto task = Task::Make(*graph, inputs, target);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    if (c.channels_last_output) task->outputs[0].strides = ChannelsLastStrides(task->outputs[0].shape);
    auto report = tuner.Tune(*task);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    int transposes = 0;
    for (const auto& o : report->outcomes) {
      if (o.origin.find("/transpose_t") == std::string::npos) continue;
      ++transposes;
      EXPECT_TRUE(runtime::IsVerified(o.outcome)) << o.origin << ": " << o.outcome << " " << o.error;
      std::printf("[transpose-gpu] %-34s %-40s %9.2f us\n", c.name, o.origin.c_str(), o.time_us);
    }
    EXPECT_EQ(transposes, 2) << "both tile edges are tried";
    std::printf("[transpose-gpu] %-34s baseline %9.2f us  best %9.2f us  speedup %5.2fx  %s\n", c.name,
                report->baseline_us, report->best_us, report->speedup, report->winner_origin.c_str());
  }
}

}  // namespace
}  // namespace dice::generator
