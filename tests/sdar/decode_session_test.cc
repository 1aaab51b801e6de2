// Tests for dice/generator/decode_session.h (issue 19 item 5: RL rollouts
// replay step graphs kept across Decode calls) and for
// DecodeOptions::record_logprobs, on tiny random f32 SDAR models on the CPU.
// On a CPU the step graph runs its fixed-shape forward eagerly (nothing is
// captured), so these check the session's keys, counters, storage reuse and
// tokens; decode_session_gpu_test.cc checks the captures themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "dice/generator/decode_session.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tiny_sdar_config.h"

namespace dice::generator {
namespace {

SdarModel TinyModel(uint64_t seed = 11) {
  SdarConfig c = TinySdarConfig(/*vocab=*/256, /*max_positions=*/512, /*tie_word_embeddings=*/false);
  auto m = SdarModel::Random(c, SdarModelOptions{}, seed);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

DecodeOptions GraphOptions(int64_t samples, int64_t max_new = 16) {
  DecodeOptions o;
  o.max_new_tokens = max_new;
  o.num_samples = samples;
  o.eos_ids = {};
  o.cuda_graphs = true;  // on a CPU: the fixed-shape forward, run eagerly
  return o;
}

DecodeResult DecodeOk(const SdarModel& model, const std::vector<int32_t>& prompt, const DecodeOptions& o,
                      DecodeSession* session = nullptr) {
  auto r = Decode(model, prompt, o, session);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : DecodeResult{};
}

const std::vector<int32_t> kPromptA = {3, 17, 42, 99, 7, 150, 23, 61, 9};
const std::vector<int32_t> kPromptB = {8, 1, 77, 200, 5, 13};  // same capacity bucket as A

TEST(DecodeSessionTest, SameBatchReusesItsGraphAndANewBatchMakesOne) {
  const SdarModel model = TinyModel();
  DecodeSession session(model);
  DecodeOk(model, kPromptA, GraphOptions(3), &session);
  EXPECT_EQ(session.counters().graphs_made, 1);
  EXPECT_EQ(session.counters().graphs_reused, 0);
  DecodeOk(model, kPromptB, GraphOptions(3), &session);  // another prompt, same batch
  EXPECT_EQ(session.counters().graphs_made, 1) << "a second decode at batch 3 must replay the kept graph";
  EXPECT_EQ(session.counters().graphs_reused, 1);
  DecodeOk(model, kPromptA, GraphOptions(2), &session);  // smaller batch: fits the storage, new key
  EXPECT_EQ(session.counters().graphs_made, 2);
  DecodeOk(model, kPromptB, GraphOptions(2), &session);
  DecodeOk(model, kPromptA, GraphOptions(3), &session);
  EXPECT_EQ(session.counters().graphs_made, 2);
  EXPECT_EQ(session.counters().graphs_reused, 3);
  EXPECT_EQ(session.graphs(), 2);
  EXPECT_EQ(session.counters().storage_allocations, 1);
  EXPECT_EQ(session.counters().invalidations, 0);
  // A larger batch grows the storage: every kept graph is dropped.
  DecodeOk(model, kPromptA, GraphOptions(4), &session);
  EXPECT_EQ(session.counters().storage_allocations, 2);
  EXPECT_EQ(session.counters().invalidations, 1);
  EXPECT_EQ(session.graphs(), 1);
}

TEST(DecodeSessionTest, ProfileCountsCapturesAndReuses) {
  const SdarModel model = TinyModel();
  DecodeSession session(model);
  DecodeOptions o = GraphOptions(2);
  o.profile = true;
  const DecodeResult first = DecodeOk(model, kPromptA, o, &session);
  EXPECT_EQ(first.profile.captures, 1);
  EXPECT_EQ(first.profile.graph_reuses, 0);
  const DecodeResult second = DecodeOk(model, kPromptB, o, &session);
  EXPECT_EQ(second.profile.captures, 0);
  EXPECT_EQ(second.profile.graph_reuses, 1);
}

// The session's tokens are those of Decode with graphs and without a session
// (and, greedy, those of the eager decoder): greedy and sampled, static and
// dynamic, with samples that stop at different blocks (the batch shrinks
// inside the kept storage) and prompts of other lengths in between.
TEST(DecodeSessionTest, TokensEqualDecodeWithoutSession) {
  const SdarModel model = TinyModel();
  DecodeSession session(model);
  for (Remasking r : {Remasking::kStatic, Remasking::kDynamic}) {
    for (double temperature : {0.0, 1.0}) {
      DecodeOptions o = GraphOptions(6, 40);
      o.remasking = r;
      o.temperature = temperature;
      o.seed = 5;
      o.confidence_threshold = 0.02;
      const DecodeResult free_run = DecodeOk(model, kPromptA, o);
      o.eos_ids = {free_run.tokens[0][9]};  // sample 0 stops in its third block
      for (const auto& prompt : {kPromptA, kPromptB, std::vector<int32_t>{42}}) {
        const std::string what = std::string(RemaskingName(r)) + " temperature " + std::to_string(temperature) +
                                 " prompt of " + std::to_string(prompt.size());
        const DecodeResult want = DecodeOk(model, prompt, o);
        const DecodeResult got = DecodeOk(model, prompt, o, &session);
        EXPECT_EQ(got.tokens, want.tokens) << what;
        EXPECT_EQ(got.trace_tokens, want.trace_tokens) << what;
        EXPECT_EQ(got.trace_steps, want.trace_steps) << what;
        EXPECT_EQ(got.stopped_at_eos, want.stopped_at_eos) << what;
        if (temperature == 0) {
          DecodeOptions eager = o;
          eager.cuda_graphs = false;
          EXPECT_EQ(DecodeOk(model, prompt, eager).tokens, got.tokens) << what << " (eager)";
        }
      }
    }
  }
  EXPECT_GT(session.counters().graphs_reused, 0);
}

TEST(DecodeSessionTest, WithoutGraphsTheSessionIsUnused) {
  const SdarModel model = TinyModel();
  DecodeSession session(model);
  DecodeOptions o = GraphOptions(2);
  o.cuda_graphs = false;
  const DecodeResult got = DecodeOk(model, kPromptA, o, &session);
  EXPECT_EQ(got.tokens, DecodeOk(model, kPromptA, o).tokens);
  EXPECT_EQ(session.counters().graphs_made, 0);
  EXPECT_EQ(session.counters().storage_allocations, 0);
}

// In-place weight updates (what an optimizer step does) keep the kept graph;
// moving a weight's storage drops it. Either way the tokens are those of a
// decode without a session on the updated weights.
TEST(DecodeSessionTest, InPlaceWeightUpdatesKeepGraphsAndMovedStorageDropsThem) {
  SdarModel model = TinyModel();
  DecodeSession session(model);
  const DecodeOptions o = GraphOptions(2, 24);
  DecodeOk(model, kPromptA, o, &session);
  torch::Tensor embed;
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : model.NamedWeights()) {
      t.mul_(1.5);  // in place, as AdamW
      if (name == "model.embed_tokens.weight") embed = t;
    }
  }
  ASSERT_TRUE(embed.defined());
  const DecodeResult after_update = DecodeOk(model, kPromptA, o, &session);
  EXPECT_EQ(session.counters().graphs_made, 1);
  EXPECT_EQ(session.counters().graphs_reused, 1);
  EXPECT_EQ(session.counters().invalidations, 0);
  EXPECT_EQ(after_update.tokens, DecodeOk(model, kPromptA, o).tokens);
  {
    torch::NoGradGuard no_grad;
    embed.set_(embed.clone());  // same values, new storage
  }
  DecodeOk(model, kPromptA, o, &session);
  EXPECT_EQ(session.counters().invalidations, 1);
  EXPECT_EQ(session.counters().graphs_made, 2);
}

TEST(DecodeSessionTest, RejectsAnotherModelsSessionAndForeignCaches) {
  const SdarModel model = TinyModel(), other = TinyModel(12);
  DecodeSession session(other);
  auto r = Decode(model, kPromptA, GraphOptions(2), &session);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("another model"), std::string::npos) << r.status().ToString();
  auto foreign = other.NewCache(2, 64);
  ASSERT_TRUE(foreign.ok());
  EXPECT_FALSE(session.Graph(&*foreign, SdarStepGraphOptions{}).ok());
  EXPECT_FALSE(session.SelectBatch(&*foreign, torch::tensor({0}, torch::kLong)).ok());
  auto mine = session.Cache(3, 20);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->capacity(), 32) << "CapacityBucket: the next power of two";
  EXPECT_FALSE(session.SelectBatch(&*mine, torch::tensor({2, 1}, torch::kLong)).ok()) << "not increasing";
  EXPECT_FALSE(session.SelectBatch(&*mine, torch::tensor({3}, torch::kLong)).ok()) << "outside the batch";
  EXPECT_FALSE(session.Cache(0, 20).ok());
  EXPECT_FALSE(session.Cache(1, 513).ok());
  EXPECT_EQ(session.CapacityBucket(1), 4) << "at least a block";
  EXPECT_EQ(session.CapacityBucket(300), 512);
  EXPECT_EQ(session.CapacityBucket(512), 512);
}

