// TorchScript node -> fusion-group IR translation (see capture.h).
#include "dice/torch_ext/capture.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

#include <torch/csrc/jit/ir/ir.h>

#include "dice/reference/reference_executor.h"
#include "graph_pass_util.h"
#include "layout_copy.h"

namespace dice::torch_ext {
namespace {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = c10::aten;

constexpr double kInf = std::numeric_limits<double>::infinity();

Status Unsupported(const Node* node, const std::string& why) {
  return Status(StatusCode::kUnsupported, std::string(node->kind().toQualString()) + ": " + why);
}

// Builds IR while walking nodes; maps torch values to IR value ids.
class Builder {
 public:
  ir::Graph graph;

  int32_t AddInput(const Value* v, ir::DType dtype, int rank) {
    // Inputs come first: only legal before any op was added.
    graph.inputs.push_back({dtype, rank});
    int32_t id = static_cast<int32_t>(graph.inputs.size() - 1);
    ids_[v] = id;
    return id;
  }
  bool Has(const Value* v) const { return ids_.count(v) != 0; }
  std::optional<int32_t> Find(const Value* v) const {
    auto it = ids_.find(v);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  void Bind(const Value* v, int32_t id) { ids_[v] = id; }

  int32_t Emit(ir::OpKind kind, std::vector<int32_t> args, std::vector<double> scalars = {},
               std::vector<int64_t> dims = {}, bool keepdim = false, int64_t ivalue = 0) {
    ir::Op op;
    op.kind = kind;
    op.args = std::move(args);
    op.scalars = std::move(scalars);
    op.dims = std::move(dims);
    op.keepdim = keepdim;
    op.ivalue = ivalue;
    graph.ops.push_back(std::move(op));
    return graph.op_value(graph.ops.size() - 1);
  }
  int32_t Const(double c) { return Emit(ir::OpKind::kConstant, {}, {c}); }

 private:
  std::unordered_map<const Value*, int32_t> ids_;
};

bool IsTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Complete dtype + rank of a tensor value, or a reason.
Expected<std::pair<ir::DType, int>> TypeOf(const Value* v, size_t index) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return Status(StatusCode::kUnsupported, "operand " + std::to_string(index) + " is not a tensor");
  auto st = tt->scalarType();
  auto rank = tt->dim();
  if (!st && v->node()->kind() == c10::prim::GetAttr)
    // The profiling executor records no types for module attributes: an
    // unfrozen parameter (group_norm's weight) keeps its op out of groups.
    return Status(StatusCode::kUnsupported, "input " + std::to_string(index) + " is module attribute '" +
                                                v->node()->s(c10::attr::name) +
                                                "' of unknown type: freeze the module (torch.jit.freeze, or "
                                                "dice::torch_ext::optimize, which freezes) to fuse it");
  if (!st) return Status(StatusCode::kUnsupported, "unknown dtype (input " + std::to_string(index) + ")");
  if (!rank) return Status(StatusCode::kUnsupported, "unknown rank (input " + std::to_string(index) + ")");
  auto dt = reference::FromScalarType(*st);
  if (!dt.ok()) {
    std::string name = c10::toString(*st);
    // "Long" -> "int64" style names read better in reports.
    switch (*st) {
      case at::kLong: name = "int64"; break;
      case at::kInt: name = "int32"; break;
      case at::kDouble: name = "float64"; break;
      case at::kBool: name = "bool"; break;
      default: break;
    }
    return Status(StatusCode::kUnsupported, "unsupported dtype " + name + " (input " + std::to_string(index) + ")");
  }
  return std::make_pair(*dt, static_cast<int>(*rank));
}

Expected<int> RankOf(const Value* v) {
  auto t = TypeOf(v, 0);
  if (!t.ok()) return t.status();
  return t->second;
}

// Context for translating one node.
struct Ctx {
  const Node* node;
  Builder& b;

