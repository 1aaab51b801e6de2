// Tests for dice/generator/diffusion_decoder.h on the tiny random SDAR model
// of tests/generator/sdar_reference.py: greedy decoding equals the Python
// reference loop (which recomputes the whole sequence every step, no KV
// cache), the static/dynamic schedules, seeding, EOS, batching, sampling
// filters and bad options.
#include "dice/generator/diffusion_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "sdar_reference_fixture.h"

namespace dice::generator {
namespace {

using dice::testing::SdarReferenceDir;
using dice::testing::SdarReferenceJson;

class DiffusionDecoderTest : public dice::testing::SdarF32ReferenceTest {
 protected:

  DecodeResult Run(const std::vector<int32_t>& prompt, const DecodeOptions& o) {
    auto r = Decode(*model_, prompt, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : DecodeResult{};
  }

  static DecodeOptions Greedy(int64_t max_new, Remasking remasking = Remasking::kStatic, int64_t steps = 4) {
    DecodeOptions o;
    o.max_new_tokens = max_new;
    o.remasking = remasking;
    o.denoising_steps = steps;
    o.eos_ids = {};
    return o;
  }

  const std::vector<int32_t> prompt8_ = {3, 17, 42, 99, 7, 150, 23, 61};
};

// The reference records each generated token's top-1/top-2 logit gap; a
// mismatch is only excused where that gap is below 1e-3 (a float32 near-tie,
// after which the sequences legitimately diverge).
TEST_F(DiffusionDecoderTest, GreedyDecodingMatchesPythonReferenceLoop) {
  const auto ref = SdarReferenceJson();
  ASSERT_GE(ref["decode"].size(), 9u);
  int exact_cases = 0;
  for (const auto& c : ref["decode"]) {
    DecodeOptions o = Greedy(c["max_new_tokens"].get<int64_t>());
    auto remasking = ParseRemasking(c["remasking"].get<std::string>());
    ASSERT_TRUE(remasking.ok());
    o.remasking = *remasking;
    o.denoising_steps = c["steps"].get<int64_t>();
    o.confidence_threshold = c["threshold"].get<double>();
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto want = c["tokens"].get<std::vector<int32_t>>();
    const auto& gaps = c["gaps"];
    const std::string what = c["remasking"].get<std::string>() + " steps " + std::to_string(o.denoising_steps) +
                             " prompt of " + std::to_string(prompt.size());
    DecodeResult got = Run(prompt, o);
    ASSERT_EQ(got.tokens.size(), 1u);
    ASSERT_EQ(got.tokens[0].size(), want.size()) << what;
    size_t i = 0;
    while (i < want.size() && got.tokens[0][i] == want[i]) ++i;
    if (i == want.size()) {
      ++exact_cases;
      EXPECT_EQ(got.denoising_steps, c["denoising_steps"].get<int64_t>()) << what;
    } else {
      EXPECT_LT(gaps[i].get<double>(), 1e-3) << what << ": token " << i << " is " << got.tokens[0][i]
                                             << ", the reference has " << want[i];
    }
  }
  std::printf("%d of %zu greedy cases equal the reference token for token\n", exact_cases, ref["decode"].size());
  EXPECT_GE(exact_cases, 6) << "most cases must agree token for token";
}

TEST_F(DiffusionDecoderTest, StaticOneTokenPerStepRevealsEachBlockInBlockSizeSteps) {
  DecodeResult r = Run(prompt8_, Greedy(24, Remasking::kStatic, /*steps=*/4));
  ASSERT_EQ(r.tokens[0].size(), 24u);
  ASSERT_EQ(r.steps_per_block.size(), 6u);
  for (int64_t s : r.steps_per_block) EXPECT_EQ(s, 4);
  for (int32_t t : r.tokens[0]) EXPECT_NE(t, model_->config().mask_token_id);
  // Prefill and 4 steps per block; each block is committed inside the next
  // block's first step (merge_commit; decode_paths_test.cc counts the old path).
  EXPECT_EQ(r.forward_passes, 1 + 24);
  // The prefill's end is timed inside the decode: 1 forward of the 25 (the
  // bench's decode-only tokens/s divides by seconds - prefill_seconds).
  EXPECT_GT(r.prefill_seconds, 0.0);
  EXPECT_LT(r.prefill_seconds, r.seconds);
  // A prompt of 5 leaves 1 fixed prompt token in the first block: 3 masked, 3 steps.
  DecodeResult partial = Run({3, 17, 42, 99, 7}, Greedy(7, Remasking::kStatic, 4));
  ASSERT_EQ(partial.steps_per_block.size(), 2u);
  EXPECT_EQ(partial.steps_per_block[0], 3);
  EXPECT_EQ(partial.steps_per_block[1], 4);
  EXPECT_EQ(partial.tokens[0].size(), 7u);
  // Two steps per block reveal two tokens a step.
  DecodeResult two = Run(prompt8_, Greedy(8, Remasking::kStatic, 2));
  EXPECT_EQ(two.steps_per_block, (std::vector<int64_t>{2, 2}));
}

TEST_F(DiffusionDecoderTest, DynamicThresholdControlsHowManyTokensAStepReveals) {
  DecodeOptions all = Greedy(16, Remasking::kDynamic, 4);
  all.confidence_threshold = 0.0;  // every masked token is confident enough: one step a block
  DecodeResult r = Run(prompt8_, all);
  EXPECT_EQ(r.steps_per_block, (std::vector<int64_t>{1, 1, 1, 1}));
  DecodeOptions none = Greedy(16, Remasking::kDynamic, 4);
  none.confidence_threshold = 1.0;  // nothing exceeds 1: falls back to the static schedule
  DecodeResult dyn = Run(prompt8_, none);
  DecodeResult stat = Run(prompt8_, Greedy(16, Remasking::kStatic, 4));
  EXPECT_EQ(dyn.tokens, stat.tokens);
  EXPECT_EQ(dyn.steps_per_block, stat.steps_per_block);
}

TEST_F(DiffusionDecoderTest, SameSeedGivesSameTokensAndAnotherSeedDiffers) {
  DecodeOptions o = Greedy(24);
  o.temperature = 1.0;
  o.num_samples = 3;
  o.seed = 7;
  DecodeResult a = Run(prompt8_, o), b = Run(prompt8_, o);
  ASSERT_EQ(a.tokens.size(), 3u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens[0], a.tokens[1]);  // samples of one batch draw independently
  o.seed = 8;
  DecodeResult c = Run(prompt8_, o);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST_F(DiffusionDecoderTest, BatchedGreedySamplesEqualTheSingleSample) {
  DecodeResult one = Run(prompt8_, Greedy(16));
  DecodeOptions o = Greedy(16);
  o.num_samples = 3;
  DecodeResult three = Run(prompt8_, o);
  ASSERT_EQ(three.tokens.size(), 3u);
  for (const auto& t : three.tokens) EXPECT_EQ(t, one.tokens[0]);
}

// top_k = 1 and a tiny top_p leave only the argmax token, with probability 1:
// sampling then equals greedy decoding under the same filter (confidences all
// 1, so both reveal left to right).
TEST_F(DiffusionDecoderTest, TopKOneAndTinyTopPSampleTheGreedyToken) {
  DecodeOptions greedy_k1 = Greedy(16);
  greedy_k1.top_k = 1;
  DecodeResult greedy = Run(prompt8_, greedy_k1);
  DecodeOptions k1 = Greedy(16);
  k1.temperature = 1.5;
  k1.top_k = 1;
  k1.num_samples = 2;
  DecodeResult a = Run(prompt8_, k1);
  DecodeOptions p = Greedy(16);
  p.temperature = 1.5;
  p.top_p = 1e-6;
  p.num_samples = 2;
  p.seed = 99;
  DecodeResult b = Run(prompt8_, p);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.tokens[i], greedy.tokens[0]);
    EXPECT_EQ(b.tokens[i], greedy.tokens[0]);
  }
}

TEST_F(DiffusionDecoderTest, EosEndsTheSampleBeforeTheEosToken) {
  DecodeResult free_run = Run(prompt8_, Greedy(32));
  ASSERT_EQ(free_run.tokens[0].size(), 32u);
  EXPECT_FALSE(free_run.stopped_at_eos[0]);
  // Pick the token generated at position 5 as EOS; output stops at its first occurrence.
  const int32_t eos = free_run.tokens[0][5];
  const size_t first = std::find(free_run.tokens[0].begin(), free_run.tokens[0].end(), eos) -
                       free_run.tokens[0].begin();
  DecodeOptions o = Greedy(32);
  o.eos_ids = {eos};
  DecodeResult r = Run(prompt8_, o);
  EXPECT_TRUE(r.stopped_at_eos[0]);
  EXPECT_EQ(r.tokens[0], std::vector<int32_t>(free_run.tokens[0].begin(), free_run.tokens[0].begin() + first));
  EXPECT_EQ(r.steps_per_block.size(), first / 4 + 1);  // no block after the one holding the EOS
}

TEST_F(DiffusionDecoderTest, FinishedSamplesLeaveTheBatchAndTheRestContinue) {
  DecodeOptions o = Greedy(32);
  o.temperature = 1.0;
  o.num_samples = 6;
  o.seed = 3;
  DecodeResult free_run = Run(prompt8_, o);
  // EOS := the token most samples produce somewhere, but not all in block 0.
  std::map<int32_t, int> count;
  for (const auto& t : free_run.tokens) {
    for (int32_t id : std::vector<int32_t>(t.begin(), t.end())) count[id]++;
  }
  int32_t eos = -1;
  int best = 0;
  for (auto [id, n] : count) {
    if (n > best) best = n, eos = id;
  }
  o.eos_ids = {eos};
  DecodeResult r = Run(prompt8_, o);
  DecodeResult again = Run(prompt8_, o);
  EXPECT_EQ(r.tokens, again.tokens);  // seeded even when the batch shrinks
  int stopped = 0;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    EXPECT_EQ(std::count(r.tokens[i].begin(), r.tokens[i].end(), eos), 0);
    EXPECT_TRUE(r.stopped_at_eos[i] || r.tokens[i].size() == 32u) << "sample " << i;
    stopped += r.stopped_at_eos[i];
  }
  EXPECT_GE(stopped, 1);
}

TEST_F(DiffusionDecoderTest, ReportsProgressAfterEveryBlock) {
  DecodeOptions o = Greedy(10);
  std::vector<DecodeProgress> seen;
  o.on_block = [&](const DecodeProgress& p) { seen.push_back(p); };
  DecodeResult r = Run({3, 17, 42, 99, 7, 1}, o);  // 2 fixed prompt tokens: blocks of 2, 4, 4 new tokens
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].generated_tokens, 2);
  EXPECT_EQ(seen[1].generated_tokens, 6);
  EXPECT_EQ(seen[2].generated_tokens, 10);
  EXPECT_EQ(seen[2].active_samples, 0);
  EXPECT_EQ(seen[2].denoising_steps, r.denoising_steps);
  EXPECT_EQ(r.tokens[0].size(), 10u);
}

TEST_F(DiffusionDecoderTest, RejectsBadPromptsAndOptionsNamingTheCause) {
  auto expect_error = [&](const std::vector<int32_t>& prompt, const DecodeOptions& o, const std::string& needle) {
    auto r = Decode(*model_, prompt, o);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_error({}, Greedy(4), "prompt is empty");
  expect_error({1, 255}, Greedy(4), "mask token");
  expect_error({1, 256}, Greedy(4), "outside the vocabulary");
  DecodeOptions bad_p = Greedy(4);
  bad_p.top_p = 0;
  expect_error({1}, bad_p, "top_p");
  DecodeOptions bad_steps = Greedy(4);
  bad_steps.denoising_steps = 0;
  expect_error({1}, bad_steps, "denoising_steps");
  DecodeOptions bad_t = Greedy(4);
  bad_t.temperature = -1;
  expect_error({1}, bad_t, "temperature");
  // 500 prompt tokens + 64 new exceed the tiny model's 512 positions.
  expect_error(std::vector<int32_t>(500, 5), Greedy(64), "exceeds the model's context of 512");
}

}  // namespace
}  // namespace dice::generator
