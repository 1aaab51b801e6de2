// template_test_util.h — small builders shared by the template generator
// tests: a graph builder over the IR, contiguous specs and Task::Make on a
// given target (default: TargetInfo{}, the compile-only sm_90 target).
#pragma once

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "dice/core/task.h"

namespace dice::tmpl_test {

/// Appends inputs, ops and outputs to an ir::Graph; returns value ids.
struct GraphBuilder {
  ir::Graph g;
  int Input(ir::DType dt, int rank) {
    g.inputs.push_back(ir::InputDecl{dt, rank});
    return static_cast<int>(g.inputs.size()) - 1;
  }
  int Op(ir::OpKind kind, std::vector<int32_t> args, std::vector<int64_t> dims = {}, bool keepdim = false,
         int64_t ivalue = 0, std::vector<double> scalars = {}) {
    ir::Op op;
    op.kind = kind;
    op.args = std::move(args);
    op.dims = std::move(dims);
    op.keepdim = keepdim;
    op.ivalue = ivalue;
    op.scalars = std::move(scalars);
    g.ops.push_back(op);
    return g.op_value(g.ops.size() - 1);
  }
  int Const(double v) { return Op(ir::OpKind::kConstant, {}, {}, false, 0, {v}); }
  void Output(int v) { g.outputs.push_back(v); }
};

/// Task::Make that records a test failure (and returns an empty Task) on error.
inline Task MakeTask(const ir::Graph& g, const std::vector<ir::TensorSpec>& inputs, TargetInfo target = {}) {
  auto t = Task::Make(g, inputs, std::move(target));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : Task{};
}

/// A contiguous, 16-byte aligned spec.
inline ir::TensorSpec Spec(ir::DType dt, std::vector<int64_t> shape) {
  return ir::TensorSpec::Contiguous(dt, std::move(shape));
}

}  // namespace dice::tmpl_test
