// The TorchScript -> IR translation of each fusible aten op (capture_builder.h:
// Handlers()); capture.cc decides which nodes to translate.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "capture_builder.h"
#include "dice/reference/reference_executor.h"
#include "graph_pass_util.h"
#include "layout_copy.h"

namespace dice::torch_ext::capture_detail {
namespace {


Handler Unary(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    return c.b.Emit(kind, {x});
  };
}

// x and constant scalar arguments, by name, as the op's scalars in that order.
Handler NamedScalars(ir::OpKind kind, std::vector<const char*> names) {
  return [kind, names](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    std::vector<double> scalars;
    for (const char* name : names) {
      DICE_ASSIGN(v, c.Scalar(c.Named(name), name));
      scalars.push_back(v);
    }
    return c.b.Emit(kind, {x}, std::move(scalars));
  };
}

Handler Binary(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(a, c.Operand(c.node->input(0)));
    DICE_ASSIGN(b, c.Operand(c.node->input(1)));
    return c.b.Emit(kind, {a, b});
  };
}

// add/sub(self, other, alpha) and rsub (other - alpha * self).
Handler AddSub(ir::OpKind kind, bool reversed) {
  return [kind, reversed](Ctx& c) -> Expected<int32_t> {
    if (c.node->inputs().size() != 3) return Unsupported(c.node, "unexpected overload");
    DICE_ASSIGN(a, c.Operand(c.node->input(0)));
    DICE_ASSIGN(b, c.Operand(c.node->input(1)));
    DICE_ASSIGN(alpha, c.Scalar(c.node->input(2), "alpha"));
    if (reversed) {
      if (alpha != 1.0) a = c.b.Emit(ir::OpKind::kMul, {a, c.b.Const(alpha)});
      return c.b.Emit(kind, {b, a});
    }
    if (alpha != 1.0) b = c.b.Emit(ir::OpKind::kMul, {b, c.b.Const(alpha)});
    return c.b.Emit(kind, {a, b});
  };
}

Expected<int32_t> Div(Ctx& c) {
  if (c.HasNamed("rounding_mode") && !IsNoneConst(c.Named("rounding_mode")))
    return Unsupported(c.node, "rounding_mode is not None");
  DICE_ASSIGN(a, c.Operand(c.node->input(0)));
  DICE_ASSIGN(b, c.Operand(c.node->input(1)));
  return c.b.Emit(ir::OpKind::kDiv, {a, b});
}

Expected<int32_t> Pow(Ctx& c) {
  const Value* base = c.node->input(0);
  const Value* exp = c.node->input(1);
  if (IsTensor(base) && !IsTensor(exp)) {
    DICE_ASSIGN(x, c.Tensor(base));
    DICE_ASSIGN(e, c.Scalar(exp, "exponent"));
    return c.b.Emit(ir::OpKind::kPowScalar, {x}, {e});
  }
  DICE_ASSIGN(a, c.Operand(base));
  DICE_ASSIGN(b, c.Operand(exp));
  return c.b.Emit(ir::OpKind::kPow, {a, b});
}

// max/min: binary overload -> maximum/minimum; max.dim values -> amax.
Handler MaxMin(ir::OpKind binary, ir::OpKind reduce) {
  return [binary, reduce](Ctx& c) -> Expected<int32_t> {
    size_t n = c.node->inputs().size();
    if (n == 2 && IsTensor(c.node->input(1))) return Binary(binary)(c);
    if (n == 3 && c.node->outputs().size() == 2) {
      if (c.node->output(1)->hasUses()) return Unsupported(c.node, "indices output is used");
      DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
      DICE_ASSIGN(rank, RankOf(c.node->input(0)));
      DICE_ASSIGN(dims, c.Dims(c.node->input(1), rank));
      DICE_ASSIGN(keep, c.Bool(c.node->input(2), "keepdim"));
      return c.b.Emit(reduce, {x}, {}, dims, keep);
    }
    if (n == 1) {  // full reduction max(x) -> 0-d
      DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
      return c.b.Emit(reduce, {x}, {}, {}, false);
    }
    return Unsupported(c.node, "unsupported overload");
  };
}

