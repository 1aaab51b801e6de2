// pool_gpu_test.cc — (label gpu) windowed pools (ir avg_pool / max_pool)
// through the real tuner and verifier (worker process, ATen's pools as the
// reference, poisoned outputs, NaN placement, repeat-run agreement): a pool
// alone, contiguous and channels_last, f32 and bf16, 1-D and 3-D, windows
// that do not divide the extent (floor mode), and
// KernelBench level2/46's epilogue (x - a, tanh, - b, avg_pool) at a
// quarter of its batch. No candidate may fail verification and at least one
// must pass; each candidate's time is printed beside eager's (the baseline:
// the same ops as ATen runs them), not asserted (bench/ holds the
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
  std::vector<const char*> inputs;
  TensorLayout layout;  // of input 0 (kContiguous: as parsed)
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"avg_pool2x2_f32", "dice-ir v1\ninput %0 f32 rank=4\n%1 = avg_pool(%0) dims=[2,2]\noutput %1\n",
       {"32x64x64x64:f32"}, TensorLayout::kContiguous},
      {"max_pool2x2_f32_channels_last", "dice-ir v1\ninput %0 f32 rank=4\n%1 = max_pool(%0) dims=[2,2]\noutput %1\n",
       {"32x64x64x64:f32"}, TensorLayout::kChannelsLast},
      {"max_pool2x2_bf16", "dice-ir v1\ninput %0 bf16 rank=4\n%1 = max_pool(%0) dims=[2,2]\noutput %1\n",
       {"32x64x64x64:bf16"}, TensorLayout::kContiguous},
      {"avg_pool4_1d_f32", "dice-ir v1\ninput %0 f32 rank=3\n%1 = avg_pool(%0) dims=[4]\noutput %1\n",
       {"64x128x1024:f32"}, TensorLayout::kContiguous},
      {"max_pool2x2x2_3d_f32", "dice-ir v1\ninput %0 f32 rank=5\n%1 = max_pool(%0) dims=[2,2,2]\noutput %1\n",
       {"16x16x16x32x32:f32"}, TensorLayout::kContiguous},
      // Floor mode: windows that do not divide the extent drop its tail
      // (level2/50, 72, 78: ConvTranspose3d outputs of 63; level2/65: 382 in windows of 4).
      {"max_pool2x2x2_3d_uneven_channels_last",
       "dice-ir v1\ninput %0 f32 rank=5\n%1 = max_pool(%0) dims=[2,2,2]\noutput %1\n", {"8x16x31x63x63:f32"}, TensorLayout::kChannelsLast3d},
      {"avg_pool4x4_uneven_f32", "dice-ir v1\ninput %0 f32 rank=4\n%1 = avg_pool(%0) dims=[4,4]\noutput %1\n",
       {"16x64x94x94:f32"}, TensorLayout::kChannelsLast},
      // level2/46: conv output [128, 128, 126, 126] at a quarter of the batch.
      {"sub_tanh_sub_avg_pool_f32",
       "dice-ir v1\ninput %0 f32 rank=4\n%1 = const(0.5)\n%2 = sub(%0, %1)\n%3 = tanh(%2)\n%4 = const(0.2)\n"
       "%5 = sub(%3, %4)\n%6 = avg_pool(%5) dims=[2,2]\noutput %6\n",
       {"32x128x126x126:f32"}, TensorLayout::kContiguous},
      {"sub_tanh_sub_avg_pool_f32_channels_last",
       "dice-ir v1\ninput %0 f32 rank=4\n%1 = const(0.5)\n%2 = sub(%0, %1)\n%3 = tanh(%2)\n%4 = const(0.2)\n"
       "%5 = sub(%3, %4)\n%6 = avg_pool(%5) dims=[2,2]\noutput %6\n",
       {"32x128x126x126:f32"}, TensorLayout::kChannelsLast},
  };
  return cases;
}

TEST(PoolGpu, PoolCandidatesPassTheVerifier) {
  auto dev = runtime::QueryDevice(0);
  if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
  const TargetInfo target = runtime::TargetForDevice(0);
  auto tuner = tmpl_test::TemplateTuner();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const bool laid_out = c.layout != TensorLayout::kContiguous;
    auto task = tmpl_test::ServedTask(c.ir, c.inputs, target, laid_out ? 0 : -1, c.layout);
    ASSERT_TRUE(task.has_value());
    const auto verified = tmpl_test::TuneAndPrintVerified(*tuner, *task, "pool-gpu", c.name);
    EXPECT_GE(verified.size(), 1u) << "no pool candidate was verified";
  }
}

}  // namespace
}  // namespace dice::generator
