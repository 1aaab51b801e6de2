// SdarModelOptions::fuse_projections (issue 19 item 2): the merged Q/K/V and
// gate/up GEMMs give the per-projection path's logits and greedy tokens, the
// named projections are views of the fused matrices (so updating them in
// place, as the optimiser does, changes what the fused GEMMs read), and
// autograd forwards still reach the named leaves.
#include <gtest/gtest.h>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {
namespace {

// f32 on CPU: the fused GEMM sums the same products per output element; any
// difference is blocking order only.
constexpr double kFusedTolerance = 1e-5;

SdarConfig TinyConfig() { return TinySdarConfig(100, 256, /*tie_word_embeddings=*/false); }

SdarModel Make(bool fuse, uint64_t seed = 5) {
  SdarModelOptions o;
  o.fuse_projections = fuse;
  auto m = SdarModel::Random(TinyConfig(), o, seed);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

torch::Tensor CachedStepLogits(const SdarModel& m) {
  auto cache = m.NewCache(2, 64);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  auto prompt = torch::randint(0, 99, {2, 8}, torch::TensorOptions().dtype(torch::kLong));
  EXPECT_TRUE(m.Forward(prompt, &*cache, /*commit=*/true, /*compute_logits=*/false).ok());
  auto step = torch::full({2, 4}, 99, torch::kLong);
  step.index_put_({0, 1}, 7);
  auto out = m.Forward(step, &*cache);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return *out;
}

TEST(SdarFusedProjectionTest, FusedGemmsGiveTheUnfusedLogits) {
  const SdarModel fused = Make(true), plain = Make(false);
  torch::manual_seed(1);
  auto ids = torch::randint(0, 99, {2, 11}, torch::TensorOptions().dtype(torch::kLong));
  auto a = fused.Forward(ids), b = plain.Forward(ids);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_LE((*a - *b).abs().max().item<double>(), kFusedTolerance);
  torch::manual_seed(2);
  auto ca = CachedStepLogits(fused);
  torch::manual_seed(2);
  auto cb = CachedStepLogits(plain);
  EXPECT_LE((ca - cb).abs().max().item<double>(), kFusedTolerance);
  EXPECT_GT(ca.abs().max().item<double>(), 0.0);
}

TEST(SdarFusedProjectionTest, GreedyDecodeTokensAreEqual) {
  const SdarModel fused = Make(true), plain = Make(false);
  for (const bool graphs : {false, true}) {
    DecodeOptions o;
    o.max_new_tokens = 16;
    o.remasking = Remasking::kStatic;
    o.eos_ids.clear();
    o.num_samples = 2;
    o.cuda_graphs = graphs;  // on CPU: the fixed-shape step forward, eagerly
    auto a = Decode(fused, {1, 2, 3, 4, 5, 6}, o), b = Decode(plain, {1, 2, 3, 4, 5, 6}, o);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ(a->tokens, b->tokens) << "graphs " << graphs;
    EXPECT_EQ(a->tokens[0].size(), 16u);
  }
}

TEST(SdarFusedProjectionTest, NamedProjectionsAreViewsOfTheFusedMatrices) {
  SdarModel m = Make(true);
  auto ids = torch::arange(0, 8, torch::kLong).view({1, 8});
  auto before = m.Forward(ids);
  ASSERT_TRUE(before.ok());
  int checked = 0;
  for (auto& [name, t] : m.NamedWeights()) {
    const bool proj = name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos ||
                      name.find("v_proj") != std::string::npos || name.find("gate_proj") != std::string::npos ||
                      name.find("up_proj") != std::string::npos;
    if (!proj) continue;
    EXPECT_TRUE(t.is_contiguous()) << name;
    EXPECT_TRUE(t.is_view()) << name;
    ++checked;
    if (name == "model.layers.1.mlp.up_proj.weight" || name == "model.layers.0.self_attn.k_proj.weight") {
      torch::NoGradGuard g;
      t.mul_(3.0);  // what an optimiser step does: in place on the named tensor
    }
  }
  EXPECT_EQ(checked, 2 * 5);
  auto after = m.Forward(ids);
  ASSERT_TRUE(after.ok());
  EXPECT_GT((*after - *before).abs().max().item<double>(), 1e-3) << "the fused GEMMs read the updated views";
}

TEST(SdarFusedProjectionTest, AutogradForwardReachesTheNamedProjections) {
  SdarModel m = Make(true);
  auto weights = m.NamedWeights();
  for (auto& [name, t] : weights) t.requires_grad_(true);
  auto pos = torch::arange(8, torch::kLong);
  auto ids = torch::arange(0, 8, torch::kLong).view({1, 8});
  auto out = m.ForwardPacked(ids, pos, BlockCausalMask(pos, pos, 4));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  out->pow(2).sum().backward();
  int with_grad = 0;
  for (auto& [name, t] : weights) {
    if (name.find("_proj") == std::string::npos) continue;
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_GT(t.grad().abs().sum().item<double>(), 0.0) << name;
    ++with_grad;
  }
  EXPECT_EQ(with_grad, 2 * 7);
}

}  // namespace
}  // namespace dice::generator