// A reduction's optional `dim` (absent: all) and `keepdim` (absent: false).
Expected<std::pair<std::vector<int64_t>, bool>> DimsAndKeep(Ctx& c, int rank) {
  std::pair<std::vector<int64_t>, bool> dk{{}, false};
  if (c.HasNamed("dim")) {
    DICE_ASSIGN(d, c.Dims(c.Named("dim"), rank));
    dk.first = std::move(d);
  }
  if (c.HasNamed("keepdim")) {
    DICE_ASSIGN(k, c.Bool(c.Named("keepdim"), "keepdim"));
    dk.second = k;
  }
  return dk;
}

// sum/mean/amax/amin/logsumexp(self, dim, keepdim[, dtype]).
Handler Reduce(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    DICE_ASSIGN(rank, RankOf(c.node->input(0)));
    DICE_RETURN_IF_ERROR(c.RequireNoneDtype());
    DICE_ASSIGN(dk, DimsAndKeep(c, rank));
    return c.b.Emit(kind, {x}, {}, dk.first, dk.second);
  };
}

Expected<int32_t> Norm(Ctx& c) {
  DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
  DICE_ASSIGN(rank, RankOf(c.node->input(0)));
  DICE_RETURN_IF_ERROR(c.RequireNoneDtype());
  const char* pname = c.HasNamed("ord") ? "ord" : "p";
  double p = 2.0;
  if (c.HasNamed(pname)) {
    auto v = c.OptScalar(c.Named(pname));
    if (!v && !IsNoneConst(c.Named(pname))) return Unsupported(c.node, "non-constant p");
    if (v) p = *v;
  }
  if (!(p > 0)) return Unsupported(c.node, "p must be > 0");
  DICE_ASSIGN(dk, DimsAndKeep(c, rank));
  return c.b.Emit(ir::OpKind::kNorm, {x}, {p}, dk.first, dk.second);
}

Handler Softmax(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    if (!c.HasNamed("dim")) return Unsupported(c.node, "unsupported overload");
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    DICE_ASSIGN(rank, RankOf(c.node->input(0)));
    DICE_RETURN_IF_ERROR(c.RequireNoneDtype());
    if (c.HasNamed("half_to_float")) return Unsupported(c.node, "internal overload");
    DICE_ASSIGN(dims, c.Dims(c.Named("dim"), rank));
    if (rank > 0 && dims.size() != 1) return Unsupported(c.node, "needs one dim");
    if (rank == 0) dims = {0};
    return c.b.Emit(kind, {x}, {}, dims);
  };
}

// Optional weight/bias: x[, w[, b]].
Expected<std::vector<int32_t>> NormArgs(Ctx& c, int32_t x) {
  std::vector<int32_t> args{x};
  const Value* w = c.Named("weight");
  const Value* bias = c.Named("bias");
  bool has_w = !IsNoneConst(w), has_b = !IsNoneConst(bias);
  if (has_b && !has_w) return Unsupported(c.node, "bias without weight");
  if (has_w) {
    DICE_ASSIGN(wid, c.Tensor(w));
    args.push_back(wid);
  }
  if (has_b) {
    DICE_ASSIGN(bid, c.Tensor(bias));
    args.push_back(bid);
  }
  return args;
}

Expected<int32_t> LayerNorm(Ctx& c) {
  DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
  auto shape = ConstIValue(c.Named("normalized_shape"));
  if (!shape || !shape->isIntList()) return Unsupported(c.node, "non-constant normalized_shape");
  DICE_ASSIGN(eps, c.Scalar(c.Named("eps"), "eps"));
  DICE_ASSIGN(args, NormArgs(c, x));
  return c.b.Emit(ir::OpKind::kLayerNorm, args, {eps}, {}, false,
                  static_cast<int64_t>(shape->toIntVector().size()));
}

Expected<int32_t> GroupNorm(Ctx& c) {
  DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
  auto groups = torch::jit::toIValue(c.Named("num_groups"));
  if (!groups || !groups->isInt()) return Unsupported(c.node, "non-constant num_groups");
  DICE_ASSIGN(eps, c.Scalar(c.Named("eps"), "eps"));
  DICE_ASSIGN(args, NormArgs(c, x));
  return c.b.Emit(ir::OpKind::kGroupNorm, args, {eps}, {}, false, groups->toInt());
}

