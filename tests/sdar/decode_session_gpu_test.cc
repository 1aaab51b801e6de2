// GPU tests for dice/generator/decode_session.h (label `gpu`; skipped
// without a CUDA device): on a tiny random f32 SDAR model on CUDA, a
// session's first Decode captures the step graphs, a second one at the same
// batch replays them (no capture) with the tokens of a decode that captures
// its own, and after an in-place weight update (what `dice train rl`'s
// optimizer does) the kept graph computes with the new weights: the
// log-probabilities equal a fresh capture's to rounding.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <vector>

#include "dice/generator/decode_session.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tiny_sdar_config.h"

namespace dice::generator {
namespace {

class DecodeSessionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine: the capture part needs one";
  }
};

SdarModel CudaTinyModel() {
  SdarConfig c = TinySdarConfig(/*vocab=*/256, /*max_positions=*/512, /*tie_word_embeddings=*/false);
  SdarModelOptions mo;
  mo.device = torch::Device(torch::kCUDA, 0);
  auto m = SdarModel::Random(c, mo, 11);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

DecodeOptions Options() {
  DecodeOptions o;
  o.max_new_tokens = 24;
  o.num_samples = 3;
  o.eos_ids = {};
  o.cuda_graphs = true;
  o.record_logprobs = true;
  o.profile = true;
  return o;
}

double MaxGap(const DecodeResult& a, const DecodeResult& b) {
  double gap = 0;
  for (size_t i = 0; i < a.trace_logprobs.size(); ++i) {
    for (size_t j = 0; j < a.trace_logprobs[i].size(); ++j) {
      gap = std::max(gap, static_cast<double>(std::fabs(a.trace_logprobs[i][j] - b.trace_logprobs[i][j])));
    }
  }
  return gap;
}

TEST_F(DecodeSessionGpuTest, SecondDecodeReplaysTheCapturedGraphWithTheSameTokens) {
  const SdarModel model = CudaTinyModel();
  DecodeSession session(model);
  const std::vector<int32_t> a = {3, 17, 42, 99, 7, 150, 23, 61, 9}, b = {8, 1, 77, 200, 5, 13};
  auto first = Decode(model, a, Options(), &session);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->profile.captures, 1);
  auto second = Decode(model, b, Options(), &session);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->profile.captures, 0);
  EXPECT_EQ(second->profile.graph_reuses, 1);
  EXPECT_EQ(session.counters().graphs_made, 1);
  auto own = Decode(model, b, Options());  // captures its own graph
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(second->tokens, own->tokens);
  EXPECT_LT(MaxGap(*second, *own), 1e-4);
}

TEST_F(DecodeSessionGpuTest, InPlaceWeightUpdateIsSeenByTheKeptGraph) {
  SdarModel model = CudaTinyModel();
  DecodeSession session(model);
  const std::vector<int32_t> a = {3, 17, 42, 99, 7, 150, 23, 61, 9};
  auto before = Decode(model, a, Options(), &session);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(0);
    for (auto& [name, t] : model.NamedWeights()) t.add_(torch::randn_like(t) * 0.05);  // in place, as AdamW
  }
  auto kept = Decode(model, a, Options(), &session);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->profile.captures, 0) << "an in-place update must not invalidate the graph";
  auto fresh = Decode(model, a, Options());
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(kept->tokens, fresh->tokens);
  EXPECT_LT(MaxGap(*kept, *fresh), 1e-4);
  EXPECT_GT(MaxGap(*kept, *before), 1e-3) << "the update changed nothing: the test proves nothing";
}

}  // namespace
}  // namespace dice::generator
