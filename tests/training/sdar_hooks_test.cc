// The generator hooks training relies on (additive, in generator/):
// SdarModel::ForwardPacked, NamedWeights, BlockCausalMask and the decoder's
// per-token step trace, on a tiny random model written by InitRandomCheckpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/losses.h"

namespace dice::training {
namespace {

class SdarHooks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dice_sdar_hooks_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    torch::set_num_threads(1);
    ASSERT_TRUE(InitRandomCheckpoint(generator::TinySdarConfig(50, 64, /*tie_word_embeddings=*/false), dir_, 11).ok());
  }
  // rm -rf: LibTorch's exported std::filesystem::remove_all crashes when interposed.
  static void TearDownTestSuite() { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  static std::string dir_;
};
std::string SdarHooks::dir_;

TEST_F(SdarHooks, PackedForwardWithTheBlockCausalMaskEqualsForward) {
  auto model = generator::SdarModel::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto ids = torch::randint(0, 48, {2, 11}, torch::kLong);
  auto plain = model->Forward(ids);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  auto pos = torch::arange(11, torch::kLong);
  auto packed = model->ForwardPacked(ids, pos, generator::BlockCausalMask(pos, pos, model->config().block_size));
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_TRUE(torch::allclose(*plain, *packed, 1e-5, 1e-5));
}

TEST_F(SdarHooks, PackedForwardIsDifferentiableAndChecksItsInputs) {
  auto model = generator::SdarModel::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto weights = model->NamedWeights();
  EXPECT_EQ(weights.size(), model->config().ExpectedTensors().size());  // untied: lm_head listed
  for (auto& [name, t] : weights) t.requires_grad_(true);
  // Longer than the context (80 > 64) is fine when the positions stay inside it.
  auto pos = torch::arange(40, torch::kLong).repeat({2});
  auto ids = torch::randint(0, 48, {1, 80}, torch::kLong);
  auto mask = generator::BlockCausalMask(pos, pos, 4);
  auto out = model->ForwardPacked(ids, pos, mask);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  out->sum().backward();
  EXPECT_TRUE(weights.front().second.grad().defined());
  EXPECT_GT(weights.front().second.grad().abs().sum().item<double>(), 0.0);
  auto far = model->ForwardPacked(ids, pos + 30, mask);
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("outside the context"), std::string::npos) << far.status().ToString();
  auto bad_mask = model->ForwardPacked(ids, pos, mask.to(torch::kFloat));
  ASSERT_FALSE(bad_mask.ok());
  EXPECT_NE(bad_mask.status().message().find("mask must be bool"), std::string::npos);
}

// The fused Q/K/V and gate/up storage (sdar_model.h) is invisible to
// checkpoints: saving lists every Hugging Face name once, reloading gives
// the same tensors and the same logits.
TEST_F(SdarHooks, CheckpointRoundTripKeepsEveryNamedWeight) {
  auto model = generator::SdarModel::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::string out = dir_ + "/round_trip";
  ASSERT_TRUE(SaveCheckpoint(*model, dir_, out, torch::kFloat32).ok());
  auto again = generator::SdarModel::Load(out);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto w0 = model->NamedWeights(), w1 = again->NamedWeights();
  ASSERT_EQ(w0.size(), w1.size());
  ASSERT_EQ(w0.size(), model->config().ExpectedTensors().size());
  for (size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(w0[i].first, w1[i].first);
    EXPECT_EQ(w0[i].first, model->config().ExpectedTensors()[i].name);
    EXPECT_TRUE(torch::equal(w0[i].second, w1[i].second)) << w0[i].first;
  }
  auto ids = torch::randint(0, 48, {1, 9}, torch::kLong);
  auto a = model->Forward(ids), b = again->Forward(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
}

TEST_F(SdarHooks, DecodeRecordsTheStepOfEveryToken) {
  auto model = generator::SdarModel::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  generator::DecodeOptions o;
  o.max_new_tokens = 10;
  o.denoising_steps = 4;
  o.remasking = generator::Remasking::kStatic;  // one token a step: every step 0..3 appears in each whole block
  o.num_samples = 2;
  o.temperature = 1.0;
  o.eos_ids = {};
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};  // a partial block of 2 prompt tokens
  auto r = generator::Decode(*model, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 2; ++i) {
    const auto& toks = r->trace_tokens[i];
    const auto& steps = r->trace_steps[i];
    ASSERT_EQ(toks.size(), steps.size());
    EXPECT_EQ((prompt.size() + toks.size()) % 4, 0u);
    ASSERT_GE(toks.size(), r->tokens[i].size());
    EXPECT_TRUE(std::equal(r->tokens[i].begin(), r->tokens[i].end(), toks.begin()));  // a prefix
    // The first (partial) block has 2 free slots: steps 0 and 1; whole blocks 0..3.
    std::vector<int32_t> first(steps.begin(), steps.begin() + 2);
    std::sort(first.begin(), first.end());
    EXPECT_EQ(first, (std::vector<int32_t>{0, 1}));
    std::vector<int32_t> second(steps.begin() + 2, steps.begin() + 6);
    std::sort(second.begin(), second.end());
    EXPECT_EQ(second, (std::vector<int32_t>{0, 1, 2, 3}));
  }
}


