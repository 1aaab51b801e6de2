// The Tuner and pulled (unverified) cache entries, CPU side: a verified
// winner is served from the cache as before; an unverified one is never
// returned as a cached winner — without a GPU the Tuner says so (kNoDevice)
// and the row stays, unverified, for a machine that can check it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "relu_graph.h"
#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

Task ReluTask() {
  ir::Graph g = runtime_test::ReluGraph();
  auto task = Task::Make(g, {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})}, TargetInfo{});
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

cache::WinnerRecord Row(const Task& task, bool verified) {
  cache::WinnerRecord w;
  w.task_key = task.Key();
  w.graph_canonical = ir::Canonical(task.graph);
  w.input_specs = task.inputs[0].ToString();
  w.arch = task.target.arch;
  w.origin = "template:elementwise/pulled";
  w.candidate_hash = "pulled";
  w.source = "extern \"C\" __global__ void k(const float* x, float* y) {}";
  w.cubin = "ELF";
  w.launch_plan_json = R"({"launches":[]})";
  w.baseline_us = 10;
  w.best_us = 5;
  w.speedup = 2;
  w.verified = verified;
  w.pulled_from = verified ? "" : "http://cache.example:8470";
  return w;
}

std::unique_ptr<cache::Store> OpenStore() {
  std::string tmpl = ::testing::TempDir() + "dice-reverify-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  auto store = cache::Store::Open(cache::DatabasePath(tmpl));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(TunerCache, VerifiedWinnerIsServedFromTheCache) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Task task = ReluTask();
  ASSERT_TRUE(*store->PutWinner(Row(task, /*verified=*/true)));
  Tuner tuner(store.get(), {std::make_shared<generator::TemplateGenerator>()}, TuneOptions{});
  auto report = tuner.Tune(task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->from_cache);
  EXPECT_EQ(report->winner_origin, "template:elementwise/pulled");
  EXPECT_DOUBLE_EQ(report->speedup, 2.0);
}

TEST(TunerCache, PulledWinnerIsNeverServedUnverifiedAndNeedsAGpuToBeChecked) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present: reverify_gpu_test covers this";
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Task task = ReluTask();
  ASSERT_TRUE(*store->PutWinner(Row(task, /*verified=*/false)));
  Tuner tuner(store.get(), {std::make_shared<generator::TemplateGenerator>()}, TuneOptions{});
  auto report = tuner.Tune(task);
  ASSERT_FALSE(report.ok()) << "an unverified entry must not come back as a cached winner";
  EXPECT_EQ(report.status().code(), StatusCode::kNoDevice) << report.status().ToString();
  auto row = store->GetWinner(task.Key());
  ASSERT_TRUE(row.ok() && row->has_value()) << "the pulled entry is kept for a machine with a GPU";
  EXPECT_FALSE((**row).verified);
}

}  // namespace
}  // namespace dice::runtime
