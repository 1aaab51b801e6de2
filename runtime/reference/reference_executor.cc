// Reference executor: each IR op becomes the ATen call PyTorch eager makes for
// the same torch expression (see reference_program.cc for those expressions).
//
// Scalar constants stay C++ doubles ("weak" scalars) and reach ATen through the
// Scalar overloads (at::add(t, Scalar), at::pow(t, Scalar), ...), so type
// promotion is torch's: an f16 tensor times 0.5 stays f16. An op whose
// arguments are all constants is folded: it is evaluated on 0-d float64
// tensors and its value stays a weak scalar (InferTypes types it so).
#include "dice/reference/reference_executor.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>

namespace dice::reference {

namespace {

/// One SSA value during evaluation: a tensor, or a weak scalar constant.
struct Value {
  at::Tensor tensor;
  bool is_constant = false;
  double constant = 0.0;
};

Status InvalidInput(size_t index, const std::string& what) {
  return Status(StatusCode::kInvalidArgument,
                "input " + std::to_string(index) + " (x" + std::to_string(index) + "): " + what);
}

std::vector<int64_t> ReductionDims(const ir::Op& op, int64_t rank) {
  if (!op.dims.empty()) return op.dims;
  std::vector<int64_t> all(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) all[static_cast<size_t>(d)] = d;
  return all;
}

/// Unary elementwise op on a tensor, as torch eager calls it.
Expected<at::Tensor> Unary(const ir::Op& op, const at::Tensor& x, bool upcast) {
  const auto& s = op.scalars;
  switch (op.kind) {
    case ir::OpKind::kNeg: return at::neg(x);
    case ir::OpKind::kAbs: return at::abs(x);
    case ir::OpKind::kExp: return at::exp(x);
    case ir::OpKind::kLog: return at::log(x);
    case ir::OpKind::kSqrt: return at::sqrt(x);
    case ir::OpKind::kRsqrt: return at::rsqrt(x);
    case ir::OpKind::kReciprocal: return at::reciprocal(x);
    case ir::OpKind::kTanh: return at::tanh(x);
    case ir::OpKind::kSigmoid: return at::sigmoid(x);
    case ir::OpKind::kErf: return at::erf(x);
    case ir::OpKind::kRelu: return at::relu(x);
    case ir::OpKind::kGelu: return at::gelu(x, op.ivalue == 1 ? "tanh" : "none");
    case ir::OpKind::kSilu: return at::silu(x);
    case ir::OpKind::kMish: return at::mish(x);
    case ir::OpKind::kSoftplus: return at::softplus(x, s[0], s[1]);
    // torch.nn.functional.softsign: input / (input.abs() + 1)
    case ir::OpKind::kSoftsign: return at::div(x, at::add(at::abs(x), 1));
    case ir::OpKind::kElu: return at::elu(x, s[0], s[1], s[2]);
    case ir::OpKind::kSelu: return at::selu(x);
    case ir::OpKind::kLeakyRelu: return at::leaky_relu(x, s[0]);
    case ir::OpKind::kClamp: {
      const bool has_min = !(std::isinf(s[0]) && s[0] < 0);
      const bool has_max = !(std::isinf(s[1]) && s[1] > 0);
      if (has_min && has_max) return at::clamp(x, s[0], s[1]);
      if (has_min) return at::clamp_min(x, s[0]);
      if (has_max) return at::clamp_max(x, s[1]);
      return x.clone();
    }
    case ir::OpKind::kHardswish: return at::hardswish(x);
    case ir::OpKind::kHardsigmoid: return at::hardsigmoid(x);
    case ir::OpKind::kPowScalar: return at::pow(x, s[0]);
    case ir::OpKind::kContiguous:  // ir.h: 0 contiguous, 1 channels_last, 2 channels_last_3d
      return x.contiguous(op.ivalue == 1   ? at::MemoryFormat::ChannelsLast
                          : op.ivalue == 2 ? at::MemoryFormat::ChannelsLast3d
                                           : at::MemoryFormat::Contiguous);
    case ir::OpKind::kCast: {
      const at::ScalarType target = ToScalarType(static_cast<ir::DType>(op.ivalue));
      // Under upcast the cast's rounding is kept (it is part of the group's
      // semantics) but the value continues in float64.
      if (upcast) return x.to(target).to(at::kDouble);
      return x.to(target);
    }
    default: break;
  }
  return Status(StatusCode::kUnsupported,
                std::string("no ATen mapping for unary op '") + ir::GetOpInfo(op.kind).name + "'");
}

/// Binary elementwise op; either side may be a weak scalar (not both).
Expected<at::Tensor> Binary(const ir::Op& op, const Value& a, const Value& b) {
  const bool ca = a.is_constant, cb = b.is_constant;
  const at::Tensor& ta = a.tensor;
  const at::Tensor& tb = b.tensor;
  switch (op.kind) {
    case ir::OpKind::kAdd:  // c + t is Tensor.__radd__ -> torch.add(t, c)
      if (cb) return at::add(ta, b.constant);
      if (ca) return at::add(tb, a.constant);
      return at::add(ta, tb);
    case ir::OpKind::kSub:  // c - t is Tensor.__rsub__ -> torch.rsub(t, c)
      if (cb) return at::sub(ta, b.constant);
      if (ca) return at::rsub(tb, a.constant);
      return at::sub(ta, tb);
    case ir::OpKind::kMul:
      if (cb) return at::mul(ta, b.constant);
      if (ca) return at::mul(tb, a.constant);
      return at::mul(ta, tb);
    case ir::OpKind::kDiv:  // c / t is Tensor.__rtruediv__ -> t.reciprocal() * c
      if (cb) return at::div(ta, b.constant);
      if (ca) return at::mul(at::reciprocal(tb), a.constant);
      return at::div(ta, tb);
    case ir::OpKind::kMaximum:
    case ir::OpKind::kMinimum: {
      // torch.maximum has no Scalar overload: the constant becomes a 0-d
      // tensor of the other operand's dtype (torch.tensor(c, dtype=x.dtype)).
      at::Tensor x = ca ? at::scalar_tensor(a.constant, tb.options()) : ta;
      at::Tensor y = cb ? at::scalar_tensor(b.constant, ta.options()) : tb;
      return op.kind == ir::OpKind::kMaximum ? at::maximum(x, y) : at::minimum(x, y);
    }
    case ir::OpKind::kPow:
      if (cb) return at::pow(ta, b.constant);
      if (ca) return at::pow(a.constant, tb);
      return at::pow(ta, tb);
    default: break;
  }
  return Status(StatusCode::kUnsupported,
                std::string("no ATen mapping for binary op '") + ir::GetOpInfo(op.kind).name + "'");
}

Expected<at::Tensor> Reduce(const ir::Op& op, const at::Tensor& x) {
  const std::vector<int64_t> dims = ReductionDims(op, x.dim());
  switch (op.kind) {
    case ir::OpKind::kSum: return at::sum(x, dims, op.keepdim);
    case ir::OpKind::kMean: return at::mean(x, dims, op.keepdim);
    case ir::OpKind::kAmax: return at::amax(x, dims, op.keepdim);
    case ir::OpKind::kAmin: return at::amin(x, dims, op.keepdim);
    case ir::OpKind::kLogSumExp: return at::logsumexp(x, dims, op.keepdim);
    case ir::OpKind::kNorm: return at::linalg_vector_norm(x, op.scalars[0], dims, op.keepdim);
    default: break;
  }
  return Status(StatusCode::kUnsupported,
                std::string("no ATen mapping for reduction '") + ir::GetOpInfo(op.kind).name + "'");
}

Expected<at::Tensor> Normalize(const ir::Op& op, const std::vector<const Value*>& args) {
  const at::Tensor& x = args[0]->tensor;
  std::optional<at::Tensor> weight, bias;
  if (args.size() > 1) weight = args[1]->tensor;
  if (args.size() > 2) bias = args[2]->tensor;
  switch (op.kind) {
    case ir::OpKind::kSoftmax: return at::softmax(x, op.dims[0]);
    case ir::OpKind::kLogSoftmax: return at::log_softmax(x, op.dims[0]);
    case ir::OpKind::kLayerNorm: {
      const auto sizes = x.sizes();
      std::vector<int64_t> normalized(sizes.end() - op.ivalue, sizes.end());
      // F.layer_norm passes torch.backends.cudnn.enabled (default True).
      return at::layer_norm(x, normalized, weight, bias, op.scalars[0], /*cudnn_enable=*/true);
    }
    case ir::OpKind::kGroupNorm:
      return at::group_norm(x, op.ivalue, weight, bias, op.scalars[0], /*cudnn_enabled=*/true);
    default: break;
  }
  return Status(StatusCode::kUnsupported,
                std::string("no ATen mapping for normalisation '") + ir::GetOpInfo(op.kind).name + "'");
}

// avg_pool / max_pool (ir.h kPool): window = stride, no padding, floor mode,
// as F.avg_pool{k}d(x, window) / F.max_pool{k}d(x, window).
Expected<at::Tensor> Pool(const ir::Op& op, const at::Tensor& x) {
  const std::vector<int64_t>& w = op.dims;
  const bool avg = op.kind == ir::OpKind::kAvgPool;
  switch (w.size()) {
    case 1: return avg ? at::avg_pool1d(x, w, w) : at::max_pool1d(x, w, w);
    case 2: return avg ? at::avg_pool2d(x, w, w) : at::max_pool2d(x, w, w);
    case 3: return avg ? at::avg_pool3d(x, w, w) : at::max_pool3d(x, w, w);
    default: break;
  }
  return Status(StatusCode::kUnsupported, std::string("no ATen mapping for ") + ir::GetOpInfo(op.kind).name +
                                              " over " + std::to_string(w.size()) + " spatial dims");
}

/// Evaluates one op on earlier values. `scalar_options` place 0-d tensors
/// made from constants (a cast of a constant) on the inputs' device.
Expected<Value> EvalOp(const ir::Op& op, const std::vector<Value>& values, const at::TensorOptions& scalar_options,
                       bool upcast) {
  const ir::OpCategory category = ir::GetOpInfo(op.kind).category;
  if (op.kind == ir::OpKind::kConstant) {
    Value v;
    v.is_constant = true;
    v.constant = op.scalars[0];
    return v;
  }
  std::vector<const Value*> args;
  args.reserve(op.args.size());
  bool all_constant = true;
  for (int32_t id : op.args) {
    args.push_back(&values[static_cast<size_t>(id)]);
    all_constant = all_constant && args.back()->is_constant;
  }

  if (all_constant && (category == ir::OpCategory::kUnary || category == ir::OpCategory::kBinary)) {
    if (op.kind == ir::OpKind::kCast) {  // cast of a weak scalar: a real 0-d tensor
      const at::ScalarType target = ToScalarType(static_cast<ir::DType>(op.ivalue));
      at::Tensor t = at::scalar_tensor(args[0]->constant, scalar_options.dtype(target));
      Value v;
      v.tensor = upcast ? t.to(at::kDouble) : t;
      return v;
    }
    // Fold: evaluate on 0-d float64 tensors; the result stays a weak scalar.
    std::vector<Value> folded(args.size());
    for (size_t k = 0; k < args.size(); ++k) {
      folded[k].tensor = at::scalar_tensor(args[k]->constant, at::TensorOptions().dtype(at::kDouble));
    }
    Expected<at::Tensor> r = category == ir::OpCategory::kUnary ? Unary(op, folded[0].tensor, false)
                                                                 : Binary(op, folded[0], folded[1]);
    if (!r.ok()) return r.status();
    Value v;
    v.is_constant = true;
    v.constant = r->item<double>();
    return v;
  }

  Expected<at::Tensor> r = Status(StatusCode::kInternal, "unreachable");
  switch (category) {
    case ir::OpCategory::kUnary: r = Unary(op, args[0]->tensor, upcast); break;
    case ir::OpCategory::kBinary: r = Binary(op, *args[0], *args[1]); break;
    case ir::OpCategory::kReduction: r = Reduce(op, args[0]->tensor); break;
    case ir::OpCategory::kNormalization: r = Normalize(op, args); break;
    case ir::OpCategory::kPool: r = Pool(op, args[0]->tensor); break;
    case ir::OpCategory::kRearrange: {  // rotate_half: cat(-x[..., d/2:], x[..., :d/2], -1) (ir.h)
      const at::Tensor& x = args[0]->tensor;
      const int64_t d = x.size(-1);
      if (d % 2 != 0) {
        r = Status(StatusCode::kInvalidArgument, "rotate_half: the last dim must be even, got " + std::to_string(d));
        break;
      }
      r = at::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
      break;
    }
    case ir::OpCategory::kContraction: {  // F.linear / F.conv2d; upcast operands are float64 already
      std::optional<at::Tensor> bias;
      if (args.size() > 2) bias = args[2]->tensor;
      if (op.kind == ir::OpKind::kConv2d) {  // dims = {sh, sw, ph, pw, dh, dw}, ivalue = groups (ir.h)
        const auto& d = op.dims;
        r = at::conv2d(args[0]->tensor, args[1]->tensor, bias, {d[0], d[1]}, {d[2], d[3]}, {d[4], d[5]}, op.ivalue);
      } else {
        r = at::linear(args[0]->tensor, args[1]->tensor, bias);
      }
      break;
    }
    case ir::OpCategory::kConstant: break;
  }
  if (!r.ok()) return r.status();
  Value v;
  v.tensor = std::move(r).value();
  return v;
}

}  // namespace

at::ScalarType ToScalarType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32: return at::kFloat;
    case ir::DType::kFloat16: return at::kHalf;
    case ir::DType::kBFloat16: return at::kBFloat16;
  }
  return at::kFloat;
}

