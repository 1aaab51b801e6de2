// extension_winner_gpu_test.cc — (label gpu) an extension-form winner
// (nvcc-built shared object calling dice_forward) tuned for a TorchScript
// model is cached and then served on a second run: a fresh copy of the model
// in cache mode dlopens the cached library and calls dice_forward for the
// group (hits, no fallbacks), and its outputs equal PyTorch's. The generator
// is a fixed hand-written relu extension; the margin is made negative so a
// verified candidate wins even when it only ties PyTorch. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/fixed_generator.h"
#include "../runtime/extension_sources.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

torch::jit::Module MakeModel() {
  torch::jit::Module m("ReluModel");
  m.define("def forward(self, x):\n    return torch.relu(x)\n");
  m.eval();
  return m;
}

TEST(ExtensionWinnerGpu, CachedExtensionWinnerIsServedOnASecondRun) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  EnsureRegistered();
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({1 << 20}, torch::TensorOptions().device(torch::kCUDA));
  const std::vector<c10::IValue> inputs = {x};
  char tmpl[] = "/tmp/dice-extwin-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;

  SetGenerators(
      {std::make_shared<runtime_test::FixedGenerator>(std::vector<Candidate>{runtime_test::GoodReluExtension()})});
  Options options;
  options.mode = Mode::kCache;
  options.cache_dir = dir;
  options.example_inputs = inputs;
  options.tune.budget_s = 400;
  options.tune.candidate_timeout_s = 120;
  options.tune.margin = -100;  // any verified candidate wins

  torch::jit::Module first = MakeModel();
  auto rep1 = optimize(first, options);
  ASSERT_TRUE(rep1.ok()) << rep1.status().ToString();
  ASSERT_FALSE(rep1->groups.empty());
  auto tuned = TuneGroups(first, inputs, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  ASSERT_EQ(tuned->size(), 1u);
  std::string outcomes;
  for (const auto& o : (*tuned)[0].outcomes) outcomes += o.origin + ": " + std::string(runtime::OutcomeName(o.outcome)) + " " + o.error + "\n";
  ASSERT_EQ((*tuned)[0].winner_origin, "ext:relu") << outcomes;
  EXPECT_GT((*tuned)[0].best_us, 0);

  torch::jit::Module second = MakeModel();
  auto rep2 = optimize(second, options);
  ASSERT_TRUE(rep2.ok()) << rep2.status().ToString();
  ResetGroupStats();
  torch::Tensor out;
  for (int i = 0; i < 3; ++i) out = second.forward(inputs).toTensor();
  int64_t hits = 0, fallbacks = 0;
  for (const auto& s : GetGroupStats()) {
    hits += s.hits;
    fallbacks += s.fallbacks;
  }
  EXPECT_GT(hits, 0) << "the cached extension winner should be served";
  EXPECT_EQ(fallbacks, 0);
  EXPECT_TRUE(torch::equal(out, torch::relu(x)));
  SetGenerators({});
  [[maybe_unused]] const int rc = std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::torch_ext