// record_logprobs: one finite log-probability (<= 0) per trace token; the
// greedy decoder's are the largest of their step, so never below log(1/V);
// and recording changes no token.
TEST(DecodeSessionTest, RecordLogprobsGivesOnePerTraceTokenAndChangesNoToken) {
  const SdarModel model = TinyModel();
  for (bool graphs : {false, true}) {
    DecodeOptions o = GraphOptions(3, 20);
    o.cuda_graphs = graphs;
    o.temperature = 1.0;
    o.seed = 3;
    const DecodeResult plain = DecodeOk(model, kPromptA, o);
    EXPECT_TRUE(plain.trace_logprobs.empty());
    o.record_logprobs = true;
    const DecodeResult rec = DecodeOk(model, kPromptA, o);
    EXPECT_EQ(rec.tokens, plain.tokens);
    ASSERT_EQ(rec.trace_logprobs.size(), rec.trace_tokens.size());
    for (size_t i = 0; i < rec.trace_tokens.size(); ++i) {
      ASSERT_EQ(rec.trace_logprobs[i].size(), rec.trace_tokens[i].size());
      for (float lp : rec.trace_logprobs[i]) {
        EXPECT_TRUE(std::isfinite(lp));
        EXPECT_LE(lp, 0.0f);
      }
    }
    o.temperature = 0;
    const DecodeResult greedy = DecodeOk(model, kPromptA, o);
    for (const auto& row : greedy.trace_logprobs) {
      for (float lp : row) EXPECT_GE(lp, std::log(1.0f / 255) - 1e-5f);
    }
  }
}

}  // namespace
}  // namespace dice::generator
