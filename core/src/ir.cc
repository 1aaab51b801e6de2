// Implementation of dice/core/ir.h: op table, validation, type and shape
// inference, canonical text, parser, hashing.
#include "dice/core/ir.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace dice {
inline namespace core {
namespace ir {

// ---------------------------------------------------------------- dtypes ----

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
  }
  return "?";
}

Expected<DType> ParseDType(std::string_view text) {
  if (text == "f32" || text == "float32" || text == "float") return DType::kFloat32;
  if (text == "f16" || text == "float16" || text == "half") return DType::kFloat16;
  if (text == "bf16" || text == "bfloat16") return DType::kBFloat16;
  return Status(StatusCode::kInvalidArgument,
                "unknown dtype '" + std::string(text) + "' (expected f32, f16 or bf16)");
}

int64_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  return DType::kFloat32;  // f32 wins; f16 with bf16 promotes to f32 as in torch
}

// ----------------------------------------------------------- TensorSpec ----

TensorSpec TensorSpec::Contiguous(DType dtype, std::vector<int64_t> shape) {
  TensorSpec s;
  s.dtype = dtype;
  s.strides.assign(shape.size(), 1);
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s.strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  s.shape = std::move(shape);
  s.alignment = 16;
  return s;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorSpec::is_contiguous() const {
  int64_t expected = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

static std::string JoinInts(const std::vector<int64_t>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

std::string TensorSpec::ToString() const {
  std::string out = std::string(DTypeName(dtype)) + "[" + JoinInts(shape) + "]";
  if (!is_contiguous()) out += "{s=" + JoinInts(strides) + "}";
  if (alignment < 16) out += "@a" + std::to_string(alignment);
  return out;
}

bool TensorSpec::operator==(const TensorSpec& o) const {
  return dtype == o.dtype && shape == o.shape && strides == o.strides && alignment == o.alignment;
}

Expected<TensorSpec> ParseInputSpec(std::string_view text) {
  const std::string t(text);
  const size_t colon = t.rfind(':');
  if (colon == std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "input spec '" + t + "' has no ':dtype' (expected e.g. 1024x8192:f32)");
  }
  auto dtype = ParseDType(std::string_view(t).substr(colon + 1));
  if (!dtype.ok()) return dtype.status().WithContext("input spec '" + t + "'");
  std::vector<int64_t> shape;
  const std::string dims = t.substr(0, colon);
  if (dims != "scalar" && !dims.empty()) {
    size_t pos = 0;
    while (pos <= dims.size()) {
      size_t next = dims.find('x', pos);
      if (next == std::string::npos) next = dims.size();
      const std::string d = dims.substr(pos, next - pos);
      if (d.empty() || d.size() > 18 || !std::all_of(d.begin(), d.end(), ::isdigit)) {
        return Status(StatusCode::kInvalidArgument,
                      "input spec '" + t + "': dimension '" + d + "' is not a non-negative integer");
      }
      shape.push_back(std::stoll(d));
      pos = next + 1;
    }
  }
  if (shape.size() > 8) {
    return Status(StatusCode::kInvalidArgument, "input spec '" + t + "': rank above 8 is unsupported");
  }
  return TensorSpec::Contiguous(*dtype, std::move(shape));
}

// --------------------------------------------------------------- op table ----

namespace {
const OpInfo kOpTable[] = {
    {OpKind::kConstant, "const", OpCategory::kConstant, 0, 0, 1},
    {OpKind::kNeg, "neg", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAbs, "abs", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kExp, "exp", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kLog, "log", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSqrt, "sqrt", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kRsqrt, "rsqrt", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kReciprocal, "reciprocal", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kTanh, "tanh", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSigmoid, "sigmoid", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kErf, "erf", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kRelu, "relu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kGelu, "gelu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSilu, "silu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kMish, "mish", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSoftplus, "softplus", OpCategory::kUnary, 1, 1, 2},
    {OpKind::kSoftsign, "softsign", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kElu, "elu", OpCategory::kUnary, 1, 1, 3},
    {OpKind::kSelu, "selu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kLeakyRelu, "leaky_relu", OpCategory::kUnary, 1, 1, 1},
    {OpKind::kClamp, "clamp", OpCategory::kUnary, 1, 1, 2},
    {OpKind::kHardswish, "hardswish", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kHardsigmoid, "hardsigmoid", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kPowScalar, "pow_scalar", OpCategory::kUnary, 1, 1, 1},
    {OpKind::kCast, "cast", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAdd, "add", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kSub, "sub", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMul, "mul", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kDiv, "div", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMaximum, "maximum", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMinimum, "minimum", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kPow, "pow", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kSum, "sum", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kMean, "mean", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kAmax, "amax", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kAmin, "amin", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kLogSumExp, "logsumexp", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kNorm, "norm", OpCategory::kReduction, 1, 1, 1},
    {OpKind::kSoftmax, "softmax", OpCategory::kNormalization, 1, 1, 0},
    {OpKind::kLogSoftmax, "log_softmax", OpCategory::kNormalization, 1, 1, 0},
    {OpKind::kLayerNorm, "layer_norm", OpCategory::kNormalization, 1, 3, 1},
    {OpKind::kGroupNorm, "group_norm", OpCategory::kNormalization, 1, 3, 1},
    {OpKind::kLinear, "linear", OpCategory::kContraction, 2, 3, 0},
    {OpKind::kConv2d, "conv2d", OpCategory::kContraction, 2, 3, 0},
    {OpKind::kContiguous, "contiguous", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAvgPool, "avg_pool", OpCategory::kPool, 1, 1, 0},
    {OpKind::kMaxPool, "max_pool", OpCategory::kPool, 1, 1, 0},
    {OpKind::kRotateHalf, "rotate_half", OpCategory::kRearrange, 1, 1, 0},
};
constexpr size_t kNumOps = sizeof(kOpTable) / sizeof(kOpTable[0]);
}  // namespace

const OpInfo& GetOpInfo(OpKind kind) {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (kOpTable[i].kind == kind) return kOpTable[i];
  }
  static const OpInfo kUnknown{OpKind::kConstant, "?", OpCategory::kConstant, 0, 0, 0};
  return kUnknown;
}

Expected<OpKind> OpKindFromName(std::string_view name) {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (name == kOpTable[i].name) return kOpTable[i].kind;
  }
  return Status(StatusCode::kInvalidArgument, "unknown op '" + std::string(name) + "'");
}

bool Op::operator==(const Op& o) const {
  if (kind != o.kind || args != o.args || dims != o.dims || keepdim != o.keepdim || ivalue != o.ivalue ||
      scalars.size() != o.scalars.size()) {
    return false;
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    const double a = scalars[i], b = o.scalars[i];
    if (!(a == b) && !(std::isnan(a) && std::isnan(b))) return false;
  }
  return true;
}

bool Graph::operator==(const Graph& o) const {
  return inputs == o.inputs && ops == o.ops && outputs == o.outputs;
}

// ------------------------------------------------------------ validation ----

namespace {
bool UsesDims(const Op& op, OpCategory c) {
  return c == OpCategory::kReduction || c == OpCategory::kNormalization || c == OpCategory::kPool ||
         op.kind == OpKind::kConv2d;
}

Status OpError(size_t index, const Op& op, const std::string& what) {
  return Status(StatusCode::kInvalidArgument,
                "op " + std::to_string(index) + " (" + GetOpInfo(op.kind).name + "): " + what);
}

// conv2d's ranks and attributes (ir.h: dims = {sh, sw, ph, pw, dh, dw}, ivalue = groups).
Status CheckConv2dTypes(size_t i, const Op& op, const std::vector<ValueType>& types) {
  if (types[op.args[0]].rank != 4) return OpError(i, op, "input must be rank 4 [N, C, H, W]");
  if (types[op.args[1]].rank != 4) return OpError(i, op, "weight must be rank 4 [K, C/groups, R, S]");
  if (op.args.size() > 2 && types[op.args[2]].rank != 1) return OpError(i, op, "bias must be rank 1 [K]");
  if (op.dims.size() != 6) {
    return OpError(i, op, "needs dims = [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w], got " +
                              std::to_string(op.dims.size()) + " values");
  }
  if (op.dims[0] < 1 || op.dims[1] < 1) return OpError(i, op, "stride must be >= 1");
  if (op.dims[2] < 0 || op.dims[3] < 0) return OpError(i, op, "padding must be >= 0");
  if (op.dims[4] < 1 || op.dims[5] < 1) return OpError(i, op, "dilation must be >= 1");
  if (op.ivalue < 1) return OpError(i, op, "groups must be >= 1");
  return Status::Ok();
}
}  // namespace

Expected<std::vector<ValueType>> InferTypes(const Graph& graph) {
  std::vector<ValueType> types;
  types.reserve(graph.num_values());
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const InputDecl& in = graph.inputs[i];
    if (in.rank < 0 || in.rank > 8) {
      return Status(StatusCode::kInvalidArgument, "input " + std::to_string(i) + ": rank " +
                                                      std::to_string(in.rank) + " outside [0, 8]");
    }
    types.push_back({in.dtype, in.rank, false});
  }
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const OpInfo& info = GetOpInfo(op.kind);
    if (info.name[0] == '?') return OpError(i, op, "unknown op kind");
    const int self = graph.op_value(i);
    const int nargs = static_cast<int>(op.args.size());
    if (nargs < info.min_args || nargs > info.max_args) {
      return OpError(i, op, "takes " + std::to_string(info.min_args) + ".." + std::to_string(info.max_args) +
                                " args, got " + std::to_string(nargs));
    }
    for (int a : op.args) {
      if (a < 0 || a >= self) return OpError(i, op, "arg %" + std::to_string(a) + " is not an earlier value");
    }
    if (static_cast<int>(op.scalars.size()) != info.num_scalars) {
      return OpError(i, op, "needs " + std::to_string(info.num_scalars) + " scalars, got " +
                                std::to_string(op.scalars.size()));
    }
    if (!UsesDims(op, info.category) && !op.dims.empty()) return OpError(i, op, "takes no dims");
    if (info.category != OpCategory::kReduction && op.keepdim) return OpError(i, op, "takes no keepdim");
    ValueType out{DType::kFloat32, 0, false};
    switch (info.category) {
      case OpCategory::kConstant:
        out = {DType::kFloat32, 0, true};
        break;
      case OpCategory::kUnary: {
        const ValueType& x = types[op.args[0]];
        out = {x.dtype, x.rank, x.is_scalar_constant};
        if (op.kind == OpKind::kCast) {
          if (op.ivalue < 0 || op.ivalue > 2) return OpError(i, op, "cast target dtype out of range");
          out.dtype = static_cast<DType>(op.ivalue);
          out.is_scalar_constant = false;
        } else if (op.kind == OpKind::kGelu) {
          if (op.ivalue != 0 && op.ivalue != 1) return OpError(i, op, "gelu approximation must be 0 or 1");
        } else if (op.kind == OpKind::kContiguous) {
          if (x.is_scalar_constant) return OpError(i, op, "cannot lay out a scalar constant");
          if (op.ivalue < 0 || op.ivalue > 2) return OpError(i, op, "memory format must be 0, 1 or 2");
          if (op.ivalue == 1 && x.rank != 4) return OpError(i, op, "channels_last needs rank 4");
          if (op.ivalue == 2 && x.rank != 5) return OpError(i, op, "channels_last_3d needs rank 5");
        } else if (op.ivalue != 0) {
          return OpError(i, op, "takes no integer attribute");
        }
        break;
      }
      case OpCategory::kBinary: {
        const ValueType& a = types[op.args[0]];
        const ValueType& b = types[op.args[1]];
        if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        if (a.is_scalar_constant && b.is_scalar_constant) {
          out = {DType::kFloat32, 0, true};
        } else if (a.is_scalar_constant) {
          out = {b.dtype, b.rank, false};
        } else if (b.is_scalar_constant) {
          out = {a.dtype, a.rank, false};
        } else if (a.rank == 0 && b.rank > 0) {
          // torch: a 0-d tensor does not promote a dimensioned one of the same category.
          out = {b.dtype, b.rank, false};
        } else if (b.rank == 0 && a.rank > 0) {
          out = {a.dtype, a.rank, false};
        } else {
          out = {PromoteTypes(a.dtype, b.dtype), std::max(a.rank, b.rank), false};
        }
        break;
      }
      case OpCategory::kReduction: {
        const ValueType& x = types[op.args[0]];
        if (x.is_scalar_constant) return OpError(i, op, "cannot reduce a scalar constant");
        if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        for (size_t k = 0; k < op.dims.size(); ++k) {
          if (op.dims[k] < 0 || op.dims[k] >= x.rank) return OpError(i, op, "dim out of range for rank " + std::to_string(x.rank));
          if (k && op.dims[k] <= op.dims[k - 1]) return OpError(i, op, "dims must be sorted and unique");
        }
        int reduced = op.dims.empty() ? x.rank : static_cast<int>(op.dims.size());
        out = {x.dtype, op.keepdim ? x.rank : x.rank - reduced, false};
        break;
      }
      case OpCategory::kNormalization: {
        const ValueType& x = types[op.args[0]];
        if (x.is_scalar_constant) return OpError(i, op, "cannot normalise a scalar constant");
        for (size_t k = 1; k < op.args.size(); ++k) {
          if (types[op.args[k]].is_scalar_constant) return OpError(i, op, "weight/bias must be tensors");
        }
        if (op.kind == OpKind::kSoftmax || op.kind == OpKind::kLogSoftmax) {
          if (op.args.size() != 1) return OpError(i, op, "takes one arg");
          if (op.dims.size() != 1 || op.dims[0] < 0 || op.dims[0] >= x.rank) {
            return OpError(i, op, "needs exactly one dim in range");
          }
          if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        } else if (op.kind == OpKind::kLayerNorm) {
          if (op.ivalue < 1 || op.ivalue > x.rank) return OpError(i, op, "normalised ndim out of range");
          if (!op.dims.empty()) return OpError(i, op, "takes no dims");
          for (size_t k = 1; k < op.args.size(); ++k) {
            if (types[op.args[k]].rank != op.ivalue) return OpError(i, op, "weight/bias rank must equal normalised ndim");
          }
        } else {  // group_norm
          if (x.rank < 2) return OpError(i, op, "input must be [N, C, *]");
          if (op.ivalue < 1) return OpError(i, op, "groups must be >= 1");
          if (!op.dims.empty()) return OpError(i, op, "takes no dims");
          for (size_t k = 1; k < op.args.size(); ++k) {
            if (types[op.args[k]].rank != 1) return OpError(i, op, "weight/bias must be rank 1 [C]");
          }
        }
        out = {x.dtype, x.rank, false};
        break;
      }
      case OpCategory::kPool: {  // avg_pool / max_pool: x [N, C, S1..Sk], dims = window per spatial dim
        const ValueType& x = types[op.args[0]];
        if (x.is_scalar_constant) return OpError(i, op, "cannot pool a scalar constant");
        if (x.rank < 3 || x.rank > 5) return OpError(i, op, "input must be [N, C, S1..Sk] with 1 to 3 spatial dims");
        if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        if (static_cast<int>(op.dims.size()) != x.rank - 2) {
          return OpError(i, op, "needs one window size per spatial dim (" + std::to_string(x.rank - 2) + "), got " +
                                    std::to_string(op.dims.size()));
        }
        for (int64_t w : op.dims) {
          if (w < 1) return OpError(i, op, "window sizes must be >= 1");
        }
        out = {x.dtype, x.rank, false};
        break;
      }
      case OpCategory::kRearrange: {  // rotate_half: x [..., d] -> [..., d]
        const ValueType& x = types[op.args[0]];
        if (x.is_scalar_constant || x.rank < 1) return OpError(i, op, "needs a tensor of rank >= 1 ([..., d], d even)");
        if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        out = {x.dtype, x.rank, false};
        break;
      }
      case OpCategory::kContraction: {  // linear, conv2d
        const ValueType& x = types[op.args[0]];
        for (size_t k = 0; k < op.args.size(); ++k) {
          const ValueType& t = types[op.args[k]];
          if (t.is_scalar_constant) return OpError(i, op, "operands must be tensors");
          if (t.dtype != x.dtype) return OpError(i, op, "operands must share one dtype");
        }
        if (op.kind == OpKind::kConv2d) {
          DICE_RETURN_IF_ERROR(CheckConv2dTypes(i, op, types));
          out = {x.dtype, 4, false};
          break;
        }
        if (op.ivalue != 0) return OpError(i, op, "takes no integer attribute");
        if (x.rank < 1) return OpError(i, op, "input must have rank >= 1 ([..., K])");
        if (types[op.args[1]].rank != 2) return OpError(i, op, "weight must be rank 2 [N, K]");
        if (op.args.size() > 2 && types[op.args[2]].rank != 1) return OpError(i, op, "bias must be rank 1 [N]");
        out = {x.dtype, x.rank, false};
        break;
      }
    }
    types.push_back(out);
  }
  if (graph.outputs.empty()) return Status(StatusCode::kInvalidArgument, "graph has no outputs");
  for (int32_t o : graph.outputs) {
    if (o < 0 || o >= graph.num_values()) {
      return Status(StatusCode::kInvalidArgument, "output %" + std::to_string(o) + " does not exist");
    }
    if (types[o].is_scalar_constant) {
      return Status(StatusCode::kInvalidArgument, "output %" + std::to_string(o) + " is a scalar constant");
    }
  }
  return types;
}

