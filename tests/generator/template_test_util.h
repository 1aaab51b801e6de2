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

}  // namespace dice::tmpl_test
