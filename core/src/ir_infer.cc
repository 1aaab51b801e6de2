// Validation and type/shape inference of the fusion-group IR (dice/core/ir.h):
// InferTypes, Validate, InferShapes, InferOutputSpecs.
#include <algorithm>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "ir_internal.h"

namespace dice {
inline namespace core {
namespace ir {

using detail::JoinInts;

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

// The checks every op passes before its category's: a known kind, its arg count,
// args that are earlier values (`self` is the op's own value), its scalar count,
// dims and keepdim only where the category takes them.
Status CheckOpSignature(size_t i, const Op& op, const OpInfo& info, int self) {
  if (info.name[0] == '?') return OpError(i, op, "unknown op kind");
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
  return Status::Ok();
}

// softmax / log_softmax (one dim), layer_norm (ivalue = normalised ndim) and
// group_norm (ivalue = groups): operand kinds, ranks and attributes.
Status CheckNormalizationTypes(size_t i, const Op& op, const std::vector<ValueType>& types) {
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
    DICE_RETURN_IF_ERROR(CheckOpSignature(i, op, info, graph.op_value(i)));
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
        DICE_RETURN_IF_ERROR(CheckNormalizationTypes(i, op, types));
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

}  // namespace ir
}  // namespace core
}  // namespace dice
