// GPU: every template candidate for a broad set of fusion groups must pass
// the real verifier (worker process, random + scaled inputs, poisoned
// outputs, repeat-run agreement) — a template that produces a wrong, racy or
// crashing kernel is a generator bug. Speedups are printed, not asserted
// (performance targets live in bench/). Skipped without a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dice/generator/templates.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"

namespace dice::generator {
namespace {

struct Case {
  const char* name;
  const char* ir;
  std::vector<const char*> inputs;
};

// Groups written in the canonical IR text (they also exercise the parser).
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"relu", "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n", {"1000x1027:f32"}},
      {"gelu_tanh_bf16", "dice-ir v1\ninput %0 bf16 rank=2\n%1 = gelu(%0) i=1\noutput %1\n", {"512x4096:bf16"}},
      {"bias_gelu_scale",
       "dice-ir v1\ninput %0 f32 rank=2\ninput %1 f32 rank=1\n%2 = add(%0, %1)\n%3 = gelu(%2)\n%4 = const(0.5)\n"
       "%5 = mul(%3, %4)\noutput %5\n",
       {"1024x768:f32", "768:f32"}},
      {"broadcast_sub_f16", "dice-ir v1\ninput %0 f16 rank=2\ninput %1 f16 rank=2\n%2 = sub(%0, %1)\noutput %2\n",
       {"1024x1:f16", "1x512:f16"}},
      {"log_sqrt_domain", "dice-ir v1\ninput %0 f32 rank=1\n%1 = log(%0)\n%2 = sqrt(%0)\n%3 = add(%1, %2)\noutput %3\n",
       {"100003:f32"}},
      {"softplus_elu_selu",
       "dice-ir v1\ninput %0 f32 rank=2\n%1 = softplus(%0) s=[1,20]\n%2 = elu(%1) s=[1,1,1]\n%3 = selu(%2)\noutput %3\n",
       {"256x1000:f32"}},
      {"hardswish_clamp_mish",
       "dice-ir v1\ninput %0 f16 rank=2\n%1 = hardswish(%0)\n%2 = clamp(%1) s=[-0.5,2]\n%3 = mish(%2)\noutput %3\n",
       {"333x777:f16"}},
      {"sum_dim1", "dice-ir v1\ninput %0 f32 rank=3\n%1 = sum(%0) dims=[1]\noutput %1\n", {"16x256x64:f32"}},
      {"mean_last_keepdim", "dice-ir v1\ninput %0 f32 rank=2\n%1 = mean(%0) dims=[1] keepdim=1\noutput %1\n",
       {"4096x1000:f32"}},
      {"amax_dim0", "dice-ir v1\ninput %0 f32 rank=2\n%1 = amax(%0) dims=[0]\noutput %1\n", {"777x1024:f32"}},
      {"sum_all", "dice-ir v1\ninput %0 f32 rank=2\n%1 = sum(%0)\noutput %1\n", {"1024x1024:f32"}},
      {"logsumexp_last", "dice-ir v1\ninput %0 f32 rank=2\n%1 = logsumexp(%0) dims=[1]\noutput %1\n", {"512x2048:f32"}},
      {"norm2_last", "dice-ir v1\ninput %0 f32 rank=2\n%1 = norm(%0) dims=[1] s=[2]\noutput %1\n", {"512x2048:f32"}},
      {"softmax_last", "dice-ir v1\ninput %0 f32 rank=2\n%1 = softmax(%0) dims=[1]\noutput %1\n", {"4096x4096:f32"}},
      {"softmax_dim1_of_3", "dice-ir v1\ninput %0 f32 rank=3\n%1 = softmax(%0) dims=[1]\noutput %1\n",
       {"8x300x64:f32"}},
      // Cluster-per-row variants: q2 (256 KB rows) and q8 (1.5 MB rows, 4 rows per cluster).
      {"softmax_long_rows", "dice-ir v1\ninput %0 f32 rank=2\n%1 = softmax(%0) dims=[1]\noutput %1\n", {"256x65536:f32"}},
      {"log_softmax_wide", "dice-ir v1\ninput %0 f32 rank=2\n%1 = log_softmax(%0) dims=[1]\noutput %1\n",
       {"64x393216:f32"}},
      {"layer_norm_rows_16k", "dice-ir v1\ninput %0 f32 rank=2\n%1 = layer_norm(%0) i=1 s=[1.0000000000000001e-05]\noutput %1\n",
       {"512x16384:f32"}},
      // Tiles over an inner reduced axis; 8 x 999 and 4 x 33 x 31 rows leave spare lanes in the last tile.
      {"amax_dim1_ragged", "dice-ir v1\ninput %0 f32 rank=3\n%1 = amax(%0) dims=[1]\noutput %1\n", {"8x1024x999:f32"}},
      {"rmsnorm_channels",
       "dice-ir v1\ninput %0 f32 rank=4\n%1 = pow_scalar(%0) s=[2]\n%2 = mean(%1) dims=[1] keepdim=1\n%3 = const(1e-05)\n"
       "%4 = add(%2, %3)\n%5 = sqrt(%4)\n%6 = div(%0, %5)\noutput %6\n",
       {"4x64x33x31:f32"}},
      {"sigmoid_sum_few_rows", "dice-ir v1\ninput %0 f32 rank=2\n%1 = sigmoid(%0)\n%2 = sum(%1) dims=[1] keepdim=1\noutput %2\n",
       {"128x32768:f32"}},
      {"log_softmax_bf16", "dice-ir v1\ninput %0 bf16 rank=2\n%1 = log_softmax(%0) dims=[1]\noutput %1\n",
       {"1024x1000:bf16"}},
      {"layer_norm_affine",
       "dice-ir v1\ninput %0 f32 rank=3\ninput %1 f32 rank=1\ninput %2 f32 rank=1\n%3 = layer_norm(%0, %1, %2) i=1 "
       "s=[1.0000000000000001e-05]\noutput %3\n",
       {"8x512x768:f32", "768:f32", "768:f32"}},
      {"layer_norm_long_rows", "dice-ir v1\ninput %0 f32 rank=2\n%1 = layer_norm(%0) i=1 s=[1.0000000000000001e-05]\noutput %1\n",
       {"16x262144:f32"}},
      {"group_norm",
       "dice-ir v1\ninput %0 f32 rank=4\ninput %1 f32 rank=1\ninput %2 f32 rank=1\n%3 = group_norm(%0, %1, %2) i=8 "
       "s=[1.0000000000000001e-05]\noutput %3\n",
       {"16x64x32x32:f32", "64:f32", "64:f32"}},
      {"rmsnorm_chain",
       "dice-ir v1\ninput %0 f32 rank=2\n%1 = pow_scalar(%0) s=[2]\n%2 = mean(%1) dims=[1] keepdim=1\n%3 = const(1e-05)\n"
       "%4 = add(%2, %3)\n%5 = sqrt(%4)\n%6 = div(%0, %5)\noutput %6\n",
       {"2048x4096:f32"}},
  };
  return cases;
}

