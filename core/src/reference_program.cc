// RenderReferenceProgram: prints a fusion group as a KernelBench-style PyTorch
// program (class Model, get_inputs, get_init_inputs). Each op is spelled the
// way PyTorch eager code writes it, and each spelling reaches the same ATen
// call the reference executor (runtime/reference/reference_executor.cc) makes,
// so the program and the oracle agree op for op.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dice/core/ir.h"

namespace dice {
inline namespace core {
namespace ir {

namespace {

/// Shortest decimal text that reads back to exactly `v`, as a Python float
/// literal ("0.5", "1.0", "1e-05", "float(\"inf\")"). Negative values are
/// parenthesised so they bind correctly in any operator position.
std::string PyFloat(double v) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string text = buf;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  if (text[0] == '-') text = "(" + text + ")";
  return text;
}

std::string PyTupleOfInts(const std::vector<int64_t>& items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(items[i]);
  }
  if (items.size() == 1) out += ",";
  return out + ")";
}

const char* TorchDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "torch.float32";
    case DType::kFloat16: return "torch.float16";
    case DType::kBFloat16: return "torch.bfloat16";
  }
  return "torch.float32";
}

std::string PyBool(bool b) { return b ? "True" : "False"; }

/// Reduction dims as PyTorch gets them: an explicit tuple (an empty IR dims
/// list means every dim; torch.logsumexp rejects dim=() on rank > 0).
std::vector<int64_t> ReductionDims(const Op& op, int rank) {
  if (!op.dims.empty()) return op.dims;
  std::vector<int64_t> all;
  for (int d = 0; d < rank; ++d) all.push_back(d);
  return all;
}

