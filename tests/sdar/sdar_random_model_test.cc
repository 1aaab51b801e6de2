// SdarModel::Random (sdar_model.h): random weights at a given shape for the
// decode benchmark — seeded (same seed, same logits; another seed, other
// logits), shaped like a checkpoint of the config, and decodable.
#include <gtest/gtest.h>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {
namespace {

SdarConfig TinyConfig() { return TinySdarConfig(100, 256, /*tie_word_embeddings=*/false); }

torch::Tensor Logits(const SdarModel& m) {
  auto ids = torch::arange(0, 8, torch::kLong).view({1, 8});
  auto out = m.Forward(ids);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : torch::Tensor();
}

TEST(SdarRandomModelTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  auto a = SdarModel::Random(TinyConfig(), {}, 3);
  auto b = SdarModel::Random(TinyConfig(), {}, 3);
  auto c = SdarModel::Random(TinyConfig(), {}, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().ToString();
  const torch::Tensor la = Logits(*a), lb = Logits(*b), lc = Logits(*c);
  ASSERT_EQ(la.sizes(), (std::vector<int64_t>{1, 8, 100}));
  EXPECT_TRUE(torch::equal(la, lb));
  EXPECT_FALSE(torch::allclose(la, lc));
  EXPECT_TRUE(torch::isfinite(la).all().item<bool>());
}

TEST(SdarRandomModelTest, DecodesWithStaticRemasking) {
  auto m = SdarModel::Random(TinyConfig(), {}, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  DecodeOptions o;
  o.max_new_tokens = 8;
  o.remasking = Remasking::kStatic;
  o.eos_ids.clear();
  o.num_samples = 2;
  auto r = Decode(*m, {1, 2, 3, 4}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tokens.size(), 2u);
  EXPECT_EQ(r->tokens[0].size(), 8u);
  EXPECT_EQ(r->denoising_steps, 8) << "static, 4 steps a block of 4: one token a step";
}

TEST(SdarRandomModelTest, RejectsAnIntegerComputeDtype) {
  SdarModelOptions o;
  o.dtype = torch::kInt32;
  auto m = SdarModel::Random(TinyConfig(), o, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dice::generator
