// Tests for dice/generator/sdar_step_graph.h on a CPU, where the fixed-shape
// step forward (whole-cache attention under the block-causal mask, slots
// written by index, RoPE from a table) runs eagerly: its logits equal the
// eager SdarModel::Forward's, its commits advance the positions, decoding
// through it (DecodeOptions::cuda_graphs) gives the eager tokens, including
// when finished samples leave the batch and it is made again; and the
// decoder's phase profile. The CUDA capture itself is tested in
// sdar_gpu_test.cc.
#include "dice/generator/sdar_step_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "sdar_reference_fixture.h"

namespace dice::generator {
namespace {

using dice::testing::SdarReferenceDir;
using dice::testing::SdarReferenceJson;

class SdarStepGraphTest : public dice::testing::SdarF32ReferenceTest {
 protected:

  // A cache of `batch` rows with `prompt` (whole blocks) committed.
  KvCache Prefilled(int64_t batch, int64_t capacity, const std::vector<int64_t>& prompt) {
    auto cache = model_->NewCache(batch, capacity);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    auto ids = torch::tensor(prompt, torch::kLong).unsqueeze(0).expand({batch, -1}).contiguous();
    auto pre = model_->Forward(ids, &*cache, /*commit=*/true, /*compute_logits=*/false);
    EXPECT_TRUE(pre.ok()) << pre.status().ToString();
    return std::move(*cache);
  }

  static double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

};

TEST_F(SdarStepGraphTest, FixedShapeStepAndCommitMatchTheEagerForward) {
  const std::vector<int64_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61};
  KvCache eager = Prefilled(2, 24, prompt), fixed = Prefilled(2, 24, prompt);
  auto graph = SdarStepGraph::Create(*model_, &fixed);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  EXPECT_FALSE((*graph)->captured());  // a CPU model: no capture, same arithmetic
  EXPECT_EQ((*graph)->batch(), 2);
  const int mask = static_cast<int>(model_->config().mask_token_id);
  // Two blocks: a partly masked step, a commit, then a step of the next block
  // (its positions must have advanced on the device).
  const std::vector<torch::Tensor> blocks = {
      torch::tensor({5, mask, 9, mask, mask, 11, mask, 200}, torch::kLong).view({2, 4}),
      torch::tensor({1, 2, 3, 4, 40, 41, 42, 43}, torch::kLong).view({2, 4})};
  for (size_t b = 0; b < blocks.size(); ++b) {
    auto want = model_->Forward(blocks[b], &eager, /*commit=*/false);
    auto got = (*graph)->Step(blocks[b]);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
    ASSERT_EQ(got->sizes(), want->sizes());
    const double err = MaxDiff(*got, *want);
    std::printf("block %zu: fixed-shape vs eager step max |logit diff| = %.3g\n", b, err);
    EXPECT_LT(err, 1e-4) << "block " << b;
    ASSERT_TRUE(model_->Forward(blocks[b], &eager, /*commit=*/true, /*compute_logits=*/false).ok());
    ASSERT_TRUE((*graph)->Commit(blocks[b]).ok());
    EXPECT_EQ(fixed.length(), eager.length());
  }
  // The committed prefixes agree too: score one more block on both.
  auto probe = torch::tensor({mask, mask, mask, mask, 6, mask, 8, mask}, torch::kLong).view({2, 4});
  auto want = model_->Forward(probe, &eager, /*commit=*/false);
  auto got = (*graph)->Step(probe);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_LT(MaxDiff(*got, *want), 1e-4);
}

// The measured attention choice keeps split-KV only when it is at least 2%
// faster; a missing time keeps SDPA. On a CPU nothing is captured or
// measured, and the decode reports no step attention.
TEST_F(SdarStepGraphTest, SplitKvIsKeptOnlyWhenMeasuredFasterAndNeverOnACpu) {
  EXPECT_TRUE(PreferSplitKv(100.0, 97.0));
  EXPECT_FALSE(PreferSplitKv(100.0, 98.5));  // within noise
  EXPECT_FALSE(PreferSplitKv(100.0, 140.0));
  EXPECT_FALSE(PreferSplitKv(0.0, 50.0));
  EXPECT_FALSE(PreferSplitKv(100.0, 0.0));
  KvCache cache = Prefilled(1, 16, {3, 17, 42, 99});
  auto graph = SdarStepGraph::Create(*model_, &cache);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  EXPECT_FALSE((*graph)->split_kv_attention());
  EXPECT_EQ((*graph)->sdpa_step_us(), 0.0);
  DecodeOptions o;
  o.max_new_tokens = 4;
  o.cuda_graphs = true;
  auto r = Decode(*model_, {3, 17, 42, 99}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step_attention, "");
}

TEST_F(SdarStepGraphTest, RefusesACacheThatWasReallocatedOrIsFull) {
  KvCache cache = Prefilled(2, 12, {3, 17, 42, 99, 7, 150, 23, 61});
  auto graph = SdarStepGraph::Create(*model_, &cache);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  auto ids = torch::full({2, 4}, 5, torch::kLong);
  EXPECT_FALSE((*graph)->Step(torch::full({2, 3}, 5, torch::kLong)).ok());  // wrong block width
  ASSERT_TRUE((*graph)->Commit(ids).ok());                                  // cache now full (12 of 12)
  EXPECT_EQ((*graph)->Step(ids).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SdarStepGraph::Create(*model_, &cache).status().code(), StatusCode::kInvalidArgument);

  KvCache other = Prefilled(2, 16, {3, 17, 42, 99});
  auto g2 = SdarStepGraph::Create(*model_, &other);
  ASSERT_TRUE(g2.ok());
  ASSERT_TRUE(other.SelectBatch(torch::tensor({1}, torch::kLong)).ok());
  auto stale = (*g2)->Step(torch::full({2, 4}, 5, torch::kLong));
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("reallocated"), std::string::npos) << stale.status().ToString();
  EXPECT_EQ(SdarStepGraph::Create(*model_, nullptr).status().code(), StatusCode::kInvalidArgument);
}