/// The torch expression of one op with argument expressions `a`.
/// `a_rank` is the rank of the first argument. `a_const`/`b_const` tell
/// which binary operands are weak scalars.
std::string OpExpression(const Op& op, const std::vector<std::string>& a, int a_rank, bool a_const,
                         bool b_const) {
  const auto& s = op.scalars;
  auto call = [&](const char* fn) { return std::string(fn) + "(" + a[0] + ")"; };
  switch (op.kind) {
    case OpKind::kConstant: return PyFloat(s[0]);
    case OpKind::kNeg: return call("torch.neg");
    case OpKind::kAbs: return call("torch.abs");
    case OpKind::kExp: return call("torch.exp");
    case OpKind::kLog: return call("torch.log");
    case OpKind::kSqrt: return call("torch.sqrt");
    case OpKind::kRsqrt: return call("torch.rsqrt");
    case OpKind::kReciprocal: return call("torch.reciprocal");
    case OpKind::kTanh: return call("torch.tanh");
    case OpKind::kSigmoid: return call("torch.sigmoid");
    case OpKind::kErf: return call("torch.erf");
    case OpKind::kRelu: return call("torch.relu");
    case OpKind::kGelu:
      return op.ivalue == 1 ? "F.gelu(" + a[0] + ", approximate=\"tanh\")" : call("F.gelu");
    case OpKind::kSilu: return call("F.silu");
    case OpKind::kMish: return call("F.mish");
    case OpKind::kSoftplus:
      return "F.softplus(" + a[0] + ", beta=" + PyFloat(s[0]) + ", threshold=" + PyFloat(s[1]) + ")";
    case OpKind::kSoftsign: return call("F.softsign");
    case OpKind::kElu:
      if (s[1] == 1.0 && s[2] == 1.0) return "F.elu(" + a[0] + ", alpha=" + PyFloat(s[0]) + ")";
      // F.elu exposes only alpha; the ATen op carries scale and input_scale.
      return "torch.ops.aten.elu(" + a[0] + ", " + PyFloat(s[0]) + ", " + PyFloat(s[1]) + ", " +
             PyFloat(s[2]) + ")";
    case OpKind::kSelu: return call("F.selu");
    case OpKind::kLeakyRelu: return "F.leaky_relu(" + a[0] + ", negative_slope=" + PyFloat(s[0]) + ")";
    case OpKind::kClamp: {
      const bool has_min = !(std::isinf(s[0]) && s[0] < 0);
      const bool has_max = !(std::isinf(s[1]) && s[1] > 0);
      if (!has_min && !has_max) return a[0] + ".clone()";
      std::string out = "torch.clamp(" + a[0];
      if (has_min) out += ", min=" + PyFloat(s[0]);
      if (has_max) out += ", max=" + PyFloat(s[1]);
      return out + ")";
    }
    case OpKind::kHardswish: return call("F.hardswish");
    case OpKind::kHardsigmoid: return call("F.hardsigmoid");
    case OpKind::kPowScalar: return "torch.pow(" + a[0] + ", " + PyFloat(s[0]) + ")";
    case OpKind::kCast: return a[0] + ".to(" + TorchDType(static_cast<DType>(op.ivalue)) + ")";
    case OpKind::kContiguous:
      return a[0] + ".contiguous(memory_format=" +
             (op.ivalue == 1 ? "torch.channels_last" : op.ivalue == 2 ? "torch.channels_last_3d" : "torch.contiguous_format") +
             ")";
    case OpKind::kAdd: return a[0] + " + " + a[1];
    case OpKind::kSub: return a[0] + " - " + a[1];
    case OpKind::kMul: return a[0] + " * " + a[1];
    case OpKind::kDiv: return a[0] + " / " + a[1];
    case OpKind::kMaximum:
    case OpKind::kMinimum: {
      // torch.maximum takes tensors only: a weak scalar becomes a 0-d tensor
      // of the other operand's dtype and device.
      std::string x = a[0], y = a[1];
      if (a_const) x = "torch.tensor(" + a[0] + ", dtype=" + a[1] + ".dtype, device=" + a[1] + ".device)";
      if (b_const) y = "torch.tensor(" + a[1] + ", dtype=" + a[0] + ".dtype, device=" + a[0] + ".device)";
      return std::string(op.kind == OpKind::kMaximum ? "torch.maximum(" : "torch.minimum(") + x + ", " + y + ")";
    }
    case OpKind::kPow: return "torch.pow(" + a[0] + ", " + a[1] + ")";
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kAmax:
    case OpKind::kAmin:
    case OpKind::kLogSumExp: {
      const char* fn = op.kind == OpKind::kSum    ? "torch.sum"
                       : op.kind == OpKind::kMean ? "torch.mean"
                       : op.kind == OpKind::kAmax ? "torch.amax"
                       : op.kind == OpKind::kAmin ? "torch.amin"
                                                  : "torch.logsumexp";
      return std::string(fn) + "(" + a[0] + ", dim=" + PyTupleOfInts(ReductionDims(op, a_rank)) +
             ", keepdim=" + PyBool(op.keepdim) + ")";
    }
    case OpKind::kNorm:
      return "torch.linalg.vector_norm(" + a[0] + ", ord=" + PyFloat(s[0]) +
             ", dim=" + PyTupleOfInts(ReductionDims(op, a_rank)) + ", keepdim=" + PyBool(op.keepdim) + ")";
    case OpKind::kSoftmax: return "F.softmax(" + a[0] + ", dim=" + std::to_string(op.dims[0]) + ")";
    case OpKind::kLogSoftmax: return "F.log_softmax(" + a[0] + ", dim=" + std::to_string(op.dims[0]) + ")";
    case OpKind::kLayerNorm:
      return "F.layer_norm(" + a[0] + ", " + a[0] + ".shape[-" + std::to_string(op.ivalue) + ":], " +
             (a.size() > 1 ? a[1] : "None") + ", " + (a.size() > 2 ? a[2] : "None") + ", " + PyFloat(s[0]) + ")";
    case OpKind::kGroupNorm:
      return "F.group_norm(" + a[0] + ", " + std::to_string(op.ivalue) + ", " + (a.size() > 1 ? a[1] : "None") +
             ", " + (a.size() > 2 ? a[2] : "None") + ", " + PyFloat(s[0]) + ")";
    case OpKind::kLinear:
      return "F.linear(" + a[0] + ", " + a[1] + (a.size() > 2 ? ", " + a[2] : std::string()) + ")";
    case OpKind::kAvgPool:
    case OpKind::kMaxPool: {  // window = stride, no padding (ir.h)
      const std::string fn = std::string(op.kind == OpKind::kAvgPool ? "F.avg_pool" : "F.max_pool") +
                             std::to_string(op.dims.size()) + "d";
      return fn + "(" + a[0] + ", kernel_size=" + PyTupleOfInts(op.dims) + ")";
    }
    case OpKind::kRotateHalf:  // cat(-x[..., d/2:], x[..., :d/2]) (ir.h)
      return "torch.cat((-" + a[0] + "[..., " + a[0] + ".shape[-1] // 2:], " + a[0] + "[..., :" + a[0] +
             ".shape[-1] // 2]), dim=-1)";
    case OpKind::kConv2d: {
      auto pair = [&](size_t k) { return "(" + std::to_string(op.dims[k]) + ", " + std::to_string(op.dims[k + 1]) + ")"; };
      return "F.conv2d(" + a[0] + ", " + a[1] + ", " + (a.size() > 2 ? a[2] : "None") + ", stride=" + pair(0) +
             ", padding=" + pair(2) + ", dilation=" + pair(4) + ", groups=" + std::to_string(op.ivalue) + ")";
    }
  }
  return "None";
}

