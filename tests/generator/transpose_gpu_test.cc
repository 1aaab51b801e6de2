// transpose_gpu_test.cc — (label gpu) the tiled-transpose candidates of the
// elementwise family (generator/src/templates/transpose.cc), scalar and
// vectorised, pass the real verifier (worker process, eager reference at the
// tasks' own strides, poisoned outputs, repeat-run agreement): the conv
// epilogue relu(x + b) with x channels_last and a contiguous output, f32 and
// bf16, at sizes with partial tiles on both plane axes (and an odd a_out
// extent: scalar stores) and at a ResNet-like size, bf16 read into an f32
// epilogue (mixed widths), an output-order input read directly (vector loads
// in the store phase), and the contiguous -> channels_last copy. Every
// candidate's time and bandwidth (every input and output moved once) is
// printed, not asserted (bench/ holds the performance targets), so the
// variants compare side by side; the 260 MB epilogue and the 134 MB copy are
// the H200 measurements of issue 18. Skipped without a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dice/runtime/cuda_driver.h"
#include "gpu_tune_util.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

struct Case {
  const char* name;
  const char* ir;
  std::vector<const char*> inputs;
  int channels_last_input;  // -1: none
  int transposes;           // transpose candidates expected (scalar t32, t64 + vectorised ones)
};

// relu(x + b) of a channels_last x, then the layout copy to NCHW (a conv
// region's exit fused into its epilogue); and a conv region's entry copy.
constexpr const char* kExitF32 =
    "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\n%4 = contiguous(%3)\n"
    "output %4\n";
constexpr const char* kExitBf16 =
    "dice-ir v1\ninput %0 bf16 rank=4\ninput %1 bf16 rank=3\n%2 = add(%0, %1)\n%3 = relu(%2)\n%4 = contiguous(%3)\n"
    "output %4\n";
constexpr const char* kExitCastF32 =
    "dice-ir v1\ninput %0 bf16 rank=4\ninput %1 f32 rank=3\n%2 = cast(%0) i=0\n%3 = add(%2, %1)\n%4 = relu(%3)\n"
    "%5 = contiguous(%4)\noutput %5\n";
constexpr const char* kAddF32 =
    "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=4\n%2 = add(%0, %1)\n%3 = contiguous(%2)\noutput %3\n";

const std::vector<Case>& Cases() {
  // Vectorised variants (t32v*, t64v*, t64v*_b128) join t32 and t64 when a
  // side's width is provable (families.h: TransposeVectorWidths).
  static const std::vector<Case> cases = {
      // C = 3: scalar loads; W = 126: float2 stores (t32v1x2, ...)
      {"bias_relu_cl_to_nchw_f32_partial", kExitF32, {"2x3x5x126:f32", "3x1x1:f32"}, 0, 5},
      // C = 96: 8 x bf16 loads (t32: 4); W = 31: scalar stores
      {"bias_relu_cl_to_nchw_bf16_partial", kExitBf16, {"4x96x33x31:bf16", "96x1x1:bf16"}, 0, 5},
      // C = 3, W = 125: nothing provable, the scalar tiles only
      {"bias_relu_cl_to_nchw_f32_odd", kExitF32, {"2x3x5x125:f32", "3x1x1:f32"}, 0, 2},
      {"bias_relu_cl_to_nchw_f32", kExitF32, {"8x64x56x56:f32", "64x1x1:f32"}, 0, 5},
      {"bias_relu_cl_to_nchw_bf16", kExitBf16, {"8x64x56x56:bf16", "64x1x1:bf16"}, 0, 5},
      // bf16 in (8 per load), f32 out (4 per store)
      {"cast_bias_relu_cl_bf16_to_nchw_f32", kExitCastF32, {"8x64x56x56:bf16", "64x1x1:f32"}, 0, 5},
      // y contiguous like the output: read float4 in the store phase
      {"add_cl_and_nchw_to_nchw_f32", kAddF32, {"8x64x56x56:f32", "8x64x56x56:f32"}, 0, 5},
      // level-2 task 1's epilogue at a quarter of its batch (260 MB in, 260 MB out): float4 loads, float2 stores
      {"bias_relu_cl_to_nchw_f32_large", kExitF32, {"32x128x126x126:f32", "128x1x1:f32"}, 0, 5},
      // level-2 task 5's W = 513 at an eighth of its batch and a quarter of
      // its H (68 MB each way): a 64-wide tile leaves one of width 1 per row
      {"bias_relu_cl_to_nchw_f32_w513", kExitF32, {"4x64x129x513:f32", "64x1x1:f32"}, 0, 5},
      {"copy_nchw_to_cl_bf16", "dice-ir v1\ninput %0 bf16 rank=4\n%1 = contiguous(%0) i=1\noutput %1\n",
       {"8x64x56x58:bf16"}, -1, 5},
      // level-2 task 1's entry copy at a quarter of its batch (134 MB each way)
      {"copy_nchw_to_cl_f32_large", "dice-ir v1\ninput %0 f32 rank=4\n%1 = contiguous(%0) i=1\noutput %1\n",
       {"32x64x128x128:f32"}, -1, 5},
  };
  return cases;
}

TEST(TransposeGpu, TransposeCandidatesPassTheVerifier) {
  auto dev = runtime::QueryDevice(0);
  if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
  const TargetInfo target = runtime::TargetForDevice(0);
  auto tuner = tmpl_test::TemplateTuner(16);  // the tiles over merged axes ("_flat") too
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto task = tmpl_test::ServedTask(c.ir, c.inputs, target, c.channels_last_input);
    ASSERT_TRUE(task.has_value());
    auto report = tuner->Tune(*task);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    const double bytes = tmpl_test::MovedBytes(*task);
    auto tbps = [&](double us) { return us > 0 ? bytes / (us * 1e6) : 0.0; };
    int transposes = 0, flat = 0;
    for (const auto& o : report->outcomes) {
      if (o.origin.find("/transpose_t") == std::string::npos) continue;
      const bool merged = tmpl_test::IsFlatOrigin(o.origin);
      ++(merged ? flat : transposes);
      EXPECT_TRUE(runtime::IsVerified(o.outcome)) << o.origin << ": " << o.outcome << " " << o.error;
      std::printf("[transpose-gpu] %-36s %-44s %9.2f us %6.2f TB/s\n", c.name, o.origin.c_str(), o.time_us,
                  tbps(o.time_us));
    }
    EXPECT_EQ(transposes, c.transposes) << "every tile variant is tried";
    // (H, W) is one walk in both layouts of every case: the merged tiles are tried as well.
    EXPECT_GE(flat, 2) << "the tiles over merged axes are tried";
    std::printf("[transpose-gpu] %-36s baseline %9.2f us (%.2f TB/s)  best %9.2f us  speedup %5.2fx  %s  "
                "(best %.2f TB/s)\n",
                c.name, report->baseline_us, tbps(report->baseline_us), report->best_us, report->speedup,
                report->winner_origin.c_str(), tbps(report->best_us));
  }
}

}  // namespace
}  // namespace dice::generator