// Every greedy case of the reference fixture (static and dynamic remasking,
// prompts with a partial block): the fixed-shape path gives the eager tokens.
TEST_F(SdarStepGraphTest, GreedyDecodingThroughTheStepGraphEqualsEagerDecoding) {
  const auto ref = SdarReferenceJson();
  ASSERT_GE(ref["decode"].size(), 1u);
  for (const auto& c : ref["decode"]) {
    DecodeOptions o;
    o.max_new_tokens = c["max_new_tokens"].get<int64_t>();
    o.remasking = *ParseRemasking(c["remasking"].get<std::string>());
    o.denoising_steps = c["steps"].get<int64_t>();
    o.confidence_threshold = c["threshold"].get<double>();
    o.eos_ids = {};
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    auto eager = Decode(*model_, prompt, o);
    o.cuda_graphs = true;
    auto fixed = Decode(*model_, prompt, o);
    ASSERT_TRUE(eager.ok() && fixed.ok()) << fixed.status().ToString();
    EXPECT_EQ(fixed->tokens, eager->tokens) << c["remasking"].get<std::string>() << " prompt of " << prompt.size();
    EXPECT_EQ(fixed->steps_per_block, eager->steps_per_block);
    EXPECT_EQ(fixed->trace_steps, eager->trace_steps);
  }
}

// Sampled rows that stop at different blocks shrink the batch: the graph is
// made again for the smaller batch (profile.captures counts it) and the
// tokens still equal the eager decode's.
TEST_F(SdarStepGraphTest, ShrinkingBatchRemakesTheGraphAndKeepsTheTokens) {
  DecodeOptions o;
  o.max_new_tokens = 40;
  o.remasking = Remasking::kStatic;
  o.temperature = 1.0;
  o.num_samples = 6;
  o.seed = 5;
  o.eos_ids = {};
  const std::vector<int32_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61, 9};
  // The EOS id: a token sample 0 draws in its third block, so it stops there
  // while the others (independent draws) run on.
  auto free_run = Decode(*model_, prompt, o);
  ASSERT_TRUE(free_run.ok());
  o.eos_ids = {free_run->tokens[0][9]};
  auto eager = Decode(*model_, prompt, o);
  o.cuda_graphs = true;
  o.profile = true;
  auto fixed = Decode(*model_, prompt, o);
  ASSERT_TRUE(eager.ok() && fixed.ok()) << fixed.status().ToString();
  EXPECT_EQ(fixed->tokens, eager->tokens);
  EXPECT_EQ(fixed->stopped_at_eos, eager->stopped_at_eos);
  // Samples that decoded different numbers of blocks left the batch at
  // different times.
  std::set<size_t> blocks_decoded;
  for (const auto& t : eager->trace_tokens) blocks_decoded.insert(t.size());
  ASSERT_GE(blocks_decoded.size(), 2u) << "the seed/EOS choice no longer makes samples stop at different blocks";
  EXPECT_GE(fixed->profile.captures, 2);
}

