// template_test_util.h — small builders shared by the template generator
// tests: a graph builder over the IR, contiguous specs and Task::Make on a
// given target (default: TargetInfo{}, the compile-only sm_90 target).
#pragma once

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "dice/core/ir_builder.h"
#include "dice/core/task.h"

namespace dice::tmpl_test {

/// The IR graph builder (dice/core/ir_builder.h).
using GraphBuilder = ir::GraphBuilder;

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

/// linear(x [M, K], w [N, K][, b [N]]) followed by `chain(builder, linear
/// value, extra input ids) -> output value`; the extra inputs (after x, w and
/// b) have `extra_specs`. Used by the gemm, gemm_lt and gemv family tests.
template <typename Chain>
Task LinearTask(ir::DType dt, int64_t M, int64_t K, int64_t N, bool bias, Chain chain,
                std::vector<ir::TensorSpec> extra_specs = {}) {
  GraphBuilder b;
  const int x = b.Input(dt, 2), w = b.Input(dt, 2);
  std::vector<int32_t> args = {x, w};
  std::vector<ir::TensorSpec> specs = {Spec(dt, {M, K}), Spec(dt, {N, K})};
  if (bias) {
    args.push_back(b.Input(dt, 1));
    specs.push_back(Spec(dt, {N}));
  }
  std::vector<int> extras;
  for (const auto& s : extra_specs) {
    extras.push_back(b.Input(s.dtype, static_cast<int>(s.shape.size())));
    specs.push_back(s);
  }
  const int lin = b.Op(ir::OpKind::kLinear, args);
  b.Output(chain(b, lin, extras));
  return MakeTask(b.g, specs);
}

}  // namespace dice::tmpl_test
