// GPU: the skinny-GEMM family (issue 19 item 2) through the real Tuner ->
// WorkerPool -> dice-worker path on the SDAR-4B decode shapes (4 rows: one
// diffusion block of 4 tokens at batch 1; bf16): every candidate is verified
// against at::linear and timed against it; prints the best candidate's weight
// streaming rate (bytes of w / µs) beside eager's (cuBLAS through
// at::linear). A DAG epilogue (y * sigmoid(y) * 2 after linear + bias) is
// verified on every variant, split-K included. Skipped without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/generator/fixed_generator.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/tuner.h"

namespace dice::generator {
namespace {

Expected<Task> DecodeLinear(int64_t m, int64_t k, int64_t n) {
  auto graph = ir::Parse("dice-ir v1\ninput %0 bf16 rank=2\ninput %1 bf16 rank=2\n%2 = linear(%0, %1)\noutput %2\n");
  if (!graph.ok()) return graph.status();
  return Task::Make(*graph,
                    {ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {m, k}),
                     ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {n, k})},
                    runtime::TargetForDevice(0));
}

TEST(GemvGpu, DecodeShapesAreVerifiedAndStreamTheWeight) {
  auto drv = runtime::CudaDriver::Get();
  if (!drv.ok()) GTEST_SKIP() << "no GPU: " << drv.status().ToString();
  runtime::TuneOptions o;
  o.max_candidates = 8;
  o.budget_s = 120;
  // q/k/v-like, gate/up-like and down-like projections of the SDAR-4B layout.
  const std::vector<std::array<int64_t, 3>> shapes = {{4, 2560, 1024}, {4, 2560, 4096}, {4, 2560, 9728}, {4, 9728, 2560}};
  for (const auto& [m, k, n] : shapes) {
    auto task = DecodeLinear(m, k, n);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    // Only the gemv candidates (the gemm family's CUTLASS builds take minutes).
    auto all = TemplateGenerator().Generate(*task, 8);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    std::vector<Candidate> mine;
    for (const auto& c : *all) {
      if (c.origin.rfind("template:gemv/", 0) == 0) mine.push_back(c);
    }
    runtime::Tuner tuner(nullptr, {std::make_shared<FixedGenerator>(mine)}, o);
    auto report = tuner.Tune(*task);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    int gemv = 0;
    double best = 0;
    std::string best_origin;
    for (const auto& c : report->outcomes) {
      if (c.origin.rfind("template:gemv/", 0) != 0) continue;
      ++gemv;
      EXPECT_TRUE(runtime::IsVerified(c.outcome)) << c.origin << ": " << c.outcome << " " << c.error;
      if (runtime::IsVerified(c.outcome) && c.time_us > 0 && (best == 0 || c.time_us < best)) {
        best = c.time_us;
        best_origin = c.origin;
      }
    }
    EXPECT_GE(gemv, 4) << "M=" << m << " K=" << k << " N=" << n;
    ASSERT_GT(best, 0);
    const double wbytes = static_cast<double>(n * k * 2);
    std::printf("[gemv-gpu] M=%lld K=%lld N=%lld  best %-28s %8.2f us %6.2f TB/s   eager %8.2f us %6.2f TB/s  (%.2fx)\n",
                (long long)m, (long long)k, (long long)n, best_origin.c_str(), best, wbytes / best / 1e6,
                report->baseline_us, wbytes / report->baseline_us / 1e6, report->baseline_us / best);
  }
}

// fusion_policy.h rule 4's DAG epilogue on the decode shape: every gemv
// variant applies y * sigmoid(y) * 2 (y = x w^T + b) where it stores, and
// the verifier compares it with the reference executor's ops.
TEST(GemvGpu, SwishDagEpilogueIsVerifiedOnEveryVariant) {
  auto drv = runtime::CudaDriver::Get();
  if (!drv.ok()) GTEST_SKIP() << "no GPU: " << drv.status().ToString();
  auto graph = ir::Parse(
      "dice-ir v1\ninput %0 bf16 rank=2\ninput %1 bf16 rank=2\ninput %2 bf16 rank=1\n%3 = linear(%0, %1, %2)\n"
      "%4 = sigmoid(%3)\n%5 = mul(%3, %4)\n%6 = const(2.0)\n%7 = mul(%5, %6)\noutput %7\n");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  auto task = Task::Make(*graph,
                         {ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {4, 2560}),
                          ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {1024, 2560}),
                          ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {1024})},
                         runtime::TargetForDevice(0));
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  auto all = TemplateGenerator().Generate(*task, 8);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<Candidate> mine;
  for (const auto& c : *all) {
    if (c.origin.rfind("template:gemv/", 0) == 0) mine.push_back(c);
  }
  ASSERT_GE(mine.size(), 4u);
  runtime::TuneOptions o;
  o.max_candidates = 8;
  o.budget_s = 120;
  runtime::Tuner tuner(nullptr, {std::make_shared<FixedGenerator>(mine)}, o);
  auto report = tuner.Tune(*task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->outcomes.size(), mine.size());
  for (const auto& c : report->outcomes)
    EXPECT_TRUE(runtime::IsVerified(c.outcome)) << c.origin << ": " << c.outcome << " " << c.error;
}

}  // namespace
}  // namespace dice::generator
