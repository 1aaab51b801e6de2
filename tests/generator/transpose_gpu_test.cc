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
#include "dice/core/tensor_layout.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/tuner.h"

namespace dice::generator {
namespace {

struct Case {
  const char* name;
  const char* ir;
  std::vector<const char*> inputs;
  int channels_last_input;  // -1: none
};

std::vector<int64_t> ChannelsLastStrides(const std::vector<int64_t>& s) {
  return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]};
}

// relu(x + b) of a channels_last x, then the layout copy to NCHW (a conv
// region's exit fused into its epilogue); and a conv region's entry copy.
constexpr const char* kExitF32 =
    "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\n%4 = contiguous(%3)\n"
    "output %4\n";
constexpr const char* kExitBf16 =
    "dice-ir v1\ninput %0 bf16 rank=4\ninput %1 bf16 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\n%4 = contiguous(%3)\n"
    "output %4\n";

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"bias_relu_cl_to_nchw_f32_partial", kExitF32, {"2x3x5x126:f32", "3x1x1:f32"}, 0},
      {"bias_relu_cl_to_nchw_bf16_partial", kExitBf16, {"4x96x33x31:bf16", "96x1x1:bf16"}, 0},
      {"bias_relu_cl_to_nchw_f32", kExitF32, {"8x64x56x56:f32", "64x1x1:f32"}, 0},
      {"bias_relu_cl_to_nchw_bf16", kExitBf16, {"8x64x56x56:bf16", "64x1x1:bf16"}, 0},
      // level-2 task 1's epilogue at a quarter of its batch (260 MB in, 260 MB out)
      {"bias_relu_cl_to_nchw_f32_large", kExitF32, {"32x128x126x126:f32", "128x1x1:f32"}, 0},
      {"copy_nchw_to_cl_bf16", "dice-ir v1\ninput %0 bf16 rank=4\n%1 = contiguous(%0) i=1\noutput %1\n",
       {"8x64x56x58:bf16"}, -1},
      // level-2 task 1's entry copy at a quarter of its batch (134 MB each way)
      {"copy_nchw_to_cl_f32_large", "dice-ir v1\ninput %0 f32 rank=4\n%1 = contiguous(%0) i=1\noutput %1\n",
       {"32x64x128x128:f32"}, -1},
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
    // The output layouts the worker's verifier derives too (tensor_layout.h ApplyOutputLayouts).
    auto task = MakeServedTask(*graph, inputs, target);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
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
    double bytes = 0;  // every input and output moved once
    for (const auto& t : task->inputs) bytes += static_cast<double>(t.numel() * ir::DTypeSize(t.dtype));
    for (const auto& t : task->outputs) bytes += static_cast<double>(t.numel() * ir::DTypeSize(t.dtype));
    std::printf("[transpose-gpu] %-34s baseline %9.2f us  best %9.2f us  speedup %5.2fx  %s  (best %.2f TB/s)\n",
                c.name, report->baseline_us, report->best_us, report->speedup, report->winner_origin.c_str(),
                report->best_us > 0 ? bytes / (report->best_us * 1e6) : 0.0);
  }
}

}  // namespace
}  // namespace dice::generator
