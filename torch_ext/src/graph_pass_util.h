// Private: small helpers shared by the measured capture passes
// (memory_format_pass.cc, attention_pass.cc, conv_bias_pass.cc) and the
// translation to IR (capture.cc), which read TorchScript value types and
// constants and print measured times in their reasons.
#pragma once

#include <cstdio>
#include <exception>
#include <string>
#include <unordered_set>
#include <vector>

#include <optional>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

namespace dice::torch_ext {

/// Whether `n` is a convolution the capture passes rewrite (the memory-format
/// pass's region seeds, the conv-bias pass): aten::conv2d, conv3d,
/// conv_transpose2d, conv_transpose3d, _convolution, convolution.
inline bool IsConvNode(const torch::jit::Node* n) {
  static const std::unordered_set<c10::Symbol> kinds = {
      c10::Symbol::aten("conv2d"),           c10::Symbol::aten("conv3d"),
      c10::Symbol::aten("conv_transpose2d"), c10::Symbol::aten("conv_transpose3d"),
      c10::Symbol::aten("_convolution"),     c10::Symbol::aten("convolution")};
  return kinds.count(n->kind()) != 0;
}

/// The functional names of the elementwise aten ops whose result has the
/// layout of their same-rank tensor operands and whose in-place form
/// ("relu_") the capture passes may treat like them (the memory-format
/// pass's region members; MakeElementwiseFunctional's filter). dropout is
/// the identity in eval.
inline const std::vector<const char*>& ElementwiseOpNames() {
  static const std::vector<const char*> names = {
      "relu",     "relu6",      "leaky_relu", "hardtanh", "elu",       "selu",      "celu",      "gelu",
      "silu",     "mish",       "sigmoid",    "tanh",     "hardsigmoid", "hardswish", "softplus", "clamp",
      "clamp_min", "clamp_max", "add",        "sub",      "rsub",      "mul",       "div",       "neg",
      "exp",      "log",        "abs",        "sqrt",     "rsqrt",     "pow",       "square",    "reciprocal",
      "maximum",  "minimum",    "dropout"};
  return names;
}

/// Whether `n` is the aten op `aten_name` ("matmul", "conv2d").
inline bool IsAten(const torch::jit::Node* n, const char* aten_name) {
  return n->kind() == c10::Symbol::aten(aten_name);
}

/// The rank of a tensor value from its TensorType, or -1 (not a tensor, or
/// the rank is not known).
inline int TensorRank(const torch::jit::Value* v) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return -1;
  auto dim = tt->dim();
  return dim ? static_cast<int>(*dim) : -1;
}

/// The first line of an exception's message (PyTorch's errors carry a
/// C++ backtrace after it), as the passes' reasons quote it. An error the
/// TorchScript interpreter wraps ("The following operation failed in the
/// TorchScript interpreter." and a graph traceback) gives the wrapped
/// error's line instead ("RuntimeError: <cause>", without the prefix). At
/// most 300 characters.
inline std::string FirstLine(const std::exception& e) {
  const std::string what = e.what();
  std::string line = what.substr(0, what.find('\n'));
  if (line.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    const size_t at = what.find("\nRuntimeError: ");
    if (at != std::string::npos) {
      const size_t from = at + std::string("\nRuntimeError: ").size();
      line = what.substr(from, what.find('\n', from) - from);
    }
  }
  return line.size() > 300 ? line.substr(0, 297) + "..." : line;
}

/// The dtype of a tensor value from its TensorType, or nullopt (not a
/// tensor, or the dtype is not known).
inline std::optional<c10::ScalarType> TensorDtype(const torch::jit::Value* v) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return std::nullopt;
  return tt->scalarType();
}

/// Whether `v` is the constant None.
inline bool IsConstNone(torch::jit::Value* v) {
  auto iv = torch::jit::toIValue(v);
  return iv && iv->isNone();
}

/// The measured rule every capture decision keeps a rewrite by (memory
/// format, attention, SDPA backend, conv algorithm): the candidate's median
/// is at least 2% below the base's (candidate_us <= 0.98 × base_us). A time
/// that is not positive (not measured) keeps the base. Pure; µs.
inline bool KeepsMeasuredGain(double base_us, double candidate_us) {
  return base_us > 0 && candidate_us > 0 && candidate_us <= 0.98 * base_us;
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

/// A 0-d tensor constant (how torch.jit.trace records a Python scalar such as
/// `x * 2.0`): its value. Such a tensor takes part in type promotion like a
/// scalar, so it becomes a weak kConstant.
inline std::optional<double> ZeroDimConst(const torch::jit::Value* v) {
  if (v->node()->kind() != c10::prim::Constant) return std::nullopt;
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isTensor()) return std::nullopt;
  const at::Tensor& t = iv->toTensor();
  if (!t.defined() || t.dim() != 0 || t.is_complex()) return std::nullopt;
  return t.item<double>();
}

/// A tensor constant operand (prim::Constant holding a tensor), or an
/// undefined tensor (not a constant, not a tensor).
inline at::Tensor TensorConst(const torch::jit::Value* v) {
  if (v->node()->kind() != c10::prim::Constant) return at::Tensor();
  auto iv = torch::jit::toIValue(v);
  return iv && iv->isTensor() ? iv->toTensor() : at::Tensor();
}

/// The scalar value of a constant operand (int/float/bool), or nullopt.
inline std::optional<double> ScalarConst(const torch::jit::Value* v) {
  if (auto z = ZeroDimConst(v)) return z;
  auto iv = torch::jit::toIValue(v);
  if (!iv) return std::nullopt;
  if (iv->isDouble()) return iv->toDouble();
  if (iv->isInt()) return static_cast<double>(iv->toInt());
  if (iv->isBool()) return iv->toBool() ? 1.0 : 0.0;
  return std::nullopt;
}

/// A constant operand: prim::Constant, or a prim::ListConstruct of constants
/// (how TorchScript spells `dim=[1, 2]` before constant propagation).
inline std::optional<c10::IValue> ConstIValue(const torch::jit::Value* v) {
  if (auto iv = torch::jit::toIValue(v)) return iv;
  const torch::jit::Node* n = v->node();
  if (n->kind() != c10::prim::ListConstruct) return std::nullopt;
  std::vector<int64_t> ints;
  for (const torch::jit::Value* e : n->inputs()) {
    auto iv = torch::jit::toIValue(e);
    if (!iv || !iv->isInt()) return std::nullopt;
    ints.push_back(iv->toInt());
  }
  return c10::IValue(ints);
}

/// Whether `v` is None (its type, or a constant None).
inline bool IsNoneConst(const torch::jit::Value* v) {
  if (v->type()->kind() == c10::TypeKind::NoneType) return true;
  auto iv = torch::jit::toIValue(v);
  return iv && iv->isNone();
}

}  // namespace dice::torch_ext
