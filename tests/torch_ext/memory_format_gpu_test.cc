// The memory-format pass's measured decision on a GPU (issue 18 item 2):
// auto times the frozen forward contiguous and channels_last, reports both,
// and whichever it keeps, the outputs equal eager's within conv tolerance and
// keep eager's strides. Skips without a GPU.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "../../torch_ext/src/memory_format_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

constexpr const char* kConvRelu = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [1, 1])
    return torch.relu(y)
)";

TEST(MemoryFormatGpuTest, AutoTimesBothLayoutsAndKeepsEagerOutputs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: torch.cuda is not available";
  unsetenv("DICE_MEMORY_FORMAT");
  unsetenv("DICE_MODE");
  EnsureRegistered();
  torch::manual_seed(0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  torch::jit::Module eager("ConvRelu");
  eager.register_parameter("w", torch::randn({64, 64, 3, 3}, cuda) * 0.05, false);
  eager.register_parameter("b", torch::randn({64}, cuda), false);
  eager.define(kConvRelu);
  auto m = eager.clone();
  const at::Tensor x = torch::randn({16, 64, 56, 56}, cuda);

  Options opt;
  opt.mode = Mode::kOff;  // the layout decision alone, no fusion group
  opt.example_inputs = {x};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->warnings.empty());
  EXPECT_GT(rep->memory_format_us.first, 0) << rep->memory_format_reason;
  EXPECT_GT(rep->memory_format_us.second, 0) << rep->memory_format_reason;
  EXPECT_TRUE(rep->memory_format == "contiguous" || rep->memory_format == "channels_last");
  // The kept layout follows the rule: channels_last only when >= 2% faster.
  EXPECT_EQ(rep->memory_format == "channels_last",
            KeepsChannelsLast(rep->memory_format_us.first, rep->memory_format_us.second))
      << rep->memory_format_reason;
  std::printf("memory format: %s (%s)\n", rep->memory_format.c_str(), rep->memory_format_reason.c_str());

  torch::NoGradGuard no_grad;
  at::Tensor want = eager.forward({x}).toTensor();
  at::Tensor got = m.forward({x}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-2, 1e-2)) << (got - want).abs().max().item<double>();
  EXPECT_EQ(got.strides(), want.strides());
}

}  // namespace
}  // namespace dice::torch_ext
