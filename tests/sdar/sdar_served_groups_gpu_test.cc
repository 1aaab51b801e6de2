// The SDAR decoder's fusion groups served by dice's own runtime
// (sdar_served_groups.h, SdarModelOptions::serve_groups) on CUDA (ctest
// label `gpu`; each test skips without a device): without
// DICE_SDAR_SERVE_FORCE each winner is timed against the hand-written kernel
// at load and the decision recorded with both times (which one wins is not
// asserted: timing is no test). The numerics tests force serving
// (DICE_SDAR_SERVE_FORCE=1): in tune-sync mode with a
// fresh cache the groups are tuned at load and served; f32 logits stay
// within 1e-4 of the unfused LibTorch path; greedy tokens are equal with
// CUDA graphs on and off; a second model in cache mode is served the same
// groups (the runtime's loaded winners of this process; a new process would
// read them from the cache the first one filled). The groups include q/k
// RMSNorm + RoPE (qk_norm_rope.q / .k: the IR's rotate_half, pushed down to
// the row template's loads).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <string>

#include "greedy_tokens_compare.h"
#include "mid_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/sdar_served_groups.h"
#include "dice/torch_ext/optimize.h"

namespace dice::generator {
namespace {

#define DICE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

// Issue 19 item 6: f32 logits of the served groups against the unfused path.
constexpr double kF32Tolerance = 1e-4;

using dice::testing::MidSdarConfig;  // head_dim 128, GQA 4:1, 3 layers

// The process's dice mode and a cache of this test's own.
void UseMode(torch_ext::Mode mode) {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("dice_sdar_served_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
  }();
  torch_ext::Options o = torch_ext::GetRuntimeOptions();
  o.mode = mode;
  o.cache_dir = dir;
  o.tune.budget_s = 120;
  torch_ext::SetRuntimeOptions(o);
}

SdarModel Make(torch::ScalarType dtype, bool fuse, bool serve) {
  SdarModelOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.dtype = dtype;
  o.fuse_elementwise = fuse;
  o.serve_groups = serve;
  o.serve_rows = {4, 8};  // batch 1 and 2 denoising steps
  auto m = SdarModel::Random(MidSdarConfig(), o, 21);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

// DICE_SDAR_SERVE_FORCE=1 while in scope: every winner served untimed, so
// the served path's numerics are checked whatever the timing says.
class ForceServing {
 public:
  ForceServing() { ::setenv("DICE_SDAR_SERVE_FORCE", "1", 1); }
  ~ForceServing() { ::unsetenv("DICE_SDAR_SERVE_FORCE"); }
  ForceServing(const ForceServing&) = delete;
  ForceServing& operator=(const ForceServing&) = delete;
};

void PrintNotes(const SdarModel& m) {
  if (m.served_groups() == nullptr) return;
  for (const auto& n : m.served_groups()->notes()) std::printf("  %s\n", n.c_str());
}

TEST(SdarServedGroupsGpuTest, TunedAtLoadAndServedToASecondModel) {
  DICE_REQUIRE_CUDA();
  const ForceServing force;
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel tuned = Make(torch::kFloat32, true, true);
  ASSERT_NE(tuned.served_groups(), nullptr);
  PrintNotes(tuned);
  for (SdarGroup g : {SdarGroup::kRmsNorm, SdarGroup::kAddRmsNorm, SdarGroup::kSiluMul, SdarGroup::kQNormRope,
                      SdarGroup::kKNormRope}) {
    EXPECT_TRUE(tuned.served_groups()->Serves(g, 4)) << SdarGroupName(g);
    EXPECT_TRUE(tuned.served_groups()->Serves(g, 8)) << SdarGroupName(g);
  }
  UseMode(torch_ext::Mode::kCache);
  const SdarModel cached = Make(torch::kFloat32, true, true);
  ASSERT_NE(cached.served_groups(), nullptr);
  PrintNotes(cached);
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kAddRmsNorm, 8));
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kSiluMul, 8));
  EXPECT_TRUE(cached.served_groups()->Serves(SdarGroup::kQNormRope, 8));
}