  const Value* Named(const char* name) const {
    // namedInput needs a schema; all nodes we translate have one.
    return node->namedInput(c10::Symbol::attr(name));
  }
  bool HasNamed(const char* name) const {
    const auto* schema = node->maybeSchema();
    if (!schema) return false;
    return schema->argumentIndexWithName(name).has_value();
  }
  // A tensor operand: its IR id (from the builder) or an error.
  Expected<int32_t> Tensor(const Value* v) const {
    if (auto id = b.Find(v)) return *id;
    return Unsupported(node, "operand %" + v->debugName() + " is not available in the group");
  }
  // A tensor or constant-scalar operand.
  Expected<int32_t> Operand(const Value* v) const {
    if (IsTensor(v)) {
      if (b.Has(v)) return Tensor(v);
      if (auto z = ZeroDimConst(v)) return b.Const(*z);
      return Tensor(v);
    }
    if (auto c = ScalarConst(v)) return b.Const(*c);
    return Unsupported(node, "non-constant scalar operand %" + v->debugName());
  }
  Expected<double> Scalar(const Value* v, const char* what) const {
    if (auto c = ScalarConst(v)) return *c;
    return Unsupported(node, std::string("non-constant ") + what);
  }
  std::optional<double> OptScalar(const Value* v) const {
    if (IsNoneConst(v)) return std::nullopt;
    return ScalarConst(v);
  }
  // Normalised, sorted, unique dims from an int or int[] constant (None / [] -> all: empty).
  Expected<std::vector<int64_t>> Dims(const Value* v, int rank) const {
    std::vector<int64_t> dims;
    if (IsNoneConst(v)) return dims;
    auto iv = ConstIValue(v);
    if (!iv) return Unsupported(node, "non-constant dim");
    if (iv->isInt()) {
      dims.push_back(iv->toInt());
    } else if (iv->isIntList()) {
      for (int64_t d : iv->toIntVector()) dims.push_back(d);
    } else {
      return Unsupported(node, "dim is not an int or int list");
    }
    for (auto& d : dims) {
      int64_t r = std::max(rank, 1);
      if (d < -r || d >= r) return Unsupported(node, "dim " + std::to_string(d) + " out of range for rank " + std::to_string(rank));
      if (d < 0) d += r;
      if (rank == 0) d = 0;
    }
    std::sort(dims.begin(), dims.end());
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
    if (rank == 0) dims.clear();
    return dims;
  }
  Expected<bool> Bool(const Value* v, const char* what) const {
    auto iv = torch::jit::toIValue(v);
    if (!iv || !iv->isBool()) return Unsupported(node, std::string("non-constant ") + what);
    return iv->toBool();
  }
  Status RequireNoneDtype() const {
    if (HasNamed("dtype") && !IsNoneConst(Named("dtype"))) return Unsupported(node, "dtype argument is not None");
    return Status::Ok();
  }
};

#define DICE_ASSIGN(lhs, expr)                 \
  auto lhs##_e = (expr);                       \
  if (!lhs##_e.ok()) return lhs##_e.status();  \
  auto lhs = std::move(lhs##_e).value()

using Handler = std::function<Expected<int32_t>(Ctx&)>;

Handler Unary(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    return c.b.Emit(kind, {x});
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

// sum/mean/amax/amin/logsumexp(self, dim, keepdim[, dtype]).
Handler Reduce(ir::OpKind kind) {
  return [kind](Ctx& c) -> Expected<int32_t> {
    DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
    DICE_ASSIGN(rank, RankOf(c.node->input(0)));
    DICE_RETURN_IF_ERROR(c.RequireNoneDtype());
    std::vector<int64_t> dims;
    bool keep = false;
    if (c.HasNamed("dim")) {
      DICE_ASSIGN(d, c.Dims(c.Named("dim"), rank));
      dims = std::move(d);
    }
    if (c.HasNamed("keepdim")) {
      DICE_ASSIGN(k, c.Bool(c.Named("keepdim"), "keepdim"));
      keep = k;
    }
    return c.b.Emit(kind, {x}, {}, dims, keep);
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
  std::vector<int64_t> dims;
  bool keep = false;
  if (c.HasNamed("dim")) {
    DICE_ASSIGN(d, c.Dims(c.Named("dim"), rank));
    dims = std::move(d);
  }
  if (c.HasNamed("keepdim")) {
    DICE_ASSIGN(k, c.Bool(c.Named("keepdim"), "keepdim"));
    keep = k;
  }
  return c.b.Emit(ir::OpKind::kNorm, {x}, {p}, dims, keep);
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
      {aten::softplus,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(beta, c.Scalar(c.Named("beta"), "beta"));
         DICE_ASSIGN(th, c.Scalar(c.Named("threshold"), "threshold"));
         return c.b.Emit(K::kSoftplus, {x}, {beta, th});
       }},
      {aten::elu,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(alpha, c.Scalar(c.Named("alpha"), "alpha"));
         DICE_ASSIGN(scale, c.Scalar(c.Named("scale"), "scale"));
         DICE_ASSIGN(iscale, c.Scalar(c.Named("input_scale"), "input_scale"));
         return c.b.Emit(K::kElu, {x}, {alpha, scale, iscale});
       }},
      {aten::leaky_relu,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(slope, c.Scalar(c.Named("negative_slope"), "negative_slope"));
         return c.b.Emit(K::kLeakyRelu, {x}, {slope});
       }},
      {aten::hardtanh,
       [](Ctx& c) -> Expected<int32_t> {
         DICE_ASSIGN(x, c.Tensor(c.node->input(0)));
         DICE_ASSIGN(lo, c.Scalar(c.Named("min_val"), "min_val"));
         DICE_ASSIGN(hi, c.Scalar(c.Named("max_val"), "max_val"));
         return c.b.Emit(K::kClamp, {x}, {lo, hi});
       }},
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

// Checks the node's value output (output 0; extra outputs are judged by the
// handlers): a float tensor when its type is known.
Status CheckOutputs(const Node* node) {
  for (size_t i = 0; i < 1 && i < node->outputs().size(); ++i) {
    const Value* out = node->output(i);
    if (!IsTensor(out)) return Unsupported(node, "output " + std::to_string(i) + " is not a tensor");
    auto tt = out->type()->expect<c10::TensorType>();
    if (auto st = tt->scalarType()) {
      if (!reference::FromScalarType(*st).ok())
        return Unsupported(node, std::string("output dtype ") + c10::toString(*st) + " unsupported");
    }
  }
  return Status::Ok();
}

// Translates `node` into `b`; binds its first output.
Status TranslateNode(const Node* node, Builder& b) {
  const auto& table = Handlers();
  auto it = table.find(node->kind());
  if (it == table.end()) return Unsupported(node, "not a fusible op");
  if (!node->maybeSchema()) return Unsupported(node, "no matching schema");
  if (!node->blocks().empty()) return Unsupported(node, "has sub-blocks");
  DICE_RETURN_IF_ERROR(CheckOutputs(node));
  for (size_t i = 1; i < node->outputs().size(); ++i) {
    if (node->output(i)->hasUses() && node->kind() != aten::max && node->kind() != aten::min)
      return Unsupported(node, "multiple outputs");
  }
  Ctx ctx{node, b};
  Expected<int32_t> id = Status(StatusCode::kInternal, "unset");
  try {
    id = it->second(ctx);
  } catch (const c10::Error& e) {
    return Unsupported(node, std::string("schema mismatch: ") + e.what_without_backtrace());
  }
  if (!id.ok()) return id.status();
  b.Bind(node->output(0), *id);
  return Status::Ok();
}

// Translates `node` alone into `b`: its tensor operands (0-d constants aside)
// become inputs 0, 1, ... in operand order, with their observed types.
Status TranslateAlone(const Node* node, Builder& b) {
  size_t index = 0;
  for (const Value* in : node->inputs()) {
    if (IsTensor(in) && !b.Has(in) && !ZeroDimConst(in)) {
      auto t = TypeOf(in, index);
      if (!t.ok()) return Status(StatusCode::kUnsupported, std::string(node->kind().toQualString()) + ": " +
                                                               t.status().message());
      b.AddInput(in, t->first, t->second);
    }
    ++index;
  }
  return TranslateNode(node, b);
}

}  // namespace

std::string UnsupportedReason(const Node* node) {
  if (Handlers().count(node->kind()) == 0) return "not a fusible op";
  Builder b;
  Status st = TranslateAlone(node, b);
  if (!st.ok()) {
    // The message starts with the op name; the reason is what follows.
    const std::string& m = st.message();
    auto pos = m.find(": ");
    return pos == std::string::npos ? m : m.substr(pos + 2);
  }
  b.graph.outputs.push_back(b.graph.num_values() - 1);
  Status v = ir::Validate(b.graph);
  if (!v.ok()) return "IR rejected it: " + v.message();
  return "";
}

bool IsEpilogueOp(const Node* node) {
  if (Handlers().count(node->kind()) == 0) return false;
  Builder b;
  if (!TranslateAlone(node, b).ok()) return false;
  const ir::Op* only = nullptr;
  for (const ir::Op& op : b.graph.ops) {
    if (op.kind == ir::OpKind::kConstant) continue;
    if (only != nullptr) return false;  // add with alpha != 1: mul + add
    only = &op;
  }
  if (only == nullptr || only->kind == ir::OpKind::kCast || only->kind == ir::OpKind::kContiguous) return false;
  const ir::OpCategory cat = ir::GetOpInfo(only->kind).category;
  if (cat != ir::OpCategory::kUnary && cat != ir::OpCategory::kBinary) return false;
  // Its tensor arguments are the inputs 0, 1, ... in operand order (not rsub's swap, not x + x).
  const int32_t n_inputs = static_cast<int32_t>(b.graph.inputs.size());
  int32_t next = 0;
  for (int32_t arg : only->args) {
    if (arg >= n_inputs) continue;  // a weak constant
    if (arg != next) return false;
    ++next;
  }
  return next == n_inputs;
}

bool IsScalarTensorConstant(const Value* value) { return ZeroDimConst(value).has_value(); }

bool IsNonTrivial(const Node* node) {
  return node->kind() != aten::to && node->kind() != aten::type_as;
}

Expected<CapturedGroup> CaptureSubgraph(const torch::jit::Graph& subgraph) {
  Builder b;
  CapturedGroup out;
  size_t index = 0;
  for (const Value* in : subgraph.inputs()) {
    auto t = TypeOf(in, index);
    if (!t.ok()) return t.status().WithContext("group input " + std::to_string(index));
    b.AddInput(in, t->first, t->second);
    ++index;
  }
  for (const Node* node : subgraph.nodes()) {
    // Constants (and constant int lists) are read through ConstIValue.
    if (node->kind() == c10::prim::Constant) continue;
    if (node->kind() == c10::prim::ListConstruct && ConstIValue(node->output())) continue;
    DICE_RETURN_IF_ERROR(TranslateNode(node, b));
    out.torch_ops.push_back(node->kind().toQualString());
  }
  for (const Value* o : subgraph.outputs()) {
    auto id = b.Find(o);
    if (!id) return Status(StatusCode::kUnsupported, "group output %" + o->debugName() + " is not computed in the group");
    b.graph.outputs.push_back(*id);
  }
  DICE_RETURN_IF_ERROR(ir::Validate(b.graph));
  out.graph = std::move(b.graph);
  out.canonical = ir::Canonical(out.graph);
  out.summary = ir::Summary(out.graph);
  return out;
}

}  // namespace dice::torch_ext
