// multi_device_gpu_test.cc — (label gpu; needs 2 GPUs) one process serves
// the same model on cuda:0 and cuda:1 (issue 22): winners tuned by a worker
// bound to the tensors' GPU (by UUID), loaded into each device's context and
// launched on its current stream; outputs equal eager on each device; the
// winners tuned on cuda:0 hit on cuda:1 (same GPU model: same task keys), and
// a model moved from cuda:0 to cuda:1 is served on the new device. Skips
// without a GPU, and with one GPU (saying so).
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dice/runtime/device_binding.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

torch::jit::Module MakeModel() {
  torch::jit::Module m("MultiDeviceModel");
  m.define(R"(
def forward(self, x, b):
    y = torch.relu(x * 2.0 + b)
    return torch.softmax(y, 1)
)");
  m.eval();
  return m;
}

torch::Tensor Eager(const torch::Tensor& x, const torch::Tensor& b) { return torch::softmax(torch::relu(x * 2.0 + b), 1); }

std::string TempDir() {
  char tmpl[] = "/tmp/dice-multi-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? std::string(d) : std::string();
}

// Hits and fallbacks of `groups` since the last ResetGroupStats.
std::pair<int64_t, int64_t> Count(const std::vector<GroupInfo>& groups) {
  int64_t hits = 0, fallbacks = 0;
  for (const auto& s : GetGroupStats()) {
    for (const auto& g : groups) {
      if (g.id == s.id) {
        hits += s.hits;
        fallbacks += s.fallbacks;
      }
    }
  }
  return {hits, fallbacks};
}

class MultiDeviceGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
    if (torch::cuda::device_count() < 2)
      GTEST_SKIP() << "needs 2 GPUs (found " << torch::cuda::device_count()
                   << "): run on the nvidia-h200-x2 machine (scripts/gpu_multi_check.sh)";
    EnsureRegistered();
    dir_ = TempDir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) [[maybe_unused]] const int rc = std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string dir_;
};

TEST_F(MultiDeviceGpu, SameModelOnTwoDevicesServesWinnersOnEachEqualToEager) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const torch::Tensor x0 = torch::randn({512, 1000}, torch::TensorOptions().device(torch::Device(torch::kCUDA, 0)));
  const torch::Tensor b0 = torch::randn({1000}, torch::TensorOptions().device(torch::Device(torch::kCUDA, 0)));
  const torch::Tensor x1 = x0.to(torch::Device(torch::kCUDA, 1));
  const torch::Tensor b1 = b0.to(torch::Device(torch::kCUDA, 1));
  ASSERT_EQ(c10::cuda::current_device(), 0) << "the test starts with cuda:0 current, as a user's process does";

  Options options;
  options.mode = Mode::kCache;
  options.cache_dir = dir_;
  options.tune.budget_s = 30;

  // Tune on cuda:0 (the worker is bound to device 0's UUID).
  torch::jit::Module on0 = MakeModel();
  options.example_inputs = {x0, b0};
  auto rep0 = optimize(on0, options);
  ASSERT_TRUE(rep0.ok()) << rep0.status().ToString();
  auto tuned = TuneGroups(on0, {x0, b0}, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  int winners = 0;
  for (const auto& r : *tuned) winners += r.speedup > 0 ? 1 : 0;
  ASSERT_GE(winners, 1) << "no winner to serve";
  auto table = runtime::QueryDeviceTable();
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (const auto& r : *tuned) {
    if (!r.from_cache && !r.worker_device_uuid.empty()) {
      EXPECT_EQ(r.worker_device_uuid, (*table)[0].uuid);
    }
  }

  // A second copy on cuda:1, cache mode: the same keys, loaded into device 1's context.
  torch::jit::Module on1 = MakeModel();
  options.example_inputs = {x1, b1};
  auto rep1 = optimize(on1, options);
  ASSERT_TRUE(rep1.ok()) << rep1.status().ToString();
  SetRuntimeOptions(options);

  ResetGroupStats();
  torch::Tensor out0, out1;
  for (int i = 0; i < 3; ++i) {
    out0 = on0.forward({x0, b0}).toTensor();
    out1 = on1.forward({x1, b1}).toTensor();
  }
  torch::cuda::synchronize(0);
  torch::cuda::synchronize(1);
  EXPECT_EQ(out0.device(), x0.device());
  EXPECT_EQ(out1.device(), x1.device());
  EXPECT_TRUE(torch::allclose(out0, Eager(x0, b0), 1e-5, 1e-6)) << (out0 - Eager(x0, b0)).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(out1, Eager(x1, b1), 1e-5, 1e-6)) << (out1 - Eager(x1, b1)).abs().max().item<double>();
  auto [hits0, fb0] = Count(rep0->groups);
  auto [hits1, fb1] = Count(rep1->groups);
  EXPECT_GT(hits0, 0) << "cuda:0 should launch its winners";
  EXPECT_GT(hits1, 0) << "cuda:1 should serve the winners tuned on cuda:0 (same GPU model, same keys)";
  EXPECT_EQ(fb1, 0) << "every group on cuda:1 should be a hit";
  EXPECT_TRUE(torch::equal(out0.cpu(), out1.cpu())) << "one cubin on two H200s: the same bits";

  // The cuda:0 model moved to cuda:1 (no parameters: its inputs move) is served there.
  ResetGroupStats();
  torch::Tensor moved = on0.forward({x1, b1}).toTensor();
  torch::cuda::synchronize(1);
  EXPECT_EQ(moved.device(), x1.device());
  EXPECT_TRUE(torch::allclose(moved, Eager(x1, b1), 1e-5, 1e-6));
  auto [hits_moved, fb_moved] = Count(rep0->groups);
  EXPECT_GT(hits_moved, 0);
  EXPECT_EQ(fb_moved, 0) << "a model moved to cuda:1 must be served there, not fall back";
}

// Tuning inputs on cuda:1 run in a worker bound to cuda:1's UUID, not cuda:0.
TEST_F(MultiDeviceGpu, TuningTensorsOfDevice1RunsTheWorkerOnDevice1) {
  torch::NoGradGuard no_grad;
  const auto on1 = torch::TensorOptions().device(torch::Device(torch::kCUDA, 1));
  const torch::Tensor x = torch::randn({256, 2048}, on1);
  const torch::Tensor b = torch::randn({2048}, on1);
  Options options;
  options.mode = Mode::kCache;
  options.cache_dir = dir_;
  options.tune.budget_s = 30;
  options.example_inputs = {x, b};
  torch::jit::Module m = MakeModel();
  ASSERT_TRUE(optimize(m, options).ok());
  auto tuned = TuneGroups(m, {x, b}, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  auto table = runtime::QueryDeviceTable();
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  int measured = 0;
  for (const auto& r : *tuned) {
    if (r.worker_device_uuid.empty()) continue;
    ++measured;
    EXPECT_EQ(r.worker_device_uuid, (*table)[1].uuid) << "the worker measured on another GPU than the tensors'";
  }
  EXPECT_GE(measured, 1);
}

}  // namespace
}  // namespace dice::torch_ext