Status Validate(const Graph& graph) { return InferTypes(graph).status(); }

// -------------------------------------------------------- shape inference ----

namespace {
Expected<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return Status(StatusCode::kInvalidArgument, "shapes [" + JoinInts(a) + "] and [" + JoinInts(b) + "] do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// conv2d: x [N, C, H, W], weight [K, C/groups, R, S][, bias [K]] -> [N, K, P, Q]
// (torch.nn.Conv2d's output size formula).
Expected<std::vector<int64_t>> Conv2dShape(size_t i, const Op& op, const std::vector<std::vector<int64_t>>& shapes) {
  const auto& x = shapes[op.args[0]];
  const auto& w = shapes[op.args[1]];
  const int64_t groups = op.ivalue;
  if (x[1] != w[1] * groups) {
    return OpError(i, op, "input channels " + std::to_string(x[1]) + " != weight's C/groups " + std::to_string(w[1]) +
                              " x groups " + std::to_string(groups));
  }
  if (w[0] % groups != 0) {
    return OpError(i, op, "output channels " + std::to_string(w[0]) + " not divisible by groups " + std::to_string(groups));
  }
  if (op.args.size() > 2 && shapes[op.args[2]] != std::vector<int64_t>{w[0]}) {
    return OpError(i, op, "bias shape [" + JoinInts(shapes[op.args[2]]) + "] != [K] = [" + std::to_string(w[0]) + "]");
  }
  std::vector<int64_t> out = {x[0], w[0], 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t stride = op.dims[d], pad = op.dims[2 + d], dil = op.dims[4 + d];
    const int64_t span = x[2 + d] + 2 * pad - dil * (w[2 + d] - 1) - 1;
    if (span < 0) {
      return OpError(i, op, std::string("the dilated kernel (") + std::to_string(w[2 + d]) + ", dilation " +
                                std::to_string(dil) + ") is larger than the padded input (" + std::to_string(x[2 + d]) +
                                " + 2 x " + std::to_string(pad) + ") along " + (d == 0 ? "H" : "W"));
    }
    out[2 + d] = span / stride + 1;
  }
  return out;
}
}  // namespace

Expected<std::vector<std::vector<int64_t>>> InferShapes(const Graph& graph, const std::vector<TensorSpec>& inputs) {
  auto types = InferTypes(graph);
  if (!types.ok()) return types.status();
  if (inputs.size() != graph.inputs.size()) {
    return Status(StatusCode::kInvalidArgument, "graph takes " + std::to_string(graph.inputs.size()) +
                                                    " inputs, got " + std::to_string(inputs.size()));
  }
  std::vector<std::vector<int64_t>> shapes;
  shapes.reserve(graph.num_values());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(inputs[i].shape.size()) != graph.inputs[i].rank) {
      return Status(StatusCode::kInvalidArgument, "input " + std::to_string(i) + " has rank " +
                                                      std::to_string(inputs[i].shape.size()) + ", graph declares " +
                                                      std::to_string(graph.inputs[i].rank));
    }
    if (inputs[i].dtype != graph.inputs[i].dtype) {
      return Status(StatusCode::kInvalidArgument, "input " + std::to_string(i) + " is " +
                                                      DTypeName(inputs[i].dtype) + ", graph declares " +
                                                      DTypeName(graph.inputs[i].dtype));
    }
    for (int64_t d : inputs[i].shape) {
      if (d < 0) return Status(StatusCode::kInvalidArgument, "input " + std::to_string(i) + " has a negative dim");
    }
    shapes.push_back(inputs[i].shape);
  }
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const OpInfo& info = GetOpInfo(op.kind);
    std::vector<int64_t> out;
    switch (info.category) {
      case OpCategory::kConstant: break;
      case OpCategory::kUnary: out = shapes[op.args[0]]; break;
      case OpCategory::kBinary: {
        auto b = Broadcast(shapes[op.args[0]], shapes[op.args[1]]);
        if (!b.ok()) return OpError(i, op, b.status().message());
        out = *b;
        break;
      }
      case OpCategory::kReduction: {
        const auto& x = shapes[op.args[0]];
        for (size_t d = 0; d < x.size(); ++d) {
          const bool reduced = op.dims.empty() || std::find(op.dims.begin(), op.dims.end(), (int64_t)d) != op.dims.end();
          if (!reduced) out.push_back(x[d]);
          else if (op.keepdim) out.push_back(1);
        }
        break;
      }
      case OpCategory::kNormalization: {
        const auto& x = shapes[op.args[0]];
        out = x;
        if (op.kind == OpKind::kLayerNorm) {
          std::vector<int64_t> trailing(x.end() - op.ivalue, x.end());
          for (size_t k = 1; k < op.args.size(); ++k) {
            if (shapes[op.args[k]] != trailing) {
              return OpError(i, op, "weight/bias shape [" + JoinInts(shapes[op.args[k]]) + "] != normalised shape [" +
                                        JoinInts(trailing) + "]");
            }
          }
        } else if (op.kind == OpKind::kGroupNorm) {
          if (x[1] % op.ivalue != 0) return OpError(i, op, "channels " + std::to_string(x[1]) + " not divisible by groups " + std::to_string(op.ivalue));
          for (size_t k = 1; k < op.args.size(); ++k) {
            if (shapes[op.args[k]] != std::vector<int64_t>{x[1]}) return OpError(i, op, "weight/bias must be [C]");
          }
        }
        break;
      }
      case OpCategory::kPool: {  // [N, C, S1..Sk] -> [N, C, S1 / w1, ..., Sk / wk] (floor, as torch's pools)
        const auto& x = shapes[op.args[0]];
        out = x;
        for (size_t d = 2; d < x.size(); ++d) {
          const int64_t w = op.dims[d - 2];
          if (x[d] < w) {
            return OpError(i, op, "spatial dim " + std::to_string(d) + " of size " + std::to_string(x[d]) +
                                      " is smaller than its window " + std::to_string(w));
          }
          out[d] = x[d] / w;
        }
        break;
      }
      case OpCategory::kContraction: {  // linear: [..., K] x [N, K]^T (+ [N]) -> [..., N]
        if (op.kind == OpKind::kConv2d) {
          auto conv = Conv2dShape(i, op, shapes);
          if (!conv.ok()) return conv.status();
          out = std::move(conv).value();
          break;
        }
        const auto& x = shapes[op.args[0]];
        const auto& w = shapes[op.args[1]];
        if (x.back() != w[1]) {
          return OpError(i, op, "input's last dim " + std::to_string(x.back()) + " != weight's K " + std::to_string(w[1]));
        }
        if (op.args.size() > 2 && shapes[op.args[2]] != std::vector<int64_t>{w[0]}) {
          return OpError(i, op, "bias shape [" + JoinInts(shapes[op.args[2]]) + "] != [N] = [" + std::to_string(w[0]) + "]");
        }
        out = x;
        out.back() = w[0];
        break;
      }
      case OpCategory::kRearrange: {  // rotate_half swaps the halves of the last dim
        out = shapes[op.args[0]];
        if (out.back() % 2 != 0) {
          return OpError(i, op, "the last dim must be even to rotate its halves, got " + std::to_string(out.back()) +
                                    " (shape [" + JoinInts(out) + "])");
        }
        break;
      }
    }
    shapes.push_back(std::move(out));
  }
  return shapes;
}

