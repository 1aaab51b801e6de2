// serve_from_cache_gpu_test.cc — (label gpu) the winners tuned for a model
// are served from the cache on a second run: a fresh copy of the model,
// optimized in cache mode (which never compiles or tunes), launches the
// cached kernels for every group (hits, no fallbacks) and its outputs equal
// the first tuned run's bit for bit. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

torch::jit::Module MakeModel() {
  torch::jit::Module m("ServeModel");
  m.define(R"(
def forward(self, x, b):
    y = torch.relu(x * 2.0 + b)
    return torch.softmax(y, 1)
)");
  m.eval();
  return m;
}

std::string TempDir() {
  char tmpl[] = "/tmp/dice-serve-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? std::string(d) : std::string();
}

TEST(ServeFromCacheGpu, SecondRunServesWinnersBitForBitWithoutTuning) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  EnsureRegistered();
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x = torch::randn({512, 1000}, opts);
  const torch::Tensor b = torch::randn({1000}, opts);
  const std::vector<c10::IValue> inputs = {x, b};
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());

  Options options;
  options.mode = Mode::kCache;
  options.cache_dir = dir;
  options.example_inputs = inputs;
  options.tune.budget_s = 30;

  // First run: tune every group into the (empty) cache.
  torch::jit::Module first = MakeModel();
  auto rep1 = optimize(first, options);
  ASSERT_TRUE(rep1.ok()) << rep1.status().ToString();
  ASSERT_FALSE(rep1->groups.empty());
  auto tuned = TuneGroups(first, inputs, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  int winners = 0;
  for (const auto& r : *tuned) winners += r.speedup > 0 ? 1 : 0;
  // relu(x*2+b) fused with the softmax replaces four PyTorch kernels.
  ASSERT_GE(winners, 1) << "no winner to serve";
  SetRuntimeOptions(options);
  ResetGroupStats();
  torch::Tensor out1;
  for (int i = 0; i < 3; ++i) out1 = first.forward(inputs).toTensor();
  int64_t first_hits = 0;
  for (const auto& s : GetGroupStats()) first_hits += s.hits;
  EXPECT_GT(first_hits, 0) << "the tuned model itself should launch its winners";

  // Second run: a fresh model in cache mode; nothing is tuned.
  torch::jit::Module second = MakeModel();
  auto rep2 = optimize(second, options);
  ASSERT_TRUE(rep2.ok()) << rep2.status().ToString();
  ResetGroupStats();
  torch::Tensor out2;
  for (int i = 0; i < 3; ++i) out2 = second.forward(inputs).toTensor();
  int64_t hits = 0, fallbacks = 0;
  for (const auto& s : GetGroupStats()) {
    for (const auto& g : rep2->groups)
      if (g.id == s.id) {
        hits += s.hits;
        fallbacks += s.fallbacks;
      }
  }
  EXPECT_GT(hits, 0);
  EXPECT_EQ(fallbacks, 0) << "every group of the second model should be a cache hit";
  ASSERT_EQ(out1.sizes(), out2.sizes());
  EXPECT_TRUE(torch::equal(out1, out2)) << "served kernels must reproduce the first run bit for bit";

  // And both agree with PyTorch itself.
  const torch::Tensor want = torch::softmax(torch::relu(x * 2.0 + b), 1);
  EXPECT_TRUE(torch::allclose(out2, want, 1e-5, 1e-6)) << (out2 - want).abs().max().item<double>();
  // Not std::filesystem::remove_all: libtorch's exported copy crashes when interposed.
  [[maybe_unused]] const int rc = std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::torch_ext
