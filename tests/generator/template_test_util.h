// template_test_util.h — small builders shared by the template generator
// tests: a graph builder over the IR, contiguous specs and Task::Make on a
// given target (default: TargetInfo{}, the compile-only sm_90 target).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/ir_builder.h"
#include "dice/core/task.h"
#include "dice/runtime/extension_compiler.h"

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

/// Whether a candidate's origin names a tile over merged axes (the
/// elementwise family's "_flat" variants, dice/generator layout.h
/// MergeAdjacentAxes), which follow the unmerged ones.
inline bool IsFlatOrigin(const std::string& origin) {
  return origin.size() > 5 && origin.compare(origin.size() - 5, 5, "_flat") == 0;
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

/// One real nvcc build of the extension-form candidate `c` (a group of
/// `num_inputs` inputs) for sm_90 (sm_90a when its source asks), into a
/// fresh build-cache directory removed afterwards; prints "[<tag>] origin
/// built for <arch> in <s>". GTEST_SKIPs without the CUTLASS headers or the
/// compiler toolchain; a failed build is a test failure. Call it last in a
/// test (a skip returns from here only).
inline void BuildForSm90(const Candidate& c, int num_inputs, const char* tag) {
  if (runtime::CutlassIncludeDir().empty()) {
    GTEST_SKIP() << "CUTLASS headers absent (scripts/setup.sh unpacks them; or set DICE_CUTLASS_INCLUDE)";
  }
  char tmpl[] = "/tmp/dice-template-build-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  runtime::ExtensionCompileOptions opt;
  opt.timeout_s = 1800;
  opt.build_cache_dir = dir;
  auto build = runtime::CompileExtensionCached(c, "sm_90", num_inputs, opt);
  const bool no_toolchain = !build.ok() && build.status().code() == StatusCode::kNotFound;
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  if (no_toolchain) GTEST_SKIP() << "no compiler toolchain: " << build.status().ToString();
  ASSERT_TRUE(build.ok()) << build.status().ToString();
  EXPECT_FALSE((*build)->library_path().empty());
  std::printf("[%s] %s built for %s in %.1f s\n", tag, c.origin.c_str(), runtime::NvccArch(c, "sm_90").c_str(),
              (*build)->compile_ms() / 1000.0);
}

}  // namespace dice::tmpl_test