Expected<ir::DType> FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ir::DType::kFloat32;
    case at::kHalf: return ir::DType::kFloat16;
    case at::kBFloat16: return ir::DType::kBFloat16;
    default: break;
  }
  return Status(StatusCode::kUnsupported, std::string("dtype ") + c10::toString(type) +
                                              " is not supported (float32, float16, bfloat16 only)");
}

Expected<ir::TensorSpec> SpecOf(const at::Tensor& t) {
  if (!t.defined()) return Status(StatusCode::kInvalidArgument, "undefined tensor");
  Expected<ir::DType> dtype = FromScalarType(t.scalar_type());
  if (!dtype.ok()) return dtype.status();
  ir::TensorSpec spec;
  spec.dtype = *dtype;
  spec.shape.assign(t.sizes().begin(), t.sizes().end());
  spec.strides.assign(t.strides().begin(), t.strides().end());
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t alignment = 16;
  if (address != 0) {
    while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  }
  spec.alignment = alignment;
  return spec;
}

Expected<std::vector<at::Tensor>> Run(const ir::Graph& graph, const std::vector<at::Tensor>& inputs,
                                      bool upcast) {
  Expected<std::vector<ir::ValueType>> types = ir::InferTypes(graph);
  if (!types.ok()) return types.status();

  if (inputs.size() != graph.inputs.size()) {
    return Status(StatusCode::kInvalidArgument, "expected " + std::to_string(graph.inputs.size()) +
                                                    " inputs, got " + std::to_string(inputs.size()));
  }
  std::vector<Value> values(static_cast<size_t>(graph.num_values()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const ir::InputDecl& decl = graph.inputs[i];
    if (!t.defined()) return InvalidInput(i, "undefined tensor");
    if (t.scalar_type() != ToScalarType(decl.dtype)) {
      return InvalidInput(i, std::string("dtype ") + c10::toString(t.scalar_type()) + ", expected " +
                                 ir::DTypeName(decl.dtype));
    }
    if (t.dim() != decl.rank) {
      return InvalidInput(i, "rank " + std::to_string(t.dim()) + ", expected " + std::to_string(decl.rank));
    }
    values[i].tensor = upcast ? t.to(at::kDouble) : t;
  }
  const at::TensorOptions scalar_options =
      inputs.empty() ? at::TensorOptions() : at::TensorOptions().device(inputs[0].device());

  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const ir::Op& op = graph.ops[i];
    const size_t self = static_cast<size_t>(graph.op_value(i));
    try {
      Expected<Value> v = EvalOp(op, values, scalar_options, upcast);
      if (!v.ok()) return v.status().WithContext("op " + std::to_string(i));
      values[self] = std::move(v).value();
    } catch (const c10::Error& e) {
      return Status(StatusCode::kInvalidArgument, "op " + std::to_string(i) + " (" +
                                                      ir::GetOpInfo(op.kind).name +
                                                      "): " + e.what_without_backtrace());
    } catch (const std::exception& e) {
      return Status(StatusCode::kInvalidArgument,
                    "op " + std::to_string(i) + " (" + ir::GetOpInfo(op.kind).name + "): " + e.what());
    }
  }

  std::vector<at::Tensor> outputs;
  outputs.reserve(graph.outputs.size());
  for (int32_t id : graph.outputs) {
    const Value& v = values[static_cast<size_t>(id)];
    if (v.is_constant) {  // InferTypes rejects this; kept as a guard
      return Status(StatusCode::kInvalidArgument, "output %" + std::to_string(id) + " is a scalar constant");
    }
    outputs.push_back(v.tensor);
  }
  return outputs;
}

}  // namespace dice::reference
