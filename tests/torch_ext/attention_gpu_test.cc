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

TEST(AttentionGpuTest, AutoKeepsSdpaForALongCausalSequenceAndMatchesTheUnfusedModel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  unsetenv("DICE_ATTENTION");
  unsetenv("DICE_MODE");
  EnsureRegistered();
  torch::manual_seed(0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const int64_t t = 1024;
  torch::jit::Module eager("CausalAttention");
  eager.register_buffer("mask", torch::tril(torch::ones({t, t}, cuda)).view({1, 1, t, t}));
  eager.define(kCausal);
  auto m = eager.clone();
  const std::vector<c10::IValue> qkv = {torch::randn({8, 12, t, 64}, cuda), torch::randn({8, 12, t, 64}, cuda),
                                        torch::randn({8, 12, t, 64}, cuda)};
  Options opt;
  opt.mode = Mode::kOff;  // the attention decision alone, no fusion group
  opt.example_inputs = qkv;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->warnings.empty());
  std::printf("attention: %s (%s)\n", rep->attention.c_str(), rep->attention_reason.c_str());
  EXPECT_GT(rep->attention_us.first, 0) << rep->attention_reason;
  EXPECT_GT(rep->attention_us.second, 0) << rep->attention_reason;
  EXPECT_EQ(rep->attention == "sdpa", KeepsSdpa(rep->attention_us.first, rep->attention_us.second))
      << rep->attention_reason;
  EXPECT_EQ(rep->attention, "sdpa") << rep->attention_reason;

  torch::NoGradGuard no_grad;
  at::Tensor want = eager.forward(qkv).toTensor();
  at::Tensor got = m.forward(qkv).toTensor();
  // Both sum 1024 products in float32 in different orders (cuBLAS vs the
  // fused kernel); PyTorch's default matmul precision (no TF32) on both.
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<double>();
}

}  // namespace
}  // namespace dice::torch_ext
