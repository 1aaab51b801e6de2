// channels_last_gpu_test.cc — (label gpu) a convolution epilogue on
// channels_last tensors is tuned and served instead of falling back (issue
// 18 item 2): relu(x + b) with x a channels_last [8,64,56,56] f32 tensor and
// b [64,1,1], in tune-sync mode, is tuned through the worker (the templates
// lower it in memory order, the worker verifies against eager), gets a
// verified template winner, and every later call launches it: the outputs
// equal eager's and are channels_last like eager's. A contiguous call of the
// same shapes gets its own task key. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

torch::jit::Module MakeModel() {
  torch::jit::Module m("BiasReluModel");
  m.define("def forward(self, x, b):\n    return torch.relu(x + b)\n");
  m.eval();
  return m;
}

TEST(ChannelsLastGpu, BiasAddReluOnChannelsLastGetsAVerifiedTemplateWinner) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  EnsureRegistered();
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x = torch::randn({8, 64, 56, 56}, opts).contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor b = torch::randn({64, 1, 1}, opts);
  const std::vector<c10::IValue> inputs = {x, b};
  char tmpl[] = "/tmp/dice-cl-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;

  SetGenerators({std::make_shared<generator::TemplateGenerator>()});
  Options options;
  options.mode = Mode::kTuneSync;
  options.cache_dir = dir;
  options.example_inputs = inputs;
  options.tune.budget_s = 120;
  torch::jit::Module model = MakeModel();
  auto rep = optimize(model, options);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_FALSE(rep->groups.empty());
  ResetGroupStats();

  const torch::Tensor want = torch::relu(x + b);
  ASSERT_TRUE(want.is_contiguous(at::MemoryFormat::ChannelsLast));
  torch::Tensor out;
  for (int i = 0; i < 3; ++i) out = model.forward(inputs).toTensor();  // the first call tunes
  torch::cuda::synchronize();
  int64_t hits = 0;
  std::string key, reasons;
  for (const auto& s : GetGroupStats()) {
    if (s.calls == 0) continue;
    hits += s.hits;
    key = s.task_key;
    for (const auto& [why, n] : s.fallback_reasons) reasons += why + " x" + std::to_string(n) + "; ";
  }
  EXPECT_GE(hits, 2) << "the channels_last group should be served after tuning; fallbacks: " << reasons;
  EXPECT_TRUE(torch::allclose(out, want, 1e-5, 1e-6)) << (out - want).abs().max().item<double>();
  EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast)) << out.strides();
  EXPECT_EQ(out.strides(), want.strides());

  // The winner in the cache: a verified template kernel.
  ASSERT_FALSE(key.empty());
  auto store = cache::Store::Open(cache::DatabasePath(dir));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto winner = (*store)->GetWinner(key);
  ASSERT_TRUE(winner.ok()) << winner.status().ToString();
  ASSERT_TRUE(winner->has_value()) << "no winner stored for " << key;
  EXPECT_EQ((*winner)->origin.rfind("template:", 0), 0u) << (*winner)->origin;
  EXPECT_TRUE((*winner)->verified);
  EXPECT_NE((*winner)->input_specs.find("{s="), std::string::npos) << (*winner)->input_specs;

  // The contiguous call of the same shapes is another task (its own key).
  const torch::Tensor xc = x.contiguous();
  torch::Tensor outc = model.forward(std::vector<c10::IValue>{xc, b}).toTensor();
  EXPECT_TRUE(torch::allclose(outc, want, 1e-5, 1e-6));
  EXPECT_TRUE(outc.is_contiguous());
  std::vector<std::string> keys;
  for (const auto& s : GetGroupStats())
    if (s.calls > 0) keys = s.task_keys;
  EXPECT_GE(keys.size(), 2u) << "contiguous and channels_last calls must not share a task key";

  SetGenerators({});
  [[maybe_unused]] const int rc = std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::torch_ext
