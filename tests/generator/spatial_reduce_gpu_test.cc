// spatial_reduce_gpu_test.cc — (label gpu) reductions over the spatial axes
// of channels_last activations (a global average pool after a conv,
// KernelBench level2/67 and 44) through the real tuner and verifier (worker
// process, ATen's ops as the reference, poisoned outputs, NaN placement,
// repeat-run agreement). The reduced axes are not innermost there, and the
// rows (N*C) are few for their length, so the row family offers its
// tilesplit schedule (row.cc): each case must have a tilesplit candidate
// verified and none may fail verification. Times are printed beside eager's
// (the same ops as ATen runs them), not asserted (bench/ holds the
// performance targets). Skipped without a GPU.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dice/runtime/cuda_driver.h"
#include "gpu_tune_util.h"

namespace dice::generator {
namespace {

struct Case {
  const char* name;
  const char* ir;
  std::vector<const char*> inputs;  // input 0 is laid out channels_last
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"mean_hw_f32", "dice-ir v1\ninput %0 f32 rank=4\n%1 = mean(%0) dims=[2,3]\noutput %1\n", {"32x64x128x128:f32"}},
      {"mean_hw_bf16", "dice-ir v1\ninput %0 bf16 rank=4\n%1 = mean(%0) dims=[2,3]\noutput %1\n", {"32x64x128x128:bf16"}},
      // level2/67 at a quarter of its batch: conv bias, GELU, global average pool.
      {"add_gelu_mean_hw_f32",
       "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=3\n%2 = add(%0, %1)\n%3 = gelu(%2)\n"
       "%4 = mean(%3) dims=[2,3]\noutput %4\n",
       {"32x64x254x254:f32", "64x1x1:f32"}},
      // Two levels and a full-shaped output: x - mean(x), then its spatial max.
      {"center_then_amax_f32",
       "dice-ir v1\ninput %0 f32 rank=4\n%1 = mean(%0) dims=[2,3] keepdim=1\n%2 = sub(%0, %1)\n"
       "%3 = amax(%2) dims=[2,3]\noutput %2, %3\n",
       {"16x64x96x96:f32"}},
  };
  return cases;
}

TEST(SpatialReduceGpu, TilesplitCandidatesPassTheVerifier) {
  auto dev = runtime::QueryDevice(0);
  if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
  const TargetInfo target = runtime::TargetForDevice(0);
  auto tuner = tmpl_test::TemplateTuner();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto task = tmpl_test::ServedTask(c.ir, c.inputs, target, 0, TensorLayout::kChannelsLast);
    ASSERT_TRUE(task.has_value());
    int tilesplit = 0;
    for (const std::string& origin : tmpl_test::TuneAndPrintVerified(*tuner, *task, "spatial-gpu", c.name))
      tilesplit += origin.find("row/tilesplit") != std::string::npos ? 1 : 0;
    EXPECT_GE(tilesplit, 1) << "no tilesplit candidate was verified";
  }
}

}  // namespace
}  // namespace dice::generator
