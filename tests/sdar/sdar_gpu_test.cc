// GPU tests for the SDAR model and block-diffusion decoding (ctest label
// `gpu`; each test skips without a CUDA device): float32 and bfloat16
// parity with the plain-PyTorch reference on CUDA, greedy decoding on CUDA
// equal to the reference loop, seeded sampling with the CUDA generator.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "sdar_reference_fixture.h"

namespace dice {
namespace {

using dice::testing::SdarReferenceDir;
using dice::testing::SdarReferenceForwardIds;
using dice::testing::SdarReferenceJson;
using dice::testing::SdarReferenceTensor;

#define DICE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

Expected<SdarModel> LoadOnCuda(const std::string& sub, torch::ScalarType dtype) {
  SdarModelOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  o.dtype = dtype;
  return SdarModel::Load(SdarReferenceDir() + "/" + sub, o);
}

TEST(SdarGpuTest, Float32ForwardOnCudaMatchesReference) {
  DICE_REQUIRE_CUDA();
  ASSERT_FALSE(SdarReferenceDir().empty());
  auto loaded = LoadOnCuda("f32", torch::kFloat32);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const SdarModel& m = *loaded;
  auto logits = m.Forward(SdarReferenceForwardIds());
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_TRUE(logits->is_cuda());
  auto ref = SdarReferenceTensor("logits_f32");
  const double err = (logits->cpu() - ref).abs().max().item<double>();
  std::printf("cuda f32 max |logit - reference| = %.3g\n", err);
  EXPECT_LT(err, 1e-4);
}

TEST(SdarGpuTest, Bfloat16ForwardOnCudaStaysCloseToReference) {
  DICE_REQUIRE_CUDA();
  ASSERT_FALSE(SdarReferenceDir().empty());
  auto loaded = LoadOnCuda("bf16", torch::kBFloat16);  // BF16 checkpoint, bf16 compute
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const SdarModel& m = *loaded;
  auto logits = m.Forward(SdarReferenceForwardIds());
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  auto ref = SdarReferenceTensor("logits_bf16");  // same bf16 weights, float32 compute
  const double scale = ref.abs().max().item<double>();
  const double err = (logits->cpu() - ref).abs().max().item<double>();
  std::printf("cuda bf16 max |logit - reference| = %.3g (max |logit| %.3g)\n", err, scale);
  EXPECT_LT(err, 0.05 * scale);
}

TEST(SdarGpuTest, GreedyDecodingOnCudaMatchesReferenceLoop) {
  DICE_REQUIRE_CUDA();
  ASSERT_FALSE(SdarReferenceDir().empty());
  auto loaded = LoadOnCuda("f32", torch::kFloat32);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const SdarModel& m = *loaded;
  int exact = 0, cases = 0;
  for (const auto& c : SdarReferenceJson()["decode"]) {
    DecodeOptions o;
    o.max_new_tokens = c["max_new_tokens"].get<int64_t>();
    o.remasking = *ParseRemasking(c["remasking"].get<std::string>());
    o.denoising_steps = c["steps"].get<int64_t>();
    o.confidence_threshold = c["threshold"].get<double>();
    o.eos_ids = {};
    auto r = Decode(m, c["prompt"].get<std::vector<int32_t>>(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto want = c["tokens"].get<std::vector<int32_t>>();
    ASSERT_EQ(r->tokens[0].size(), want.size());
    size_t i = 0;
    while (i < want.size() && r->tokens[0][i] == want[i]) ++i;
    ++cases;
    if (i == want.size()) {
      ++exact;
    } else {
      EXPECT_LT(c["gaps"][i].get<double>(), 1e-3) << "case " << cases << " token " << i;
    }
  }
  EXPECT_GE(exact, cases - 3);
}

TEST(SdarGpuTest, SeededSamplingOnCudaIsReproducible) {
  DICE_REQUIRE_CUDA();
  ASSERT_FALSE(SdarReferenceDir().empty());
  auto loaded = LoadOnCuda("f32", torch::kFloat32);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const SdarModel& m = *loaded;
  DecodeOptions o;
  o.max_new_tokens = 24;
  o.temperature = 1.0;
  o.top_p = 0.95;
  o.num_samples = 8;
  o.seed = 11;
  o.eos_ids = {};
  auto a = Decode(m, {3, 17, 42, 99, 7}, o), b = Decode(m, {3, 17, 42, 99, 7}, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  o.seed = 12;
  auto c = Decode(m, {3, 17, 42, 99, 7}, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->tokens, c->tokens);
}

}  // namespace
}  // namespace dice