// PackTraceChunks (the RL update's memory cap): the chunks' scored
// log-probabilities, in order, equal PackTrace's through the real model;
// each chunk keeps to the cap (or holds one block); cap 0 is one chunk.
TEST_F(SdarHooks, TraceChunksScoreEveryTokenAsTheWholePackedTraceDoes) {
  auto model = generator::SdarModel::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int64_t B = model->config().block_size, mask_id = model->config().mask_token_id;
  ASSERT_EQ(B, 4);
  torch::manual_seed(3);
  RolloutTrace trace;
  for (int i = 0; i < 6; ++i) trace.prompt.push_back(static_cast<int32_t>(torch::randint(0, 48, {1}).item<int64_t>()));
  for (int i = 0; i < 22; ++i) {  // 6 + 22 = 28 = 7 blocks; the prompt's block holds 2 response tokens
    trace.tokens.push_back(static_cast<int32_t>(torch::randint(0, 48, {1}).item<int64_t>()));
    trace.steps.push_back(static_cast<int32_t>(torch::randint(0, 3, {1}).item<int64_t>()));
  }
  auto whole = PackTrace(trace, B, mask_id);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto logp = [&](const PackedTrace& p) {
    auto logits = model->ForwardPacked(p.ids, p.positions, p.mask);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    return ScoredLogProbs(*logits, p.scored, p.targets, mask_id);
  };
  const torch::Tensor want = logp(*whole);
  ASSERT_EQ(want.size(0), 22);
  for (const int64_t cap : {0, 24, 40}) {
    auto chunks = PackTraceChunks(trace, B, mask_id, cap);
    ASSERT_TRUE(chunks.ok()) << chunks.status().ToString();
    if (cap == 0) {
      ASSERT_EQ(chunks->size(), 1u);
      EXPECT_TRUE(torch::equal((*chunks)[0].ids, whole->ids));
      EXPECT_TRUE(torch::equal((*chunks)[0].mask, whole->mask));
    } else {
      EXPECT_GT(chunks->size(), 1u) << "cap " << cap;
    }
    std::vector<torch::Tensor> parts;
    for (const auto& c : *chunks) {
      const int64_t m = c.ids.size(1);
      // Over the cap only when one block's copies alone push it there.
      if (cap > 0 && m > cap) {
        EXPECT_LE(m - c.positions.max().item<int64_t>() - 1, 3 * B) << "cap " << cap;
      }
      parts.push_back(logp(c));
    }
    const torch::Tensor got = torch::cat(parts);
    ASSERT_EQ(got.size(0), want.size(0)) << "cap " << cap;
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << "cap " << cap << ": max diff "
                                                        << (got - want).abs().max().item<double>();
  }
  RolloutTrace bad = trace;
  bad.steps[3] = -1;
  auto rejected = PackTraceChunks(bad, B, mask_id, 24);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("has step -1"), std::string::npos) << rejected.status().ToString();
}

}  // namespace
}  // namespace dice::training
