// extension_sources.h — shared by the extension-form tests: hand-written
// extension-form candidates for the relu(f32[n]) task of relu_graph.h, in
// the style a DICE answer to the runtime's infilling prompt has (KernelBench
// style: <torch/extension.h>, a kernel, dice_forward allocating its output).
#pragma once

#include <string>

#include "dice/core/candidate.h"

namespace dice::runtime_test {

/// dice_forward body pieces: `expr` is what y[i] becomes from x[i].
inline std::string ReluLikeExtensionSource(const std::string& expr) {
  return "#include <torch/extension.h>\n"
         "#include <cuda_runtime.h>\n\n"
         "__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {\n"
         "  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
         "  if (i < n) y[i] = " + expr + ";\n"
         "}\n\n"
         "torch::Tensor dice_forward(torch::Tensor in0) {\n"
         "  TORCH_CHECK(in0.is_cuda(), \"in0 must be a CUDA tensor\");\n"
         "  TORCH_CHECK(in0.scalar_type() == torch::kFloat32, \"in0 must be float32\");\n"
         "  auto x = in0.contiguous();\n"
         "  auto y = torch::empty_like(x);\n"
         "  const int64_t n = x.numel();\n"
         "  const int threads = 256;\n"
         "  const int blocks = (int)((n + threads - 1) / threads);\n"
         "  relu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
         "  return y;\n"
         "}\n";
}

/// An extension-form candidate of `source`.
inline Candidate ExtensionCandidate(const std::string& origin, const std::string& source) {
  Candidate c;
  c.origin = origin;
  c.form = CandidateForm::kExtension;
  c.source = source;
  return c;
}

/// Correct relu.
inline Candidate GoodReluExtension() {
  return ExtensionCandidate("ext:relu", ReluLikeExtensionSource("fmaxf(x[i], 0.0f)"));
}
/// Compiles, computes the wrong thing (2x).
inline Candidate WrongReluExtension() {
  return ExtensionCandidate("ext:twice", ReluLikeExtensionSource("2.0f * x[i]"));
}
/// Does not compile (an undeclared identifier in the kernel).
inline Candidate BrokenReluExtension() {
  return ExtensionCandidate("ext:broken", ReluLikeExtensionSource("fmaxf(x[i], undeclared_zero)"));
}

}  // namespace dice::runtime_test
