// The attention pass's measured decision on a GPU (issue 18 item 3): auto
// times the forward unfused and with scaled_dot_product_attention, reports
// both, keeps SDPA by the >= 2% rule, and the outputs match the unfused
// model's. At a long causal sequence the unfused graph writes and reads a
// 8 x 12 x 1024 x 1024 float score matrix three times (~1.2 GB of traffic),
// which SDPA's fused kernels never materialise: there auto must keep SDPA.
// Skips without a GPU.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "../../torch_ext/src/attention_pass.h"
#include "../../torch_ext/src/sdpa_backend.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

constexpr const char* kCausal = R"(
def forward(self, q, k, v):
    T = q.size(2)
    att = torch.matmul(q, k.transpose(-2, -1)) * 0.125
    att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))
    att = torch.softmax(att, -1)
    return torch.matmul(att, v)
)";

// minGPT's causal attention on [8, 12, 1024, 64] CUDA q/k/v of `dtype`:
// the eager module, a clone to optimize, and the inputs.
struct CausalCase {
  torch::jit::Module eager{"CausalAttention"};
  torch::jit::Module m{"CausalAttention"};
  std::vector<c10::IValue> qkv;
};

CausalCase MakeCausalCase(torch::ScalarType dtype) {
  unsetenv("DICE_ATTENTION");
  unsetenv("DICE_MODE");
  EnsureRegistered();
  torch::manual_seed(0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  const int64_t t = 1024;
  CausalCase c;
  c.eager.register_buffer("mask", torch::tril(torch::ones({t, t}, cuda)).view({1, 1, t, t}));
  c.eager.define(kCausal);
  c.m = c.eager.clone();
  c.qkv = {torch::randn({8, 12, t, 64}, cuda), torch::randn({8, 12, t, 64}, cuda), torch::randn({8, 12, t, 64}, cuda)};
  return c;
}

Expected<OptimizeReport> OptimizeAttentionOnly(CausalCase& c) {
  Options opt;
  opt.mode = Mode::kOff;  // the attention decision alone, no fusion group
  opt.example_inputs = c.qkv;
  return optimize(c.m, opt);
}

TEST(AttentionGpuTest, AutoKeepsSdpaForALongCausalSequenceAndMatchesTheUnfusedModel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  CausalCase c = MakeCausalCase(torch::kFloat32);
  auto rep = OptimizeAttentionOnly(c);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->warnings.empty());
  std::printf("attention: %s (%s)\n", rep->attention.c_str(), rep->attention_reason.c_str());
  EXPECT_GT(rep->attention_us.first, 0) << rep->attention_reason;
  EXPECT_GT(rep->attention_us.second, 0) << rep->attention_reason;
  EXPECT_EQ(rep->attention == "sdpa", KeepsSdpa(rep->attention_us.first, rep->attention_us.second))
      << rep->attention_reason;
  EXPECT_EQ(rep->attention, "sdpa") << rep->attention_reason;

  torch::NoGradGuard no_grad;
  at::Tensor want = c.eager.forward(c.qkv).toTensor();
  at::Tensor got = c.m.forward(c.qkv).toTensor();
  // Both sum 1024 products in float32 in different orders (cuBLAS vs the
  // fused kernel); PyTorch's default matmul precision (no TF32) on both.
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<double>();
}

// The SDPA backend step on a bfloat16 causal chain: the chain becomes
// is_causal, every backend that fits is checked and timed beside the
// dispatcher (flash, efficient, cudnn and math all take an unmasked causal
// call in bf16), the kept one follows the 2% rule, and the optimized model
// matches eager within the bfloat16 limits.
TEST(AttentionGpuTest, Bf16CausalChainTimesEveryBackendAndKeepsTheRulesChoice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  CausalCase c = MakeCausalCase(torch::kBFloat16);
  auto rep = OptimizeAttentionOnly(c);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  std::printf("attention: %s (%s)\nbackend: %s (%s)\n", rep->attention.c_str(), rep->attention_reason.c_str(),
              rep->attention_backend.c_str(), rep->attention_backend_reason.c_str());
  EXPECT_EQ(rep->attention, "sdpa") << rep->attention_reason;
  EXPECT_NE(rep->attention_reason.find("1 of them causal"), std::string::npos) << rep->attention_reason;
  ASSERT_EQ(rep->attention_backends.size(), 5u) << rep->attention_backend_reason;
  double dispatch_us = 0, best_us = 0;
  std::string best = "dispatch";
  for (const SdpaCandidate& b : rep->attention_backends) {
    std::printf("  %-9s %10.1f us  %s\n", b.backend.c_str(), b.us, b.error.c_str());
    if (b.backend == "dispatch") dispatch_us = b.us;
    if (b.backend == "flash" || b.backend == "efficient") EXPECT_GT(b.us, 0) << b.backend << ": " << b.error;
    if (b.us > 0 && (best_us == 0 || b.us < best_us)) {
      best_us = b.us;
      best = b.backend;
    }
  }
  ASSERT_GT(dispatch_us, 0);
  const std::string want = KeepsPinnedBackend(dispatch_us, best_us) ? best : "dispatch";
  EXPECT_EQ(rep->attention_backend, want) << rep->attention_backend_reason;

  torch::NoGradGuard no_grad;
  at::Tensor ref = c.eager.forward(c.qkv).toTensor().to(torch::kFloat32);
  at::Tensor got = c.m.forward(c.qkv).toTensor().to(torch::kFloat32);
  // bf16 limits (DESIGN.md): the unfused chain rounds its scores to bf16
  // before the softmax, the fused kernels do not.
  EXPECT_TRUE(torch::allclose(got, ref, 2e-2, 2e-2)) << (got - ref).abs().max().item<double>();
}

}  // namespace
}  // namespace dice::torch_ext
