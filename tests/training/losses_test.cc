// dice::training losses against the plain-torch reference
// (tests/training/losses_reference.py, fixture losses_fixture.json).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dice/training/losses.h"

namespace dice::training {
namespace {

nlohmann::json Fixture() {
  std::ifstream in(std::string(DICE_SOURCE_DIR) + "/tests/training/losses_fixture.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

torch::Tensor Floats(const nlohmann::json& j, std::vector<int64_t> shape) {
  std::vector<float> flat;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& v) {
    if (v.is_array()) {
      for (const auto& x : v) walk(x);
    } else {
      flat.push_back(v.get<float>());
    }
  };
  walk(j);
  return torch::tensor(flat).view(shape);
}

torch::Tensor Longs(const nlohmann::json& j) { return torch::tensor(j.get<std::vector<int64_t>>(), torch::kLong); }

torch::Tensor Bools(const nlohmann::json& rows) {
  std::vector<torch::Tensor> out;
  for (const auto& r : rows) {
    std::vector<int64_t> v;
    for (const auto& x : r) v.push_back(x.get<bool>() ? 1 : 0);
    out.push_back(torch::tensor(v, torch::kLong).to(torch::kBool));
  }
  return torch::stack(out);
}

TEST(TrainingLosses, BlockDiffusionLayoutMatchesReference) {
  const auto f = Fixture();
  const auto& s = f["sft"];
  auto layout = BlockDiffusionLayout(s["length"].get<int64_t>(), f["block_size"].get<int64_t>());
  EXPECT_TRUE(torch::equal(layout.positions, Longs(s["positions"])));
  EXPECT_TRUE(torch::equal(layout.mask, Bools(s["mask"])));
}

TEST(TrainingLosses, BlockDiffusionLossMatchesReference) {
  const auto f = Fixture();
  const auto& s = f["sft"];
  const int64_t b = s["targets"].size(), l = s["length"], v = f["vocab"];
  auto logits = Floats(s["logits"], {b, l, v}).requires_grad_(true);
  auto targets = torch::stack({Longs(s["targets"][0]), Longs(s["targets"][1])});
  auto loss = BlockDiffusionLoss(logits, targets, Bools(s["masked"]), Floats(s["t"], {b, l}), Bools(s["response"]));
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_NEAR(loss->item<double>(), s["loss"].get<double>(), 1e-5);
  loss->backward();  // differentiable in the logits
  EXPECT_GT(logits.grad().abs().sum().item<double>(), 0.0);
}

TEST(TrainingLosses, BlockDiffusionLossRejectsMismatchedShapes) {
  auto bad = BlockDiffusionLoss(torch::zeros({1, 3, 5}), torch::zeros({1, 4}, torch::kLong),
                                torch::zeros({1, 4}, torch::kBool), torch::ones({1, 4}), torch::zeros({1, 4}, torch::kBool));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("BlockDiffusionLoss"), std::string::npos);
}

TEST(TrainingLosses, NoiseNeverMasksThePrompt) {
  auto tokens = torch::arange(40, torch::kLong).view({2, 20});
  auto response = torch::arange(20).ge(7).unsqueeze(0).expand({2, 20}).contiguous();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto n = NoiseResponseBlocks(tokens, response, 4, 99, gen);
  EXPECT_FALSE(n.masked.logical_and(response.logical_not()).any().item<bool>());
  EXPECT_TRUE(torch::equal(n.noised.masked_select(n.masked.logical_not()), tokens.masked_select(n.masked.logical_not())));
  EXPECT_TRUE(n.noised.masked_select(n.masked).eq(99).all().item<bool>());
  // One noise level per block: equal within each block of the response.
  auto t = n.t.narrow(1, 8, 4);
  EXPECT_TRUE(t.eq(t.select(1, 0).unsqueeze(1)).all().item<bool>());
}

TEST(TrainingLosses, GroupAdvantagesMatchReferenceAndDropEqualGroups) {
  const auto f = Fixture()["advantages"];
  auto a = GroupAdvantages(f["rewards"].get<std::vector<double>>());
  ASSERT_TRUE(a.has_value());
  auto want = f["advantages"].get<std::vector<double>>();
  ASSERT_EQ(a->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR((*a)[i], want[i], 1e-9);
  EXPECT_TRUE(f["equal_dropped"].get<bool>());
  EXPECT_FALSE(GroupAdvantages(f["equal_rewards"].get<std::vector<double>>()).has_value());
}

TEST(TrainingLosses, PackTraceMatchesReference) {
  const auto f = Fixture();
  const auto& t = f["trace"];
  RolloutTrace trace{t["prompt"].get<std::vector<int32_t>>(), t["tokens"].get<std::vector<int32_t>>(),
                     t["steps"].get<std::vector<int32_t>>()};
  auto packed = PackTrace(trace, f["block_size"], f["mask_token_id"]);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_TRUE(torch::equal(packed->ids.squeeze(0), Longs(t["ids"])));
  EXPECT_TRUE(torch::equal(packed->positions, Longs(t["positions"])));
  EXPECT_TRUE(torch::equal(packed->mask, Bools(t["mask"])));
  EXPECT_TRUE(torch::equal(packed->scored, Longs(t["scored"])));
  EXPECT_TRUE(torch::equal(packed->targets, Longs(t["targets"])));
  const int64_t m = t["ids"].size(), v = f["vocab"];
  auto logits = Floats(t["logits"], {1, m, v});
  auto logp = ScoredLogProbs(logits, packed->scored, packed->targets, f["mask_token_id"]);
  auto want = t["logp"].get<std::vector<double>>();
  ASSERT_EQ(logp.size(0), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(logp[i].item<double>(), want[i], 1e-5);
}

TEST(TrainingLosses, PackTraceRejectsPartialBlocks) {
  RolloutTrace trace{{1, 2, 3}, {4, 5}, {0, 0}};
  auto packed = PackTrace(trace, 4, 11);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("whole number of blocks"), std::string::npos);
}

TEST(TrainingLosses, TraceRlLossMatchesReference) {
  const auto r = Fixture()["trace_rl"];
  auto vec = [&](const char* k) {
    auto v = r[k].get<std::vector<double>>();
    return torch::tensor(v, torch::kDouble).to(torch::kFloat32);
  };
  auto logp = vec("logp").requires_grad_(true);
  auto loss = TraceRlLoss(logp, vec("logp_old"), vec("logp_ref"), vec("advantage"), r["clip_eps"], r["beta"]);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_NEAR(loss->item<double>(), r["loss"].get<double>(), 1e-5);
  loss->backward();
  EXPECT_GT(logp.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(TraceRlLoss(logp, vec("logp_old"), vec("logp_ref"), vec("advantage"), 0.0, 0.01).ok());
}

}  // namespace
}  // namespace dice::training