// The separate-commit path (merge_commit = false) books every phase,
// commits included; the merged path has no commit forwards to book.
TEST_F(SdarStepGraphTest, ProfileBooksThePhasesOnlyWhenAskedFor) {
  DecodeOptions o;
  o.max_new_tokens = 12;
  o.remasking = Remasking::kStatic;
  o.eos_ids = {};
  o.merge_commit = false;
  const std::vector<int32_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61};
  auto plain = Decode(*model_, prompt, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->profile.step_forwards, 0);
  EXPECT_EQ(plain->profile.step_forward_s, 0.0);
  o.profile = true;
  auto r = Decode(*model_, prompt, o);
  ASSERT_TRUE(r.ok());
  const DecodeProfile& p = r->profile;
  EXPECT_EQ(r->tokens, plain->tokens);  // profiling changes timing only
  EXPECT_EQ(p.step_forwards, r->denoising_steps);
  EXPECT_EQ(p.commits, r->forward_passes - 1 - r->denoising_steps);  // minus prefill and steps
  EXPECT_EQ(p.captures, 0);
  EXPECT_GT(p.prefill_s, 0.0);
  EXPECT_GT(p.step_forward_s, 0.0);
  EXPECT_GT(p.sampling_s, 0.0);
  EXPECT_GT(p.commit_s, 0.0);
  const double booked = p.setup_s + p.prefill_s + p.graph_capture_s + p.step_forward_s + p.sampling_s +
                        p.readback_s + p.batch_select_s + p.commit_s;
  EXPECT_LE(booked, r->seconds);
  o.merge_commit = true;
  auto merged = Decode(*model_, prompt, o);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->tokens, plain->tokens);
  EXPECT_EQ(merged->profile.commits, 0);
  EXPECT_EQ(merged->profile.commit_s, 0.0);
  EXPECT_EQ(merged->profile.step_forwards, merged->denoising_steps);
}

// MergedStep(committed, ids) is Commit(committed) then Step(ids) in one
// forward: the same logits (f32, within 1e-5) and the same committed
// prefix (a probe step after it agrees); rows select logits of the block.
TEST_F(SdarStepGraphTest, MergedStepEqualsCommitThenStep) {
  const std::vector<int64_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61};
  KvCache split = Prefilled(2, 24, prompt), merged = Prefilled(2, 24, prompt);
  auto g_split = SdarStepGraph::Create(*model_, &split);
  SdarStepGraphOptions forms;
  forms.logits_in_graph = false;
  forms.commit = false;
  forms.merged_step = true;
  auto g_merged = SdarStepGraph::Create(*model_, &merged, forms);
  ASSERT_TRUE(g_split.ok() && g_merged.ok());
  const int mask = static_cast<int>(model_->config().mask_token_id);
  const auto done = torch::tensor({1, 2, 3, 4, 40, 41, 42, 43}, torch::kLong).view({2, 4});
  const auto next = torch::tensor({mask, 7, mask, mask, mask, mask, 9, mask}, torch::kLong).view({2, 4});
  ASSERT_TRUE((*g_split)->Commit(done).ok());
  auto want = (*g_split)->Step(next);
  auto got = (*g_merged)->MergedStep(done, next);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  ASSERT_EQ(got->sizes(), want->sizes());
  const double err = MaxDiff(*got, *want);
  std::printf("merged vs commit + step max |logit diff| = %.3g\n", err);
  EXPECT_LT(err, 1e-5);
  EXPECT_EQ(merged.length(), split.length());
  // Rows: each row's masked positions (row 0: 0, 2, 3; row 1: 0, 1, 3).
  const auto rows = torch::tensor({0, 2, 3, 0, 1, 3}, torch::kLong).view({2, 3});
  auto picked = (*g_merged)->Step(next, rows);
  auto whole = (*g_merged)->Step(next);
  ASSERT_TRUE(picked.ok() && whole.ok());
  ASSERT_EQ(picked->sizes(), (std::vector<int64_t>{2, 3, model_->config().vocab_size}));
  EXPECT_LT(MaxDiff(*picked, whole->gather(1, rows.unsqueeze(-1).expand({2, 3, whole->size(-1)}))), 1e-5);
  EXPECT_FALSE((*g_merged)->Step(next, torch::zeros({2, 5}, torch::kLong)).ok());  // more rows than the block
  // The committed prefixes agree: one more merged step and a commit + step.
  ASSERT_TRUE((*g_split)->Commit(next).ok());
  auto want2 = (*g_split)->Step(done, rows);
  auto got2 = (*g_merged)->MergedStep(next, done, rows);
  ASSERT_TRUE(want2.ok() && got2.ok());
  EXPECT_LT(MaxDiff(*got2, *want2), 1e-5);
  // Capacity 24 = 8 prompt + 4 blocks: at length 16 two blocks still fit,
  // at 20 only one (Step yes, MergedStep no).
  ASSERT_TRUE((*g_merged)->MergedStep(done, next).ok());
  EXPECT_EQ(merged.length(), 20);
  EXPECT_TRUE((*g_merged)->Step(next).ok());
  EXPECT_EQ((*g_merged)->MergedStep(done, next).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dice::generator