TEST(TemplatesGpu, TargetForDeviceCarriesTheDeviceFacts) {
  auto dev = runtime::QueryDevice(0);
  if (!dev.ok()) GTEST_SKIP() << "no GPU: " << dev.status().ToString();
  const TargetInfo t = runtime::TargetForDevice(0);
  std::printf("%s %s: %d SMs, L2 %lld B, smem %d B/SM %d B/block (opt-in), %d threads/SM, clusters %d\n",
              t.gpu_name.c_str(), t.arch.c_str(), t.sm_count, static_cast<long long>(t.l2_bytes),
              t.smem_per_sm_bytes, t.smem_per_block_optin_bytes, t.max_threads_per_sm, t.cluster_launch);
  EXPECT_EQ(t.arch, dev->arch);
  EXPECT_EQ(t.sm_count, dev->sm_count);
  EXPECT_GT(t.sm_count, 0);
  EXPECT_GT(t.l2_bytes, 0);
  EXPECT_GE(t.smem_per_sm_bytes, t.smem_per_block_optin_bytes);
  EXPECT_GE(t.max_threads_per_sm, 1024);
  if (t.arch == "sm_90") {
    EXPECT_TRUE(t.cluster_launch);
  }
  // An H100/H200 SXM (sm_90, 132 SMs) is the compile-only default target: the
  // defaults written in task.h must be what its driver reports, except the
  // L2, which is 50 MiB on the H100 SXM (the default) and 60 MiB on the H200.
  if (t.arch == "sm_90" && t.sm_count == 132) {
    const TargetInfo d;
    EXPECT_TRUE(t.l2_bytes == d.l2_bytes || t.l2_bytes == (int64_t{60} << 20)) << t.l2_bytes;
    EXPECT_EQ(t.smem_per_sm_bytes, d.smem_per_sm_bytes);
    EXPECT_EQ(t.smem_per_block_optin_bytes, d.smem_per_block_optin_bytes);
    EXPECT_EQ(t.max_threads_per_sm, d.max_threads_per_sm);
    EXPECT_EQ(t.cluster_launch, d.cluster_launch);
  }
}

TEST(TemplatesGpu, EveryTemplateCandidatePassesTheVerifier) {
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
    auto task = Task::Make(*graph, inputs, target);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    auto report = tuner.Tune(*task);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_GT(report->baseline_us, 0);
    EXPECT_GE(report->verified, 1);
    for (const auto& o : report->outcomes) {
      EXPECT_TRUE(runtime::IsVerified(o.outcome))
          << o.origin << ": " << o.outcome << " " << o.error;
    }
    std::printf("[templates-gpu] %-22s baseline %9.2f us  best %9.2f us  speedup %5.2fx  %d/%d/%d  %s\n", c.name,
                report->baseline_us, report->best_us, report->speedup, report->tried, report->compiled,
                report->verified, report->winner_origin.c_str());
  }
}

}  // namespace
}  // namespace dice::generator