// aten::instance_norm with the input's own statistics is group_norm with one
// group per channel: each (n, c) slice is normalised over the spatial dims,
// with the per-channel weight and bias (PyTorch's InstanceNormNd; Ulyanov et
// al. 2016). Emitted as IR group_norm, groups = C, so the group_norm
// templates serve it (KernelBench level2/17, /28, /79; Inductor fuses it the
// same way). Running statistics (use_input_stats = False, or statistics
// that a training-mode call would update) stay with PyTorch.
Expected<int32_t> InstanceNorm(Ctx& c) {
  DICE_ASSIGN(use_input_stats, c.Bool(c.Named("use_input_stats"), "use_input_stats"));
  if (!use_input_stats) return Unsupported(c.node, "running statistics (use_input_stats=False)");
  if (!IsNoneConst(c.Named("running_mean")) || !IsNoneConst(c.Named("running_var")))
    return Unsupported(c.node, "updates running statistics");
  const Value* in = c.node->input(0);
  DICE_ASSIGN(x, c.Tensor(in));
  auto tt = in->type()->cast<c10::TensorType>();
  auto rank = tt ? tt->dim() : std::nullopt;
  if (!rank || *rank < 3) return Unsupported(c.node, "needs a known rank >= 3 ([N, C, *])");
  auto channels = tt->sizes()[1];
  if (!channels || *channels <= 0) return Unsupported(c.node, "unknown channel count");
  DICE_ASSIGN(eps, c.Scalar(c.Named("eps"), "eps"));
  DICE_ASSIGN(args, NormArgs(c, x));
  return c.b.Emit(ir::OpKind::kGroupNorm, args, {eps}, {}, false, *channels);
}

// {input, weight[, bias]}; frozen weights are tensor constants, lifted to group inputs.
Expected<std::vector<int32_t>> WeightArgs(Ctx& c) {
  DICE_ASSIGN(x, c.Tensor(c.Named("input")));
  DICE_ASSIGN(w, c.Tensor(c.Named("weight")));
  if (IsNoneConst(c.Named("bias"))) return std::vector<int32_t>{x, w};
  DICE_ASSIGN(bias, c.Tensor(c.Named("bias")));
  return std::vector<int32_t>{x, w, bias};
}

// linear(input, weight, bias=None) (F.linear): x [..., K], weight [N, K], bias [N].
Expected<int32_t> Linear(Ctx& c) {
  DICE_ASSIGN(args, WeightArgs(c));
  return c.b.Emit(ir::OpKind::kLinear, std::move(args));
}

// conv2d / traced _convolution (transposed=False): ir kConv2d, dims {sh, sw, ph, pw, dh, dw}, groups.
Expected<int32_t> Conv2d(Ctx& c) {
  auto tr = c.HasNamed("transposed") ? torch::jit::toIValue(c.Named("transposed"))
                                     : std::optional<c10::IValue>(false);
  auto groups = torch::jit::toIValue(c.Named("groups"));
  if (!tr || !tr->isBool() || tr->toBool() || !groups || !groups->isInt())
    return Unsupported(c.node, "transposed, or non-constant transposed / groups");
  std::vector<int64_t> dims;
  for (const char* name : {"stride", "padding", "dilation"}) {
    auto v = torch::jit::toIValue(c.Named(name));
    if (!v || !v->isIntList() || v->toIntVector().size() != 2)
      return Unsupported(c.node, std::string(name) + " is not a constant pair of ints");
    for (int64_t d : v->toIntVector()) dims.push_back(d);
  }
  DICE_ASSIGN(args, WeightArgs(c));
  return c.b.Emit(ir::OpKind::kConv2d, std::move(args), {}, std::move(dims), false, groups->toInt());
}