TEST(SdarServedGroupsGpuTest, Float32LogitsMatchTheUnfusedPath) {
  DICE_REQUIRE_CUDA();
  const ForceServing force;
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel served = Make(torch::kFloat32, true, true), plain = Make(torch::kFloat32, false, false);
  ASSERT_NE(served.served_groups(), nullptr);
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kAddRmsNorm, 8));
  // q/k RMSNorm + RoPE served too (rotate_half in the row template); the
  // K/V cache store is then the unfused path's copy.
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kQNormRope, 8));
  ASSERT_TRUE(served.served_groups()->Serves(SdarGroup::kKNormRope, 8));
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  torch::manual_seed(4);
  auto prompt = torch::randint(0, 500, {2, 12}, opts);
  auto step = torch::randint(0, 511, {2, 4}, opts);  // 8 rows: the served shape
  std::vector<torch::Tensor> out[2];
  int i = 0;
  for (const SdarModel* m : {&served, &plain}) {
    auto cache = m->NewCache(2, 64);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(m->Forward(prompt, &*cache, /*commit=*/true, /*compute_logits=*/false).ok());
    auto s = m->Forward(step, &*cache);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    out[i++].push_back(s->cpu());
  }
  const double err = (out[0][0] - out[1][0]).abs().max().item<double>();
  std::printf("f32 served step: max |served - unfused| = %.3g\n", err);
  EXPECT_LE(err, kF32Tolerance);
}

TEST(SdarServedGroupsGpuTest, GreedyTokensEqualWithGraphsOnAndOff) {
  DICE_REQUIRE_CUDA();
  const ForceServing force;
  UseMode(torch_ext::Mode::kTuneSync);
  const SdarModel served = Make(torch::kFloat32, true, true), plain = Make(torch::kFloat32, false, false);
  testing::ExpectSameGreedyTokens(served, plain, {1, 2});
  PrintNotes(served);
}

// Without the force switch: each group with a winner at 4 and 8 rows is
// timed against the hand-written kernel, its decision holds both medians
// (> 0 µs) and says which runs, and Serves follows it. q and k share one
// timing (the pair with the K/V store).
TEST(SdarServedGroupsGpuTest, ServesAWinnerOnlyWhereTimedFasterThanTheHandKernel) {
  DICE_REQUIRE_CUDA();
  UseMode(torch_ext::Mode::kTuneSync);
  for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const SdarModel m = Make(dtype, true, true);
    ASSERT_NE(m.served_groups(), nullptr);
    PrintNotes(m);
    const auto decisions = m.served_groups()->decisions();
    ASSERT_EQ(decisions.size(), 2u * kNumSdarGroups) << "every group at 4 and 8 rows";
    int timed = 0;
    for (size_t i = 0; i < decisions.size(); ++i) {
      const ServedDecision& d = decisions[i];
      SCOPED_TRACE(std::string(SdarGroupName(d.group)) + " at " + std::to_string(d.rows) + " rows: " + d.why);
      EXPECT_EQ(d.rows, i < static_cast<size_t>(kNumSdarGroups) ? 4 : 8);
      EXPECT_EQ(m.served_groups()->Serves(d.group, d.rows), d.served);
      const bool qk = d.group == SdarGroup::kQNormRope || d.group == SdarGroup::kKNormRope;
      const int partner = d.group == SdarGroup::kQNormRope ? 1 : -1;
      const bool lone_qk = qk && !decisions[i + partner].winner;
      if (!d.winner || lone_qk) {
        EXPECT_FALSE(d.served);
        EXPECT_NE(d.why.find("hand-written kernel used"), std::string::npos);
        continue;
      }
      ++timed;
      EXPECT_GT(d.served_us, 0.0);
      EXPECT_GT(d.hand_us, 0.0);
      EXPECT_EQ(d.served, d.served_us < d.hand_us);
      EXPECT_NE(d.why.find(" µs vs hand "), std::string::npos);
    }
    EXPECT_GT(timed, 0) << "tune-sync found no winner to time";
  }
}

}  // namespace
}  // namespace dice::generator
