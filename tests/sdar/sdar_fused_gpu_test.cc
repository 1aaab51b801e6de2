// The fused elementwise kernels (sdar_fused_kernels.h) on CUDA (ctest label
// `gpu`; each test skips without a device): f32 logits within 1e-4 of the
// unfused LibTorch path (prefill with the block-causal mask, a cached
// denoising step, a merged commit), bf16 within the documented tolerance,
// greedy tokens equal with CUDA graphs on and off, and a shape the kernels
// do not take falling back to the unfused path with a message.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdio>

#include "tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {
namespace {

#define DICE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

// sdar_fused_kernels.h: only the order of the float32 sums of squares differs.
constexpr double kF32Tolerance = 1e-4;
// bf16: a rounding of one intermediate may land on the other side; relative
// to the largest logit.
constexpr double kBf16RelativeTolerance = 0.05;

// Head_dim 128 as the released models, GQA 4:1, 3 layers.
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

SdarModel Make(const SdarConfig& c, torch::ScalarType dtype, bool fuse) {
  SdarModelOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.dtype = dtype;
  o.fuse_elementwise = fuse;
  auto m = SdarModel::Random(c, o, 21);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

// Logits of a prefill of 13 tokens (mask path), then a denoising step of one
// block and a merged [committed block ; next block] forward.
std::vector<torch::Tensor> Passes(const SdarModel& m) {
  std::vector<torch::Tensor> out;
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  torch::manual_seed(4);
  auto prompt = torch::randint(0, 500, {2, 12}, opts);
  auto full = m.Forward(prompt);
  EXPECT_TRUE(full.ok()) << full.status().ToString();
  out.push_back(full->cpu());
  auto cache = m.NewCache(2, 64);
  EXPECT_TRUE(cache.ok());
  EXPECT_TRUE(m.Forward(prompt, &*cache, /*commit=*/true, /*compute_logits=*/false).ok());
  auto step = torch::randint(0, 511, {2, 4}, opts);
  auto s = m.Forward(step, &*cache);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  out.push_back(s->cpu());
  auto merged = m.Forward(torch::randint(0, 511, {2, 8}, opts), &*cache);
  EXPECT_TRUE(merged.ok()) << merged.status().ToString();
  out.push_back(merged->cpu());
  return out;
}

TEST(SdarFusedGpuTest, CudaModelUsesTheFusedKernels) {
  DICE_REQUIRE_CUDA();
  const SdarModel m = Make(MidConfig(), torch::kFloat32, true);
  EXPECT_TRUE(m.fused_elementwise()) << m.fused_elementwise_note();
  EXPECT_EQ(m.fused_elementwise_note(), "");
}

TEST(SdarFusedGpuTest, Float32LogitsMatchTheUnfusedPath) {
  DICE_REQUIRE_CUDA();
  const SdarModel fused = Make(MidConfig(), torch::kFloat32, true), plain = Make(MidConfig(), torch::kFloat32, false);
  ASSERT_TRUE(fused.fused_elementwise());
  ASSERT_FALSE(plain.fused_elementwise());
  auto a = Passes(fused), b = Passes(plain);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = (a[i] - b[i]).abs().max().item<double>();
    std::printf("f32 pass %zu: max |fused - unfused| = %.3g (max |logit| %.3g)\n", i, err,
                b[i].abs().max().item<double>());
    EXPECT_LE(err, kF32Tolerance) << "pass " << i;
  }
}

TEST(SdarFusedGpuTest, Bfloat16LogitsStayWithinTheDocumentedTolerance) {
  DICE_REQUIRE_CUDA();
  const SdarModel fused = Make(MidConfig(), torch::kBFloat16, true),
                  plain = Make(MidConfig(), torch::kBFloat16, false);
  ASSERT_TRUE(fused.fused_elementwise()) << fused.fused_elementwise_note();
  auto a = Passes(fused), b = Passes(plain);
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = (a[i] - b[i]).abs().max().item<double>(), scale = b[i].abs().max().item<double>();
    std::printf("bf16 pass %zu: max |fused - unfused| = %.3g (max |logit| %.3g)\n", i, err, scale);
    EXPECT_LE(err, kBf16RelativeTolerance * scale) << "pass " << i;
  }
}

TEST(SdarFusedGpuTest, GreedyTokensEqualWithGraphsOnAndOff) {
  DICE_REQUIRE_CUDA();
  const SdarModel fused = Make(MidConfig(), torch::kFloat32, true), plain = Make(MidConfig(), torch::kFloat32, false);
  for (const int64_t samples : {1, 3}) {
    for (const bool graphs : {false, true}) {
      DecodeOptions o;
      o.max_new_tokens = 24;
      o.remasking = Remasking::kStatic;
      o.eos_ids.clear();
      o.num_samples = samples;
      o.cuda_graphs = graphs;
      const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8, 100};
      auto a = Decode(fused, prompt, o), b = Decode(plain, prompt, o);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
      EXPECT_EQ(a->tokens, b->tokens) << "samples " << samples << " graphs " << graphs;
    }
  }
}

TEST(SdarFusedGpuTest, ShapeTheKernelsDoNotTakeFallsBackWithAMessage) {
  DICE_REQUIRE_CUDA();
  SdarConfig c = dice::testing::TinySdarConfig(64, 64, false);
  c.num_attention_heads = 1;
  c.num_key_value_heads = 1;
  c.head_dim = 1026;  // > 1024: one thread per element of a head
  const SdarModel m = Make(c, torch::kFloat32, true);
  EXPECT_FALSE(m.fused_elementwise());
  EXPECT_NE(m.fused_elementwise_note().find("head_dim 1026"), std::string::npos) << m.fused_elementwise_note();
  EXPECT_NE(m.fused_elementwise_note().find("unfused"), std::string::npos) << m.fused_elementwise_note();
  auto logits = m.Forward(torch::arange(0, 8, torch::kLong).view({1, 8}));
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_TRUE(torch::isfinite(*logits).all().item<bool>());
}

TEST(SdarFusedGpuTest, FusedKernelsNeedTheFusedProjections) {
  DICE_REQUIRE_CUDA();
  SdarModelOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.fuse_projections = false;
  auto m = SdarModel::Random(MidConfig(), o, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->fused_elementwise());
  EXPECT_NE(m->fused_elementwise_note().find("fuse_projections"), std::string::npos);
}

}  // namespace
}  // namespace dice::generator
