// GPU test of JudgeProgram (program_judge.h) on a real extension-form program:
// ModelNew builds a CUDA kernel with load_inline, as DICE's end-to-end
// generations and the infilling items do, and is judged against Model by the
// KernelBench protocol on the device. Skips without a CUDA device.
#include <string>

#include <gtest/gtest.h>

#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/program_judge.h"

namespace dice::runtime {
namespace {

constexpr const char* kReference = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(4096, 4096)]

def get_init_inputs():
    return []
)";

std::string InlineProgram(const std::string& kernel_body) {
  return std::string(R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void relu2_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
)") + kernel_body + R"(
}
torch::Tensor relu2(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu2_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_source = "torch::Tensor relu2(torch::Tensor x);"
ext = load_inline(name="relu2_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu2"])

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return ext.relu2(x.contiguous())
)";
}

TEST(ProgramJudgeGpuTest, LoadInlineProgramIsCompiledVerifiedAndTimed) {
  if (!CudaDriver::Get().ok()) GTEST_SKIP() << "no GPU: " << CudaDriver::Get().status().ToString();
  ProgramJudgeOptions o;
  o.timeout_s = 280;
  auto good = JudgeProgram(kReference, InlineProgram("  if (i < n) y[i] = x[i] > 0.f ? 2.f * x[i] : 0.f;"), o);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->outcome, "correct") << good->error;
  EXPECT_TRUE(good->compiled);
  EXPECT_GT(good->compile_s, 0.0);
  EXPECT_GT(good->ref_ms, 0.0);
  EXPECT_GT(good->new_ms, 0.0);
  std::printf("[program-judge-gpu] relu*2 4096x4096: PyTorch %.4f ms, ModelNew %.4f ms, speedup %.2fx, build %.1f s\n",
              good->ref_ms, good->new_ms, good->speedup, good->compile_s);

}

// A separate test (and ctest entry) each: one load_inline build takes ~40-90 s.
TEST(ProgramJudgeGpuTest, WrongKernelIsCompiledAndRejected) {
  if (!CudaDriver::Get().ok()) GTEST_SKIP() << "no GPU: " << CudaDriver::Get().status().ToString();
  ProgramJudgeOptions o;
  o.timeout_s = 280;
  // Skips the last element of every 256-thread block: verified and rejected.
  auto wrong = JudgeProgram(
      kReference, InlineProgram("  if (i < n && threadIdx.x != 255) y[i] = x[i] > 0.f ? 2.f * x[i] : 0.f;"), o);
  ASSERT_TRUE(wrong.ok()) << wrong.status().ToString();
  EXPECT_EQ(wrong->outcome, "incorrect") << wrong->error;
  EXPECT_TRUE(wrong->compiled);
}

}  // namespace
}  // namespace dice::runtime
