// The SDAR decoder's fusion groups served by dice's own runtime
// (sdar_served_groups.h, SdarModelOptions::serve_groups) on CUDA (ctest
// label `gpu`; each test skips without a device): in tune-sync mode with a
// fresh cache the groups are tuned at load and served; f32 logits stay
// within 1e-4 of the unfused LibTorch path; greedy tokens are equal with
// CUDA graphs on and off; a second model in cache mode is served the same
// groups (the runtime's loaded winners of this process; a new process would
// read them from the cache the first one filled). The groups include q/k
// RMSNorm + RoPE (qk_norm_rope.q / .k: the IR's rotate_half, pushed down to
// the row template's loads).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <string>

#include "greedy_tokens_compare.h"
#include "tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/sdar_served_groups.h"
#include "dice/torch_ext/optimize.h"

namespace dice::generator {
namespace {

#define DICE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

// Issue 19 item 6: f32 logits of the served groups against the unfused path.
constexpr double kF32Tolerance = 1e-4;

SdarConfig MidConfig() {
  SdarConfig c = dice::testing::TinySdarConfig(512, 256, /*tie_word_embeddings=*/false);
  c.hidden_size = 512;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  c.intermediate_size = 1024;
  return c;
}

// The process's dice mode and a cache of this test's own.
void UseMode(torch_ext::Mode mode) {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("dice_sdar_served_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
  }();
  torch_ext::Options o = torch_ext::GetRuntimeOptions();
  o.mode = mode;
  o.cache_dir = dir;
  o.tune.budget_s = 120;
  torch_ext::SetRuntimeOptions(o);
}

SdarModel Make(torch::ScalarType dtype, bool fuse, bool serve) {
  SdarModelOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.dtype = dtype;
  o.fuse_elementwise = fuse;
  o.serve_groups = serve;
  o.serve_rows = {4, 8};  // batch 1 and 2 denoising steps
  auto m = SdarModel::Random(MidConfig(), o, 21);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

void PrintNotes(const SdarModel& m) {
  if (m.served_groups() == nullptr) return;
  for (const auto& n : m.served_groups()->notes()) std::printf("  %s\n", n.c_str());
}

TEST(SdarServedGroupsGpuTest, TunedAtLoadAndServedToASecondModel) {
  DICE_REQUIRE_CUDA();
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel tuned = Make(torch::kFloat32, true, true);
  ASSERT_NE(tuned.served_groups(), nullptr);
  PrintNotes(tuned);
  for (SdarGroup g : {SdarGroup::kRmsNorm, SdarGroup::kAddRmsNorm, SdarGroup::kSiluMul, SdarGroup::kQNormRope,
                      SdarGroup::kKNormRope}) {
    EXPECT_TRUE(tuned.served_groups()->Serves(g, 4)) << SdarGroupName(g);
    EXPECT_TRUE(tuned.served_groups()->Serves(g, 8)) << SdarGroupName(g);
  }
  UseMode(torch_ext::Mode::kCache);
  const SdarModel cached = Make(torch::kFloat32, true, true);
  ASSERT_NE(cached.served_groups(), nullptr);
  PrintNotes(cached);
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kAddRmsNorm, 8));
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kSiluMul, 8));
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kQNormRope, 8));
}

TEST(SdarServedGroupsGpuTest, Float32LogitsMatchTheUnfusedPath) {
  DICE_REQUIRE_CUDA();
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel served = Make(torch::kFloat32, true, true), plain = Make(torch::kFloat32, false, false);
  ASSERT_NE(served.served_groups(), nullptr);
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kAddRmsNorm, 8));
  // q/k RMSNorm + RoPE served too (rotate_half in the row template); the
  // K/V cache store is then the unfused path's copy.
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kQNormRope, 8));
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kKNormRope, 8));
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  torch::manual_seed(4);
  auto prompt = torch::randint(0, 500, {2, 12}, opts);
  auto step = torch::randint(0, 511, {2, 4}, opts);  // 8 rows: the served shape
  std::vector<torch::Tensor> out[2];
  int i = 0;
  for (const SdarModel* m : {&served, &plain}) {
    auto cache = m->NewCache(2, 64);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(m->Forward(prompt, &*cache, /*commit=*/true, /*compute_logits=*/false).ok());
    auto s = m->Forward(step, &*cache);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    out[i++].push_back(s->cpu());
  }
  const double err = (out[0][0] - out[1][0]).abs().max().item<double>();
  std::printf("f32 served step: max |served - unfused| = %.3g\n", err);
  EXPECT_LE(err, kF32Tolerance);
}

TEST(SdarServedGroupsGpuTest, GreedyTokensEqualWithGraphsOnAndOff) {
  DICE_REQUIRE_CUDA();
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel served = Make(torch::kFloat32, true, true), plain = Make(torch::kFloat32, false, false);
  testing::ExpectSameGreedyTokens(served, plain, {1, 2});
  PrintNotes(served);
}

}  // namespace
}  // namespace dice::generator