Expected<std::vector<TensorSpec>> InferOutputSpecs(const Graph& graph, const std::vector<TensorSpec>& inputs) {
  auto shapes = InferShapes(graph, inputs);
  if (!shapes.ok()) return shapes.status();
  auto types = InferTypes(graph);
  std::vector<TensorSpec> outs;
  for (int32_t o : graph.outputs) outs.push_back(TensorSpec::Contiguous((*types)[o].dtype, (*shapes)[o]));
  return outs;
}

// ------------------------------------------------------- canonical text ----

namespace {
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

Expected<double> ParseDouble(const std::string& s) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    return Status(StatusCode::kInvalidArgument, "bad number '" + s + "'");
  }
  return v;
}
}  // namespace

std::string Canonical(const Graph& graph) {
  std::string out = "dice-ir v1\n";
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    out += "input %" + std::to_string(i) + " " + DTypeName(graph.inputs[i].dtype) + " rank=" +
           std::to_string(graph.inputs[i].rank) + "\n";
  }
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    out += "%" + std::to_string(graph.op_value(i)) + " = " + GetOpInfo(op.kind).name + "(";
    if (op.kind == OpKind::kConstant) {
      out += op.scalars.empty() ? "" : FormatDouble(op.scalars[0]);
    } else {
      for (size_t a = 0; a < op.args.size(); ++a) out += (a ? ", %" : "%") + std::to_string(op.args[a]);
    }
    out += ")";
    if (op.kind != OpKind::kConstant) {
      if (!op.dims.empty()) out += " dims=[" + JoinInts(op.dims) + "]";
      if (op.keepdim) out += " keepdim=1";
      if (op.ivalue != 0) out += " i=" + std::to_string(op.ivalue);
      if (!op.scalars.empty()) {
        out += " s=[";
        for (size_t k = 0; k < op.scalars.size(); ++k) out += (k ? "," : "") + FormatDouble(op.scalars[k]);
        out += "]";
      }
    }
    out += "\n";
  }
  out += "output";
  for (size_t k = 0; k < graph.outputs.size(); ++k) out += (k ? ", %" : " %") + std::to_string(graph.outputs[k]);
  out += "\n";
  return out;
}

