// Tests for the two work-saving paths of dice/generator/diffusion_decoder.h
// (issue 19 item 3, exactness per item 6) on tiny random SDAR models on the
// CPU: committing each block inside the next block's first denoising step
// (DecodeOptions::merge_commit) and running the LM head only on the
// still-masked positions (DecodeOptions::masked_logits_only) give the
// tokens of the old path (a separate commit forward, logits over the whole
// block) in f32, eagerly and through the fixed-shape step graph, for several
// block sizes, prompts, schedules and batches; and a block costs its
// denoising steps only (4 forwards at 4 steps, not 5).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tiny_sdar_config.h"

namespace dice::generator {
namespace {

// A tiny random f32 model (vocab 256, mask token 255) with blocks of `block_size`.
SdarModel TinyModel(int64_t block_size, uint64_t seed = 11) {
  SdarConfig c = TinySdarConfig(/*vocab=*/256, /*max_positions=*/512, /*tie_word_embeddings=*/false);
  c.block_size = block_size;
  auto m = SdarModel::Random(c, SdarModelOptions{}, seed);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

DecodeResult DecodeOk(const SdarModel& model, const std::vector<int32_t>& prompt, const DecodeOptions& o) {
  auto r = Decode(model, prompt, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : DecodeResult{};
}

DecodeOptions Options(int64_t max_new, Remasking remasking, int64_t steps, bool merge, bool masked_only) {
  DecodeOptions o;
  o.max_new_tokens = max_new;
  o.remasking = remasking;
  o.denoising_steps = steps;
  o.eos_ids = {};
  o.merge_commit = merge;
  o.masked_logits_only = masked_only;
  return o;
}

std::string Case(int64_t block, size_t prompt_len, Remasking r, int64_t steps, int64_t batch, bool graphs,
                 bool merge, bool masked_only) {
  return "block " + std::to_string(block) + " prompt " + std::to_string(prompt_len) + " " + RemaskingName(r) +
         " steps " + std::to_string(steps) + " batch " + std::to_string(batch) + (graphs ? " graphs" : " eager") +
         " merge " + std::to_string(merge) + " masked_only " + std::to_string(masked_only);
}

// Prompts with whole blocks only, a partial block and a single token.
const std::vector<std::vector<int32_t>> kPrompts = {
    {3, 17, 42, 99, 7, 150, 23, 61}, {3, 17, 42, 99, 7}, {9, 8, 200, 31, 77, 5, 64, 101, 12, 250, 1, 2, 3}, {42}};

// Greedy f32: every combination of the two options, eager and through the
// step graph, equals the old eager path (separate commit, whole-block
// logits) token for token, with the same steps per block and reveal steps.
TEST(DecodePathsTest, MergedCommitAndMaskedLogitsKeepTheGreedyTokens) {
  int cases = 0;
  for (int64_t block : {2, 4, 8}) {
    const SdarModel model = TinyModel(block);
    for (const auto& prompt : kPrompts) {
      for (Remasking r : {Remasking::kStatic, Remasking::kDynamic}) {
        for (int64_t steps : {block, int64_t{2}}) {
          for (int64_t batch : {1, 3}) {
            DecodeOptions old_path = Options(3 * block + 1, r, steps, /*merge=*/false, /*masked_only=*/false);
            old_path.num_samples = batch;
            old_path.confidence_threshold = 0.02;  // random weights: some positions pass, most do not
            const DecodeResult want = DecodeOk(model, prompt, old_path);
            ASSERT_EQ(want.tokens.size(), static_cast<size_t>(batch));
            for (bool graphs : {false, true}) {
              for (bool merge : {false, true}) {
                for (bool masked_only : {false, true}) {
                  if (!graphs && !merge && !masked_only) continue;  // that is `want`
                  DecodeOptions o = old_path;
                  o.cuda_graphs = graphs;
                  o.merge_commit = merge;
                  o.masked_logits_only = masked_only;
                  const DecodeResult got = DecodeOk(model, prompt, o);
                  const std::string what = Case(block, prompt.size(), r, steps, batch, graphs, merge, masked_only);
                  EXPECT_EQ(got.tokens, want.tokens) << what;
                  EXPECT_EQ(got.steps_per_block, want.steps_per_block) << what;
                  EXPECT_EQ(got.trace_tokens, want.trace_tokens) << what;
                  EXPECT_EQ(got.trace_steps, want.trace_steps) << what;
                  ++cases;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 4 * 2 * 2 * 2 * 7);
}

// The dynamic cases above must reveal different numbers of tokens in some
// step (else the padded masked-rows path of dynamic remasking went untested).
TEST(DecodePathsTest, DynamicThresholdOfTheGreedyCasesRevealsSeveralTokensInSomeSteps) {
  const SdarModel model = TinyModel(4);
  DecodeOptions o = Options(13, Remasking::kDynamic, 4, /*merge=*/true, /*masked_only=*/true);
  o.confidence_threshold = 0.02;
  std::set<int64_t> steps;
  for (const auto& prompt : kPrompts) {
    for (int64_t s : DecodeOk(model, prompt, o).steps_per_block) steps.insert(s);
  }
  EXPECT_GE(steps.size(), 2u) << "every block took the same number of steps: pick another threshold";
  EXPECT_LT(*steps.begin(), 4) << "no step revealed more than the static schedule";
}

// Sampled rows draw different tokens and stop (EOS) at different blocks, so
// finished samples leave the batch while a block is pending its merged
// commit. For a fixed masked_logits_only the random stream is the same with
// merge_commit on and off: the tokens must be equal, eagerly and through
// the step graph, for static and dynamic remasking.
TEST(DecodePathsTest, MergedCommitKeepsSampledTokensWhileTheBatchShrinks) {
  const SdarModel model = TinyModel(4);
  const std::vector<int32_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61, 9};
  for (Remasking r : {Remasking::kStatic, Remasking::kDynamic}) {
    for (bool masked_only : {false, true}) {
      DecodeOptions o = Options(40, r, 4, /*merge=*/false, masked_only);
      o.temperature = 1.0;
      o.num_samples = 6;
      o.seed = 5;
      o.confidence_threshold = 0.02;
      const DecodeResult free_run = DecodeOk(model, prompt, o);
      ASSERT_EQ(free_run.tokens.size(), 6u);
      o.eos_ids = {free_run.tokens[0][9]};  // sample 0 stops in its third block
      const DecodeResult want = DecodeOk(model, prompt, o);
      std::set<size_t> blocks_decoded;
      for (const auto& t : want.trace_tokens) blocks_decoded.insert(t.size());
      ASSERT_GE(blocks_decoded.size(), 2u) << "the seed/EOS choice no longer makes samples stop at different blocks";
      for (bool graphs : {false, true}) {
        DecodeOptions m = o;
        m.merge_commit = true;
        m.cuda_graphs = graphs;
        const DecodeResult got = DecodeOk(model, prompt, m);
        const std::string what = std::string(RemaskingName(r)) + " masked_only " + std::to_string(masked_only) +
                                 (graphs ? " graphs" : " eager");
        EXPECT_EQ(got.tokens, want.tokens) << what;
        EXPECT_EQ(got.stopped_at_eos, want.stopped_at_eos) << what;
        EXPECT_EQ(got.trace_steps, want.trace_steps) << what;
        EXPECT_GT(got.merged_commits, 0) << what;
      }
    }
  }
}

// Forwards per block (DecodeResult::forward_passes, commit_forwards,
// merged_commits; DecodeProfile::commits): a prompt of 2 whole blocks
// (1 prefill) and 6 new blocks of 4 static steps. The old path pays 4 steps
// + 1 commit for each block another follows (5), the merged path 4.
TEST(DecodePathsTest, MergedCommitTakesFourForwardsPerBlockInsteadOfFive) {
  const SdarModel model = TinyModel(4);
  const std::vector<int32_t> prompt = {3, 17, 42, 99, 7, 150, 23, 61};
  for (bool graphs : {false, true}) {
    DecodeOptions old_path = Options(24, Remasking::kStatic, 4, /*merge=*/false, /*masked_only=*/false);
    old_path.cuda_graphs = graphs;
    old_path.profile = true;
    DecodeOptions merged = old_path;
    merged.merge_commit = true;
    merged.masked_logits_only = true;
    const DecodeResult o = DecodeOk(model, prompt, old_path), m = DecodeOk(model, prompt, merged);
    ASSERT_EQ(o.steps_per_block, std::vector<int64_t>(6, 4));
    ASSERT_EQ(m.steps_per_block, std::vector<int64_t>(6, 4));
    EXPECT_EQ(o.tokens, m.tokens);
    // Old: prefill + 6 x 4 steps + 5 commits (the last block is never committed).
    EXPECT_EQ(o.forward_passes, 1 + 24 + 5);
    EXPECT_EQ(o.commit_forwards, 5);
    EXPECT_EQ(o.merged_commits, 0);
    EXPECT_EQ(o.profile.commits, 5);
    // Merged: prefill + 6 x 4 steps; blocks 1..5 commit their predecessor.
    EXPECT_EQ(m.forward_passes, 1 + 24);
    EXPECT_EQ(m.commit_forwards, 0);
    EXPECT_EQ(m.merged_commits, 5);
    EXPECT_EQ(m.profile.commits, 0);
    EXPECT_EQ(m.profile.step_forwards, 24);
    EXPECT_EQ(m.profile.commit_s, 0.0);
    // Per block that another block follows: 5 forwards before, 4 now.
    const int64_t blocks = static_cast<int64_t>(m.steps_per_block.size());
    EXPECT_EQ((o.denoising_steps + o.commit_forwards - 4) / (blocks - 1), 5);
    EXPECT_EQ((m.denoising_steps + m.commit_forwards - 4) / (blocks - 1), 4);
  }
}

}  // namespace
}  // namespace dice::generator
