// Private: small helpers shared by the measured capture passes
// (memory_format_pass.cc, attention_pass.cc), which read TorchScript value
// types and print measured times in their reasons.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

namespace dice::torch_ext {

/// The rank of a tensor value from its TensorType, or -1 (not a tensor, or
/// the rank is not known).
inline int TensorRank(const torch::jit::Value* v) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return -1;
  auto dim = tt->dim();
  return dim ? static_cast<int>(*dim) : -1;
}

/// µs with one decimal ("70.0"), as the passes' reasons print them.
inline std::string FormatMicros(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", us);
  return buf;
}

/// Whether any of `inputs` is a CUDA tensor (a pass's auto mode measures
/// only then).
inline bool HasCudaTensor(const std::vector<c10::IValue>& inputs) {
  for (const auto& iv : inputs) {
    if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().is_cuda()) return true;
  }
  return false;
}

}  // namespace dice::torch_ext
