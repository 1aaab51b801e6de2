// The conv-algorithm pass's measured decision on a GPU (issue 18 item 2):
// auto times the forward with cuDNN's heuristics and with its search
// (benchmark = true per conv), reports both, keeps the search by the 2%
// rule, and the outputs stay eager's within the conv tolerance. TF32 is
// off for convolutions here so that every cuDNN algorithm computes in
// float32. Skips without a GPU.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "../../torch_ext/src/conv_algo_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

// level2/5's shape class: a stride-2 ConvTranspose2d, then an epilogue.
constexpr const char* kConvTransposeTanh = R"(
def forward(self, x):
    y = torch.conv_transpose2d(x, self.w, self.b, [2, 2], [1, 1], [1, 1])
    return torch.tanh(y - 0.5)
)";

TEST(ConvAlgoGpuTest, AutoTimesTheHeuristicsAndTheSearchAndKeepsEagersValues) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  unsetenv("DICE_CONV_ALGORITHM");
  unsetenv("DICE_MODE");
  EnsureRegistered();
  const bool tf32 = at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  at::globalContext().setAllowTF32CuDNN(false);
  torch::manual_seed(0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  torch::jit::Module eager("ConvTransposeTanh");
  eager.register_parameter("w", torch::randn({64, 32, 3, 3}, cuda) * 0.05, false);
  eager.register_parameter("b", torch::randn({32}, cuda), false);
  eager.define(kConvTransposeTanh);
  auto m = eager.clone();
  const at::Tensor x = torch::randn({16, 64, 64, 64}, cuda);
  Options opt;
  opt.mode = Mode::kOff;  // the capture decisions alone, no fusion group
  opt.example_inputs = {x};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  std::printf("conv algorithm: %s (%s)\n", rep->conv_algorithm.c_str(), rep->conv_algorithm_reason.c_str());
  EXPECT_GT(rep->conv_algorithm_us.first, 0) << rep->conv_algorithm_reason;
  EXPECT_GT(rep->conv_algorithm_us.second, 0) << rep->conv_algorithm_reason;
  EXPECT_EQ(rep->conv_algorithm == "benchmark",
            KeepsCudnnSearch(rep->conv_algorithm_us.first, rep->conv_algorithm_us.second))
      << rep->conv_algorithm_reason;
  EXPECT_EQ(rep->graph.find("aten::_convolution(") != std::string::npos, rep->conv_algorithm == "benchmark")
      << rep->graph;

  torch::NoGradGuard no_grad;
  at::Tensor want = eager.forward({x}).toTensor();
  at::Tensor got = m.forward({x}).toTensor();
  at::globalContext().setAllowTF32CuDNN(tf32);
  // cuDNN's float32 algorithms sum in different orders (FFT and Winograd among them).
  EXPECT_TRUE(torch::allclose(got, want, 1e-3, 1e-3)) << (got - want).abs().max().item<double>();
}

}  // namespace
}  // namespace dice::torch_ext
