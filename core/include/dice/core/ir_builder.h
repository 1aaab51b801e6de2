// dice/core/ir_builder.h — appends inputs, ops and outputs to an ir::Graph
// (dice/core/ir.h) and hands back value ids, for code that writes a fusion
// group's IR by hand: the SDAR decoder's declared groups
// (generator/src/sdar/sdar_groups.cc) and the template tests. Header-only,
// torch-free. Nothing is validated here: ir::Validate / Task::Make check the
// finished graph (argument ids, ranks, shapes) and report errors.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dice/core/ir.h"

namespace dice::ir {

/// Builds `g` op by op. Value ids follow ir::Graph: inputs first, then one
/// value per op (Graph::op_value).
struct GraphBuilder {
  Graph g;
  /// Declares a graph input of dtype `dt` and rank `rank`; returns its value id.
  int Input(DType dt, int rank) {
    g.inputs.push_back(InputDecl{dt, rank});
    return static_cast<int>(g.inputs.size()) - 1;
  }
  /// Appends an op over the value ids `args` with its attributes (reduction
  /// dims, keepdim, integer and scalar attributes); returns its value id.
  int Op(OpKind kind, std::vector<int32_t> args, std::vector<int64_t> dims = {}, bool keepdim = false,
         int64_t ivalue = 0, std::vector<double> scalars = {}) {
    ir::Op op;
    op.kind = kind;
    op.args = std::move(args);
    op.dims = std::move(dims);
    op.keepdim = keepdim;
    op.ivalue = ivalue;
    op.scalars = std::move(scalars);
    g.ops.push_back(std::move(op));
    return g.op_value(g.ops.size() - 1);
  }
  /// A scalar constant `v`; returns its value id.
  int Const(double v) { return Op(OpKind::kConstant, {}, {}, false, 0, {v}); }
  /// Marks value `v` as a graph output (in call order).
  void Output(int v) { g.outputs.push_back(v); }
};

}  // namespace dice::ir
