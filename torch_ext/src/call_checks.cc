// call_checks.cc — see call_checks.h.
#include "call_checks.h"

#include <algorithm>

#include <ATen/ExpandUtils.h>

#include "dice/reference/reference_executor.h"

namespace dice::torch_ext {
namespace {

std::string DescribeInput(const at::Tensor& t) { return DTypeText(t.scalar_type()) + " rank " + std::to_string(t.dim()); }

}  // namespace

std::string DTypeText(at::ScalarType st) {
  switch (st) {
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kDouble: return "float64";
    case at::kBool: return "bool";
    default: return c10::toString(st);
  }
}

// Inputs against the IR's declarations: count, dtype, rank.
Status CheckInputs(const ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != graph.inputs.size()) {
    return Status(StatusCode::kInvalidArgument, "dice::run_group: the IR declares " +
                                                    std::to_string(graph.inputs.size()) + " inputs, got " +
                                                    std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined()) return Status(StatusCode::kInvalidArgument, "dice::run_group: input " + std::to_string(i) + " is undefined");
    auto dt = reference::FromScalarType(t.scalar_type());
    if (!dt.ok() || *dt != graph.inputs[i].dtype || t.dim() != graph.inputs[i].rank) {
      return Status(StatusCode::kInvalidArgument,
                    "dice::run_group: input " + std::to_string(i) + " is " + DescribeInput(t) + ", the IR declares " +
                        ir::DTypeName(graph.inputs[i].dtype) + " rank " + std::to_string(graph.inputs[i].rank));
    }
  }
  return Status::Ok();
}

// ir::InferShapes' rules on symbolic sizes: the shape of every value.
Expected<std::vector<c10::SymDimVector>> SymbolicShapes(const ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  std::vector<c10::SymDimVector> shapes;
  shapes.reserve(graph.num_values());
  for (const auto& t : inputs) shapes.emplace_back(t.sym_sizes().begin(), t.sym_sizes().end());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const ir::Op& o = graph.ops[i];
    c10::SymDimVector out;
    switch (ir::GetOpInfo(o.kind).category) {
      case ir::OpCategory::kConstant: break;
      case ir::OpCategory::kUnary:
      case ir::OpCategory::kRearrange:  // rotate_half keeps the shape (ir.h)
      case ir::OpCategory::kNormalization: out = shapes[o.args[0]]; break;
      case ir::OpCategory::kBinary:
        try {
          out = at::infer_size_symdimvector(shapes[o.args[0]], shapes[o.args[1]]);
        } catch (const c10::Error& e) {
          return Status(StatusCode::kInvalidArgument, "op " + std::to_string(i) + " (" + ir::GetOpInfo(o.kind).name +
                                                          "): " + e.what_without_backtrace());
        }
        break;
      case ir::OpCategory::kReduction: {
        const auto& x = shapes[o.args[0]];
        for (size_t d = 0; d < x.size(); ++d) {
          const bool reduced = o.dims.empty() || std::find(o.dims.begin(), o.dims.end(), (int64_t)d) != o.dims.end();
          if (!reduced) out.push_back(x[d]);
          else if (o.keepdim) out.push_back(1);
        }
        break;
      }
      case ir::OpCategory::kPool: {  // [N, C, S1..Sk] -> [N, C, S1 / w1, ...] (floor, ir.h)
        out = shapes[o.args[0]];
        for (size_t d = 2; d < out.size(); ++d) out[d] = out[d] / o.dims[d - 2];
        break;
      }
      case ir::OpCategory::kContraction: {  // linear: [..., K] x [N, K] -> [..., N]
        if (o.kind == ir::OpKind::kConv2d) {  // [N, C, H, W] * [K, C/g, R, S] -> [N, K, P, Q] (ir.h)
          const auto& x = shapes[o.args[0]];
          const auto& w = shapes[o.args[1]];
          out = {x[0], w[0], 0, 0};
          for (int d = 0; d < 2; ++d) {
            out[2 + d] = (x[2 + d] + 2 * o.dims[2 + d] - o.dims[4 + d] * (w[2 + d] - 1) - 1) / o.dims[d] + 1;
          }
          break;
        }
        out = shapes[o.args[0]];
        if (out.empty() || shapes[o.args[1]].size() != 2) {
          return Status(StatusCode::kInvalidArgument, "op " + std::to_string(i) + " (linear): needs x [..., K] and weight [N, K]");
        }
        out.back() = shapes[o.args[1]][0];
        break;
      }
    }
    shapes.push_back(std::move(out));
  }
  return shapes;
}

}  // namespace dice::torch_ext