// avg_pool{1,2,3}d / max_pool{1,2,3}d with stride = window (or the default
// []), no padding, dilation 1, floor mode, count_include_pad irrelevant
// without padding, no divisor_override: ir avg_pool / max_pool, dims = the
// window (one listed value stands for every spatial dim). Batched only.
Handler Pool(ir::OpKind kind, int spatial) {
  return [kind, spatial](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    DICE_ASSIGN(rank, RankOf(c.node->input(0)));
    if (rank != spatial + 2) return Unsupported(c.node, "unbatched input (rank " + std::to_string(rank) + ")");
    auto ints = [&](const char* name, int64_t absent) -> std::optional<std::vector<int64_t>> {
      if (!c.HasNamed(name)) return std::vector<int64_t>(static_cast<size_t>(spatial), absent);
      auto v = ConstIValue(c.Named(name));
      if (!v || !v->isIntList()) return std::nullopt;
      std::vector<int64_t> out = v->toIntVector();
      if (out.size() == 1 && spatial > 1) out.assign(static_cast<size_t>(spatial), out[0]);
      return out;
    };
    auto all = [](const std::optional<std::vector<int64_t>>& v, int64_t want) {
      return v && std::all_of(v->begin(), v->end(), [want](int64_t e) { return e == want; });
    };
    auto window = ints("kernel_size", 0), stride = ints("stride", 0);
    if (!window || static_cast<int>(window->size()) != spatial || !stride)
      return Unsupported(c.node, "non-constant kernel_size or stride");
    if (!stride->empty() && *stride != *window) return Unsupported(c.node, "stride differs from kernel_size");
    if (!all(ints("padding", 0), 0) || !all(ints("dilation", 1), 1)) return Unsupported(c.node, "padding or dilation");
    DICE_ASSIGN(ceil, c.Bool(c.Named("ceil_mode"), "ceil_mode"));
    if (ceil || (c.HasNamed("divisor_override") && !IsNoneConst(c.Named("divisor_override"))))
      return Unsupported(c.node, "ceil_mode or divisor_override");
    return c.b.Emit(kind, {x}, {}, std::move(*window));
  };
}

// to(dtype) / type_as: casts among f32/f16/bf16 on the same device.
Expected<int32_t> Cast(Ctx& c) {
  DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
  std::optional<at::ScalarType> target;
  if (c.node->kind() == aten::type_as) {
    DICE_ASSIGN(t, TypeOf(c.node->input(1), 1));
    target = reference::ToScalarType(t.first);
  } else {
    for (const char* n : {"device", "layout", "pin_memory"}) {
      if (c.HasNamed(n) && !IsNoneConst(c.Named(n))) return Unsupported(c.node, std::string(n) + " argument");
    }
    if (c.HasNamed("other")) {
      DICE_ASSIGN(t, TypeOf(c.Named("other"), 1));
      target = reference::ToScalarType(t.first);
    } else if (c.HasNamed("dtype")) {
      auto iv = torch::jit::toIValue(c.Named("dtype"));
      if (!iv || !iv->isInt()) return Unsupported(c.node, "non-constant dtype");
      target = static_cast<at::ScalarType>(iv->toInt());
    } else {
      return Unsupported(c.node, "unsupported overload");
    }
    if (c.HasNamed("memory_format") && !IsNoneConst(c.Named("memory_format"))) {
      auto iv = torch::jit::toIValue(c.Named("memory_format"));
      if (!iv || !iv->isInt() || iv->toInt() != static_cast<int64_t>(at::MemoryFormat::Preserve))
        return Unsupported(c.node, "memory_format argument");
    }
  }
  auto dt = reference::FromScalarType(*target);
  if (!dt.ok()) return Unsupported(c.node, std::string("cast to unsupported dtype ") + c10::toString(*target));
  return c.b.Emit(ir::OpKind::kCast, {x}, {}, {}, false, static_cast<int64_t>(*dt));
}

}  // namespace

