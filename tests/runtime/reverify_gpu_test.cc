// Re-verification of pulled kernels on the GPU (DESIGN.md "HTTP sharing"):
// an unverified cache row is compiled here, verified and timed as the only
// candidate (no generator asked); a wrong kernel is recorded as an attempt
// and its row removed, never served; a correct one is stored verified with
// the local times when it beats the baseline by the margin (else removed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "relu_graph.h"
#include "dice/cache/store.h"
#include "dice/core/generator.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

constexpr int kN = 1 << 24;

// A generator that must not be asked while a pulled kernel is re-verified.
class CountingGenerator : public KernelGenerator {
 public:
  std::string name() const override { return "counting"; }
  Expected<std::vector<Candidate>> Generate(const Task&, int) override {
    ++calls;
    return std::vector<Candidate>{};
  }
  int calls = 0;
};

Task ReluTask() {
  ir::Graph g = runtime_test::ReluGraph();
  auto task = Task::Make(g, {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {kN})}, TargetForDevice(0));
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

// A pulled row whose kernel computes `body` (a float expression of x[i]).
cache::WinnerRecord Pulled(const Task& task, const std::string& body) {
  LaunchPlan plan;
  plan.launches.push_back(KernelLaunch{"relu_pulled", {static_cast<uint32_t>((kN + 255) / 256), 1, 1}, {256, 1, 1}, 0});
  cache::WinnerRecord w;
  w.task_key = task.Key();
  w.graph_canonical = ir::Canonical(task.graph);
  w.input_specs = task.inputs[0].ToString();
  w.arch = task.target.arch;
  w.gpu_name = "elsewhere";
  w.origin = "template:pulled";
  w.source = "extern \"C\" __global__ void relu_pulled(const float* __restrict__ x, float* __restrict__ y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < " + std::to_string(kN) + ") y[i] = " + body + ";\n}\n";
  w.launch_plan_json = plan.ToJson();
  Candidate c;
  c.source = w.source;
  c.plan = plan;
  w.candidate_hash = c.Hash();
  w.cubin = "bytes from another machine";
  w.baseline_us = 100;
  w.best_us = 1;
  w.speedup = 100;  // a claim the local GPU must confirm
  w.versions_json = "{}";
  w.verified = false;
  w.pulled_from = "http://cache.example:8470";
  return w;
}

std::unique_ptr<cache::Store> OpenStore() {
  std::string tmpl = ::testing::TempDir() + "dice-reverify-gpu-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  auto store = cache::Store::Open(cache::DatabasePath(tmpl));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(ReverifyGpu, WrongPulledKernelIsRecordedAndRemovedNeverServed) {
  if (!CudaDriver::Get().ok()) GTEST_SKIP() << "no GPU: " << CudaDriver::Get().status().ToString();
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Task task = ReluTask();
  ASSERT_TRUE(*store->PutWinner(Pulled(task, "x[i]")));  // identity, not relu
  auto gen = std::make_shared<CountingGenerator>();
  Tuner tuner(store.get(), {gen}, TuneOptions{});
  auto report = tuner.Tune(task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(gen->calls, 0) << "re-verification must not ask the generators";
  ASSERT_EQ(report->outcomes.size(), 1u);
  EXPECT_EQ(report->outcomes[0].outcome, Outcome::kVerifyFailed) << report->outcomes[0].error;
  EXPECT_TRUE(report->winner_origin.empty());
  EXPECT_FALSE(store->GetWinner(task.Key())->has_value()) << "a failed pulled kernel must not stay in the cache";
  auto attempts = store->ListAttempts(task.Key());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].outcome, "verify_failed");
}

TEST(ReverifyGpu, CorrectPulledKernelIsRetimedHereAndStoredVerifiedOrDropped) {
  if (!CudaDriver::Get().ok()) GTEST_SKIP() << "no GPU: " << CudaDriver::Get().status().ToString();
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Task task = ReluTask();
  ASSERT_TRUE(*store->PutWinner(Pulled(task, "fmaxf(x[i], 0.0f)")));
  auto gen = std::make_shared<CountingGenerator>();
  Tuner tuner(store.get(), {gen}, TuneOptions{});
  auto report = tuner.Tune(task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(gen->calls, 0);
  ASSERT_EQ(report->outcomes.size(), 1u);
  const Outcome outcome = report->outcomes[0].outcome;
  ASSERT_TRUE(outcome == Outcome::kWinner || outcome == Outcome::kSlower) << outcome << ": " << report->outcomes[0].error;
  auto row = store->GetWinner(task.Key());
  ASSERT_TRUE(row.ok());
  if (outcome == Outcome::kWinner) {
    ASSERT_TRUE(row->has_value());
    EXPECT_TRUE((**row).verified);
    EXPECT_EQ((**row).pulled_from, "http://cache.example:8470");
    EXPECT_NE((**row).cubin, "bytes from another machine") << "the cubin is the one compiled here";
    EXPECT_LT((**row).speedup, 100.0) << "times are the local ones, not the server's claim";
  } else {
    EXPECT_FALSE(row->has_value()) << "not faster here: dropped";
  }
}

}  // namespace
}  // namespace dice::runtime