std::string RandnCall(const TensorSpec& spec, std::string_view device) {
  const std::string tail =
      std::string("dtype=") + TorchDType(spec.dtype) + ", device=\"" + std::string(device) + "\")";
  if (spec.is_contiguous() || spec.strides.size() != spec.shape.size()) {
    std::string dims;
    for (size_t i = 0; i < spec.shape.size(); ++i) dims += std::to_string(spec.shape[i]) + ", ";
    if (spec.shape.empty()) dims = "(), ";
    return "torch.randn(" + dims + tail;
  }
  // Strided view over a storage just large enough for the spec.
  int64_t storage = 1;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    if (spec.shape[i] == 0) storage = 0;
  }
  if (storage != 0) {
    for (size_t i = 0; i < spec.shape.size(); ++i) storage += (spec.shape[i] - 1) * spec.strides[i];
  }
  return "torch.randn(" + std::to_string(storage) + ", " + tail + ".as_strided(" + PyTupleOfInts(spec.shape) +
         ", " + PyTupleOfInts(spec.strides) + ")";
}

std::string PyString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string RenderReferenceProgram(const Graph& graph, const std::vector<TensorSpec>& inputs) {
  return RenderReferenceProgram(graph, inputs, "cuda");
}

std::string RenderReferenceProgram(const Graph& graph, const std::vector<TensorSpec>& inputs,
                                   std::string_view device) {
  std::string out =
      "import torch\n"
      "import torch.nn as nn\n"
      "import torch.nn.functional as F\n\n\n";
  Expected<std::vector<ValueType>> types = InferTypes(graph);
  if (!types.ok()) {
    return out + "raise ValueError(" + PyString("invalid DICE IR graph: " + types.status().message()) + ")\n";
  }

  // Python expression of each value: inputs x<i>, constants inlined literals,
  // op results v<id>. Ops whose arguments are all weak scalars are folded in
  // float64 (as the reference executor does) and stay Python floats.
  std::vector<std::string> expr(static_cast<size_t>(graph.num_values()));
  std::vector<bool> is_const(expr.size(), false);
  std::string params;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    expr[i] = "x" + std::to_string(i);
    params += ", " + expr[i];
  }
  std::string body;
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const size_t self = static_cast<size_t>(graph.op_value(i));
    if (op.kind == OpKind::kConstant) {
      expr[self] = PyFloat(op.scalars[0]);
      is_const[self] = true;
      continue;
    }
    std::vector<std::string> args;
    bool all_const = true;
    for (int32_t id : op.args) {
      args.push_back(expr[static_cast<size_t>(id)]);
      all_const = all_const && is_const[static_cast<size_t>(id)];
    }
    const bool a_const = !op.args.empty() && is_const[static_cast<size_t>(op.args[0])];
    const bool b_const = op.args.size() > 1 && is_const[static_cast<size_t>(op.args[1])];
    const int a_rank = op.args.empty() ? 0 : (*types)[static_cast<size_t>(op.args[0])].rank;
    expr[self] = "v" + std::to_string(self);
    std::string rhs;
    if (all_const && !op.args.empty()) {
      for (std::string& a : args) a = "torch.tensor(" + a + ", dtype=torch.float64)";
      if (op.kind == OpKind::kCast) {  // cast of a weak scalar: a real 0-d tensor
        rhs = "torch.tensor(" + expr[static_cast<size_t>(op.args[0])] + ", dtype=" +
              TorchDType(static_cast<DType>(op.ivalue)) + ", device=\"" + std::string(device) + "\")";
      } else {
        rhs = "(" + OpExpression(op, args, 0, false, false) + ").item()";
        is_const[self] = true;
      }
    } else {
      rhs = OpExpression(op, args, a_rank, a_const, b_const);
    }
    body += "        " + expr[self] + " = " + rhs + "\n";
  }
  std::string ret;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    if (i) ret += ", ";
    ret += expr[static_cast<size_t>(graph.outputs[i])];
  }

  out += "class Model(nn.Module):\n";
  out += "    \"\"\"DICE fusion group: " + Summary(graph) + "\"\"\"\n\n";
  out += "    def __init__(self):\n";
  out += "        super().__init__()\n\n";
  out += "    def forward(self" + params + "):\n";
  out += body;
  out += "        return " + ret + "\n\n\n";
  out += "def get_inputs():\n";
  out += "    return [";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) out += ", ";
    out += RandnCall(inputs[i], device);
  }
  out += "]\n\n\n";
  out += "def get_init_inputs():\n";
  out += "    return []\n";
  return out;
}

}  // namespace ir
}  // namespace core
}  // namespace dice