const std::unordered_map<c10::Symbol, Handler>& Handlers() {
  using K = ir::OpKind;
  static const auto* table = new std::unordered_map<c10::Symbol, Handler>{
      {aten::add, AddSub(K::kAdd, false)},
      {aten::sub, AddSub(K::kSub, false)},
      {aten::rsub, AddSub(K::kSub, true)},
      {aten::mul, Binary(K::kMul)},
      {aten::div, Div},
      {aten::neg, Unary(K::kNeg)},
      {aten::abs, Unary(K::kAbs)},
      {aten::exp, Unary(K::kExp)},
      {aten::log, Unary(K::kLog)},
      {aten::sqrt, Unary(K::kSqrt)},
      {aten::rsqrt, Unary(K::kRsqrt)},
      {aten::reciprocal, Unary(K::kReciprocal)},
      {aten::tanh, Unary(K::kTanh)},
      {aten::sigmoid, Unary(K::kSigmoid)},
      {aten::erf, Unary(K::kErf)},
      {aten::relu, Unary(K::kRelu)},
      {aten::silu, Unary(K::kSilu)},
      {aten::mish, Unary(K::kMish)},
      {aten::selu, Unary(K::kSelu)},
      {aten::hardswish, Unary(K::kHardswish)},
      {aten::hardsigmoid, Unary(K::kHardsigmoid)},
      {aten::gelu,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         int64_t approx = 0;
         if (c.HasNamed("approximate")) {
           auto iv = torch::jit::toIValue(c.Named("approximate"));
           if (!iv || !iv->isString()) return Unsupported(c.node, "non-constant approximate");
           std::string a = iv->toStringRef();
           if (a == "tanh") approx = 1;
           else if (a != "none") return Unsupported(c.node, "approximate='" + a + "'");
         }
         return c.b.Emit(K::kGelu, {x}, {}, {}, false, approx);
       }},
      {aten::softplus, NamedScalars(K::kSoftplus, {"beta", "threshold"})},
      {aten::elu, NamedScalars(K::kElu, {"alpha", "scale", "input_scale"})},
      {aten::leaky_relu, NamedScalars(K::kLeakyRelu, {"negative_slope"})},
      {aten::hardtanh, NamedScalars(K::kClamp, {"min_val", "max_val"})},
      {aten::clamp,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         const Value* mn = c.Named("min");
         const Value* mx = c.Named("max");
         if (IsTensor(mn) || IsTensor(mx)) return Unsupported(c.node, "tensor bounds");
         auto lo = c.OptScalar(mn), hi = c.OptScalar(mx);
         if ((!lo && !IsNoneConst(mn)) || (!hi && !IsNoneConst(mx))) return Unsupported(c.node, "non-constant bounds");
         return c.b.Emit(K::kClamp, {x}, {lo.value_or(-kInf), hi.value_or(kInf)});
       }},
      {aten::clamp_min,
       [](Ctx& c) -> Expected<int32_t> {
         if (IsTensor(c.node->input(1))) return Unsupported(c.node, "tensor bound");
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(lo, c.Scalar(c.node->input(1), "min"));
         return c.b.Emit(K::kClamp, {x}, {lo, kInf});
       }},
      {aten::clamp_max,
       [](Ctx& c) -> Expected<int32_t> {
         if (IsTensor(c.node->input(1))) return Unsupported(c.node, "tensor bound");
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(hi, c.Scalar(c.node->input(1), "max"));
         return c.b.Emit(K::kClamp, {x}, {-kInf, hi});
       }},
      {aten::pow, Pow},
      {aten::maximum, Binary(K::kMaximum)}, {aten::minimum, Binary(K::kMinimum)},
      {aten::max, MaxMin(K::kMaximum, K::kAmax)}, {aten::min, MaxMin(K::kMinimum, K::kAmin)},
      {aten::sum, Reduce(K::kSum)},
      {aten::mean, Reduce(K::kMean)},
      {aten::amax, Reduce(K::kAmax)},
      {aten::amin, Reduce(K::kAmin)},
      {aten::logsumexp, Reduce(K::kLogSumExp)},
      {aten::norm, Norm}, {aten::linalg_vector_norm, Norm},
      {aten::softmax, Softmax(K::kSoftmax)}, {aten::log_softmax, Softmax(K::kLogSoftmax)},
      {aten::layer_norm, LayerNorm}, {aten::group_norm, GroupNorm},
      {aten::instance_norm, InstanceNorm},
      {aten::to, Cast}, {aten::type_as, Cast},
      {aten::contiguous,  // a layout copy (layout_copy.h)
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(format, LayoutCopyFormat(c.node));
         return c.b.Emit(K::kContiguous, {x}, {}, {}, false, format);
       }},
      {aten::linear, Linear},
      {aten::conv2d, Conv2d}, {aten::_convolution, Conv2d},
      {aten::avg_pool1d, Pool(K::kAvgPool, 1)}, {aten::avg_pool2d, Pool(K::kAvgPool, 2)},
      {aten::avg_pool3d, Pool(K::kAvgPool, 3)}, {aten::max_pool1d, Pool(K::kMaxPool, 1)},
      {aten::max_pool2d, Pool(K::kMaxPool, 2)}, {aten::max_pool3d, Pool(K::kMaxPool, 3)},
  };
  return *table;
}

}  // namespace dice::torch_ext::capture_detail