namespace {
Status LineError(int line, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "IR line " + std::to_string(line) + ": " + what);
}

Expected<int32_t> ParseValueRef(const std::string& tok) {
  if (tok.size() < 2 || tok[0] != '%' || !std::all_of(tok.begin() + 1, tok.end(), ::isdigit) || tok.size() > 10) {
    return Status(StatusCode::kInvalidArgument, "bad value reference '" + tok + "'");
  }
  return static_cast<int32_t>(std::stol(tok.substr(1)));
}

std::vector<std::string> SplitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty() || !out.empty()) out.push_back(cur);
  return out;
}
}  // namespace

Expected<Graph> Parse(std::string_view text) {
  Graph g;
  std::istringstream in{std::string(text)};
  std::string line;
  int lineno = 0;
  bool saw_header = false, saw_output = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (saw_output) return LineError(lineno, "text after the output line");
    if (!saw_header) {
      if (line != "dice-ir v1") return LineError(lineno, "expected header 'dice-ir v1'");
      saw_header = true;
      continue;
    }
    if (line.rfind("input ", 0) == 0) {
      if (!g.ops.empty()) return LineError(lineno, "input after ops");
      char dt[16] = {0};
      int id = -1, rank = -1;
      if (std::sscanf(line.c_str(), "input %%%d %15s rank=%d", &id, dt, &rank) != 3) {
        return LineError(lineno, "malformed input declaration");
      }
      if (id != static_cast<int>(g.inputs.size())) return LineError(lineno, "inputs must be numbered in order");
      auto dtype = ParseDType(dt);
      if (!dtype.ok()) return LineError(lineno, dtype.status().message());
      g.inputs.push_back({*dtype, rank});
      continue;
    }
    if (line.rfind("output", 0) == 0) {
      for (const std::string& tok : SplitList(line.substr(6), ',')) {
        auto v = ParseValueRef(tok);
        if (!v.ok()) return LineError(lineno, v.status().message());
        g.outputs.push_back(*v);
      }
      saw_output = true;
      continue;
    }
    // %N = name(args) attrs
    const size_t eq = line.find(" = ");
    const size_t lp = line.find('(');
    const size_t rp = line.find(')');
    if (eq == std::string::npos || lp == std::string::npos || rp == std::string::npos || lp < eq || rp < lp) {
      return LineError(lineno, "malformed op line");
    }
    auto self = ParseValueRef(line.substr(0, eq));
    if (!self.ok()) return LineError(lineno, self.status().message());
    if (*self != g.num_values()) return LineError(lineno, "values must be numbered in order");
    auto kind = OpKindFromName(line.substr(eq + 3, lp - eq - 3));
    if (!kind.ok()) return LineError(lineno, kind.status().message());
    Op op;
    op.kind = *kind;
    const std::string inner = line.substr(lp + 1, rp - lp - 1);
    if (op.kind == OpKind::kConstant) {
      auto v = ParseDouble(inner);
      if (!v.ok()) return LineError(lineno, v.status().message());
      op.scalars.push_back(*v);
    } else if (!inner.empty()) {
      for (const std::string& tok : SplitList(inner, ',')) {
        auto v = ParseValueRef(tok);
        if (!v.ok()) return LineError(lineno, v.status().message());
        op.args.push_back(*v);
      }
    }
    std::istringstream attrs(line.substr(rp + 1));
    std::string attr;
    while (attrs >> attr) {
      const size_t e = attr.find('=');
      if (e == std::string::npos) return LineError(lineno, "malformed attribute '" + attr + "'");
      const std::string key = attr.substr(0, e), val = attr.substr(e + 1);
      try {
        if (key == "dims" || key == "s") {
          if (val.size() < 2 || val.front() != '[' || val.back() != ']') return LineError(lineno, "list expected for " + key);
          for (const std::string& item : SplitList(val.substr(1, val.size() - 2), ',')) {
            if (key == "dims") {
              if (item.empty() || !std::all_of(item.begin(), item.end(), ::isdigit) || item.size() > 2) return LineError(lineno, "bad dim '" + item + "'");
              op.dims.push_back(std::stoll(item));
            } else {
              auto v = ParseDouble(item);
              if (!v.ok()) return LineError(lineno, v.status().message());
              op.scalars.push_back(*v);
            }
          }
        } else if (key == "keepdim") {
          if (val != "1") return LineError(lineno, "keepdim must be 1 when present");
          op.keepdim = true;
        } else if (key == "i") {
          op.ivalue = std::stoll(val);
        } else {
          return LineError(lineno, "unknown attribute '" + key + "'");
        }
      } catch (const std::exception&) {
        return LineError(lineno, "bad attribute value '" + attr + "'");
      }
    }
    g.ops.push_back(std::move(op));
  }
  if (!saw_header) return Status(StatusCode::kInvalidArgument, "empty IR text");
  if (!saw_output) return Status(StatusCode::kInvalidArgument, "IR text has no output line");
  DICE_RETURN_IF_ERROR(Validate(g));
  return g;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string GraphHash(const Graph& graph) { return Sha256Hex(Canonical(graph)); }

std::string Summary(const Graph& graph) {
  std::string out;
  for (const Op& op : graph.ops) {
    if (op.kind == OpKind::kConstant) continue;
    if (!out.empty()) out += "+";
    out += GetOpInfo(op.kind).name;
  }
  return out.empty() ? "identity" : out;
}

}  // namespace ir
}  // namespace core
}  // namespace dice
