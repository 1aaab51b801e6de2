// Tests for dice/training/rollout_numerics.h and the rollout decoding of
// `dice train rl` (issue 19 item 5) on the CPU: the scored-slot order of
// PackTrace on a hand-made trace, the gap on hand-made numbers, the
// decoder's recorded log-probabilities against the trainer's on a tiny
// random model (equal to rounding in f32 on a CPU, chunked packing
// included), and RlOptions::rollout_graphs: a no-op on a CPU (the same
// weights either way), the step reports and CSV carry the gap.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/training/examples.h"
#include "dice/training/losses.h"
#include "dice/training/model_init.h"
#include "dice/training/rl.h"
#include "dice/training/rollout_numerics.h"

namespace dice::training {
namespace {

// Prompt of 3 tokens, blocks of 4: the first block holds one response
// token (trace 0, step 0); the second (trace 1..4) was revealed at steps
// 1, 0, 1, 0. PackTrace scores per block, per step, by position: 0 | 2, 4 | 1, 3.
TEST(RolloutNumericsTest, ScoredTraceIndicesFollowPackTrace) {
  const RolloutTrace trace{{10, 11, 12}, {20, 21, 22, 23, 24}, {0, 1, 0, 1, 0}};
  auto order = ScoredTraceIndices(trace, 4);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  EXPECT_EQ(*order, (std::vector<int64_t>{0, 2, 4, 1, 3}));
  auto packed = PackTrace(trace, 4, /*mask_token_id=*/99);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  ASSERT_EQ(packed->targets.size(0), 5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(packed->targets[i].item<int64_t>(), trace.tokens[(*order)[i]]) << "slot " << i;
  }
  EXPECT_FALSE(ScoredTraceIndices({{10, 11, 12}, {20, 21}, {0, 0}}, 4).ok()) << "not whole blocks";
  EXPECT_FALSE(ScoredTraceIndices({{10, 11, 12}, {20}, {-1}}, 4).ok()) << "negative step";
  EXPECT_FALSE(ScoredTraceIndices({{}, {20, 21, 22, 23}, {0, 0, 0, 0}}, 4).ok()) << "empty prompt";
}

TEST(RolloutNumericsTest, GapIsTheMeanAndMaxAbsoluteDifference) {
  const std::vector<float> decoder = {-0.5f, -1.0f, -2.0f};
  LogProbGap gap;
  // Slot 0 is trace token 2 (|-2 - -2.25| = 0.25), slot 1 trace token 0 (0).
  ASSERT_TRUE(AddLogProbGap(decoder, {2, 0}, torch::tensor({-2.25f, -0.5f}), &gap).ok());
  EXPECT_EQ(gap.tokens, 2);
  EXPECT_NEAR(gap.max_abs, 0.25, 1e-7);
  EXPECT_NEAR(gap.mean_abs(), 0.125, 1e-7);
  ASSERT_TRUE(AddLogProbGap(decoder, {1}, torch::tensor({-0.9f}), &gap).ok());
  EXPECT_EQ(gap.tokens, 3);
  EXPECT_NEAR(gap.max_abs, 0.25, 1e-7);
  EXPECT_NEAR(gap.sum_abs, 0.35, 1e-6);
  EXPECT_EQ(LogProbGap{}.mean_abs(), 0.0);
  EXPECT_FALSE(AddLogProbGap(decoder, {0, 1}, torch::tensor({-1.0f}), &gap).ok()) << "size mismatch";
  EXPECT_FALSE(AddLogProbGap(decoder, {3}, torch::tensor({-1.0f}), &gap).ok()) << "index outside";
  EXPECT_FALSE(AddLogProbGap(decoder, {0}, torch::tensor({NAN}), &gap).ok()) << "non-finite";
  EXPECT_EQ(gap.tokens, 3) << "a failed call adds nothing";
}

// The decoder's log p of each sampled token (record_logprobs) is what the
// trainer recomputes on the packed trace (f32, CPU: rounding only), also
// when the trace is packed in chunks.
TEST(RolloutNumericsTest, DecoderLogProbsMatchTheTrainersOnCpu) {
  const generator::SdarConfig c = generator::TinySdarConfig(256, 512, /*tie_word_embeddings=*/false);
  auto model = generator::SdarModel::Random(c, {}, 7);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<int32_t> prompt = {3, 17, 42, 99, 7};
  for (bool graphs : {false, true}) {
    generator::DecodeOptions o;
    o.max_new_tokens = 20;
    o.num_samples = 3;
    o.temperature = 1.0;
    o.seed = 9;
    o.eos_ids = {};
    o.cuda_graphs = graphs;
    o.record_logprobs = true;
    auto d = generator::Decode(*model, prompt, o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    for (int64_t cap : {0, 24}) {
      LogProbGap gap;
      for (size_t i = 0; i < d->trace_tokens.size(); ++i) {
        const RolloutTrace trace{prompt, d->trace_tokens[i], d->trace_steps[i]};
        auto order = ScoredTraceIndices(trace, c.block_size);
        ASSERT_TRUE(order.ok()) << order.status().ToString();
        auto chunks = PackTraceChunks(trace, c.block_size, c.mask_token_id, cap);
        ASSERT_TRUE(chunks.ok()) << chunks.status().ToString();
        size_t offset = 0;
        for (const PackedTrace& p : *chunks) {
          torch::NoGradGuard no_grad;
          auto logits = model->ForwardPacked(p.ids, p.positions, p.mask);
          ASSERT_TRUE(logits.ok()) << logits.status().ToString();
          const auto lp = ScoredLogProbs(*logits, p.scored, p.targets, c.mask_token_id);
          const size_t n = static_cast<size_t>(lp.size(0));
          const std::vector<int64_t> slots(order->begin() + offset, order->begin() + offset + n);
          ASSERT_TRUE(AddLogProbGap(d->trace_logprobs[i], slots, lp, &gap).ok());
          offset += n;
        }
        EXPECT_EQ(offset, d->trace_tokens[i].size());
      }
      EXPECT_EQ(gap.tokens, 3 * static_cast<int64_t>(d->trace_tokens[0].size()));
      EXPECT_LT(gap.max_abs, 1e-4) << (graphs ? "graphs" : "eager") << " cap " << cap;
      std::printf("cpu f32 %s, chunks of %lld: |logp decoder - trainer| mean %.3g max %.3g over %lld tokens\n",
                  graphs ? "graph form" : "eager", static_cast<long long>(cap), gap.mean_abs(), gap.max_abs,
                  static_cast<long long>(gap.tokens));
    }
  }
}

// `dice train rl` on a CPU: rollout_graphs on (default) and off give the
// same weights (rollouts decode eagerly on a CPU either way); each step
// reports the decoder-vs-trainer gap and the CSV carries it.
TEST(RolloutNumericsTest, RolloutGraphsOptionIsANoOpOnCpuAndStepsReportTheGap) {
  char tmpl[] = "/tmp/dice_rollout_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  torch::set_num_threads(1);
  const generator::SdarConfig c = generator::TinySdarConfig(260, 512, /*tie_word_embeddings=*/true);
  ASSERT_TRUE(InitRandomCheckpoint(c, dir + "/init", 4).ok());
  ASSERT_TRUE(WriteByteTokenizer(dir + "/init").ok());
  std::ofstream(dir + "/templates.json") << R"({"system": "", "infilling": "R:{reference}\nP:{prefix}\nS:{suffix}", )"
                                         << R"("end_to_end": "R:{reference}"})";
  CukeExample e;
  e.id = "relu";
  e.kind = "infill";
  e.reference = "torch.relu(x)";
  e.middle =
      "__global__ void relu_kernel(const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + "
      "threadIdx.x;\n  if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }\n}\n";
  e.suffix = "y = k(x)";
  e.split = "train";
  std::ofstream(dir + "/tasks.jsonl") << e.ToJsonLine() << "\n";
  RlOptions r;
  r.model_dir = dir + "/init";
  r.tasks_path = r.inject_path = dir + "/tasks.jsonl";
  r.templates_path = dir + "/templates.json";
  r.reward = "compile";
  r.group_size = 4;
  r.max_new_tokens = 16;
  r.lr = 1e-3;
  r.steps = 2;
  EXPECT_TRUE(r.rollout_graphs) << "default: on (for CUDA models)";
  r.out_dir = dir + "/on";
  auto on = RunRl(r, nullptr);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  r.rollout_graphs = false;
  r.out_dir = dir + "/off";
  auto off = RunRl(r, nullptr);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(on->parameter_digest, off->parameter_digest) << "on a CPU rollouts must not depend on the option";
  ASSERT_EQ(on->steps.size(), 2u);
  EXPECT_GE(on->steps[0].groups_used, 1) << "no group used: nothing measured";
  for (const RlStepReport& s : on->steps) {
    EXPECT_EQ(s.rollout_graphs_made, 0) << "a CPU decodes eagerly";
    if (s.groups_used == 0) continue;
    EXPECT_GT(s.logp_gap_tokens, 0) << "the decoded rollouts count, the injected one does not";
    EXPECT_LT(s.logp_gap_max, 1e-4);
    EXPECT_LE(s.logp_gap_mean, s.logp_gap_max);
  }
  std::ifstream csv(dir + "/on/rl_log.csv");
  std::string header;
  ASSERT_TRUE(std::getline(csv, header));
  EXPECT_NE(header.find("rollout_tokens_per_s"), std::string::npos) << header;
  EXPECT_NE(header.find("logp_gap_mean,logp_gap_max,rollout_graphs_made"), std::string::npos) << header;
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::training
