// relu_graph.h — shared by the runtime tests: the one-op fusion group
// relu(f32 rank-1 input), the smallest task a worker can tune.
#pragma once

#include "dice/core/ir.h"

namespace dice::runtime_test {

/// ir::Graph of `%1 = relu(%0)` with %0 an f32 rank-1 input and %1 the output.
inline ir::Graph ReluGraph() {
  ir::Graph g;
  g.inputs.push_back(ir::InputDecl{ir::DType::kFloat32, 1});
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {0};
  g.ops.push_back(relu);
  g.outputs = {1};
  return g;
}

}  // namespace dice::runtime_test
