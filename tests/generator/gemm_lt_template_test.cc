// The cuBLASLt family (generator/src/templates/gemm_lt.cc, issue 18 item 1:
// cuBLASLt's fused epilogues) on CPU: which linear + epilogue groups become
// one-call cublasLtMatmul candidates (bias, an output-shaped add, relu, tanh
// gelu), one per heuristic rank, in what order beside the CUTLASS family;
// the groups it refuses; shape-generic sources; and one real nvcc build of a
// bf16 candidate for sm_90 that links cuBLASLt (skipped without nvcc).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dice/generator/templates.h"
#include "dice/runtime/extension_compiler.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;
using tmpl_test::GraphBuilder;
using tmpl_test::LinearTask;
using tmpl_test::MakeTask;
using tmpl_test::Spec;

int GeluTanh(GraphBuilder& b, int v, const std::vector<int>&) {
  return b.Op(OpKind::kGelu, {v}, {}, false, /*ivalue=*/1);
}

std::vector<Candidate> All(const Task& task, int max = 16) {
  TemplateGenerator gen;
  auto c = gen.Generate(task, max);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : std::vector<Candidate>{};
}

std::vector<Candidate> LtOnly(const Task& task, int max = 16) {
  std::vector<Candidate> lt;
  for (auto& c : All(task, max))
    if (c.origin.rfind("template:gemm_lt/", 0) == 0) lt.push_back(c);
  return lt;
}

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(GemmLtTemplates, BiasTanhGeluBf16GivesOneCandidatePerHeuristicRankAndNoCutlass) {
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh);
  const auto all = All(task);
  ASSERT_EQ(all.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const Candidate& c = all[static_cast<size_t>(r)];
    SCOPED_TRACE(c.origin);
    EXPECT_EQ(c.origin, "template:gemm_lt/bias_gelu/a" + std::to_string(r));
    EXPECT_EQ(c.form, CandidateForm::kExtension);
    EXPECT_FALSE(c.reduced_precision);
    EXPECT_TRUE(Contains(c.source, "\n// dice-nvcc-link: cublasLt\n"));
    EXPECT_TRUE(Contains(c.source, "#include <cublasLt.h>"));
    EXPECT_TRUE(Contains(c.source, "kEpilogue = CUBLASLT_EPILOGUE_GELU_BIAS;"));
    EXPECT_TRUE(Contains(c.source, "kType = CUDA_R_16BF;"));
    EXPECT_TRUE(Contains(c.source, "kAlgoRank = " + std::to_string(r) + ";"));
    EXPECT_TRUE(Contains(c.source, "CUBLAS_COMPUTE_32F"));
    EXPECT_TRUE(Contains(c.source, "torch::Tensor dice_forward(torch::Tensor in0, torch::Tensor in1, torch::Tensor in2)"));
    EXPECT_FALSE(Contains(c.source, "cutlass/")) << "no CUTLASS: the tuner would record a CUTLASS version for it";
    EXPECT_FALSE(Contains(c.source, "torch/extension.h"));
    auto libs = runtime::ExtensionLinkLibraries(c);
    ASSERT_TRUE(libs.ok()) << libs.status().ToString();
    EXPECT_EQ(*libs, std::vector<std::string>{"cublasLt"});
  }
  // No CUTLASS candidate follows a bf16 group cuBLASLt takes (CutlassAfterLt).
}

// DICE_GEMM_CUTLASS_16BIT=1 brings the CUTLASS tensor-op candidates back
// after cuBLASLt's for a 16-bit group; a float32 group always gets them (3xTF32).
TEST(GemmLtTemplates, CutlassFollowsCublasLtForFloat32AndOnRequestFor16Bit) {
  const Task bf16 = LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh);
  ::setenv("DICE_GEMM_CUTLASS_16BIT", "1", 1);
  const auto with = All(bf16);
  ::unsetenv("DICE_GEMM_CUTLASS_16BIT");
  ASSERT_GE(with.size(), 4u);
  EXPECT_EQ(with[2].origin, "template:gemm_lt/bias_gelu/a2");
  EXPECT_EQ(with[3].origin.rfind("template:gemm/tc/", 0), 0u) << with[3].origin;
  const Task f32 = LinearTask(DType::kFloat32, 256, 256, 256, true,
                              [](GraphBuilder& b, int v, const std::vector<int>&) { return b.Op(OpKind::kRelu, {v}); });
  const auto all = All(f32);
  ASSERT_GE(all.size(), 4u);
  EXPECT_EQ(all[2].origin, "template:gemm_lt/bias_relu/a2");
  EXPECT_EQ(all[3].origin.rfind("template:gemm/3xtf32/", 0), 0u) << all[3].origin;
}

TEST(GemmLtTemplates, ResidualAddBeforeReluIsCublasLtsSourceMatrixWithBetaOne) {
  const Task task = LinearTask(
      DType::kFloat32, 256, 512, 384, true,
      [](GraphBuilder& b, int v, const std::vector<int>& e) { return b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {e[0], v})}); },
      {Spec(DType::kFloat32, {256, 384})});
  const auto lt = LtOnly(task);
  ASSERT_EQ(lt.size(), 3u);
  EXPECT_EQ(lt[0].origin, "template:gemm_lt/residual_bias_relu/a0");
  EXPECT_TRUE(Contains(lt[0].source, "kEpilogue = CUBLASLT_EPILOGUE_RELU_BIAS;"));
  EXPECT_TRUE(Contains(lt[0].source, "kResidual = true;"));
  EXPECT_TRUE(Contains(lt[0].source, "kType = CUDA_R_32F;"));
  // C is the residual (in3), D the fresh output; the bias is linear's (in2).
  EXPECT_TRUE(Contains(lt[0].source, "&beta, in3.data_ptr(), plan.c, out.data_ptr(), plan.c"));
  EXPECT_TRUE(Contains(lt[0].source, "dice_desc(in2.data_ptr())"));
}

TEST(GemmLtTemplates, PerColumnAddWithoutLinearsBiasBecomesTheBiasEpilogue) {
  const Task task = LinearTask(
      DType::kFloat16, 128, 256, 256, false,
      [](GraphBuilder& b, int v, const std::vector<int>& e) { return b.Op(OpKind::kAdd, {v, e[0]}); },
      {Spec(DType::kFloat16, {1, 256})});
  const auto lt = LtOnly(task);
  ASSERT_EQ(lt.size(), 3u);
  EXPECT_EQ(lt[0].origin, "template:gemm_lt/bias/a0");
  EXPECT_TRUE(Contains(lt[0].source, "kEpilogue = CUBLASLT_EPILOGUE_BIAS;"));
  EXPECT_TRUE(Contains(lt[0].source, "kResidual = false;"));
  EXPECT_TRUE(Contains(lt[0].source, "dice_desc(in2.data_ptr())"));
}

// Shapes are read at run time: two shapes of one epilogue, dtype and rank
// give byte-identical sources, so one build serves both.
TEST(GemmLtTemplates, DifferentShapesGiveIdenticalSources) {
  const auto a = LtOnly(LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh));
  const auto b = LtOnly(LinearTask(DType::kBFloat16, 64, 1024, 4096, true, GeluTanh));
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].source, b[i].source) << a[i].origin;
}

TEST(GemmLtTemplates, EpiloguesCublasLtDoesNotHaveAreLeftToTheOtherFamilies) {
  struct Case {
    const char* what;
    Task task;
  };
  const std::vector<Case> cases = {
      {"erf gelu", LinearTask(DType::kFloat32, 64, 64, 64, true,
                              [](GraphBuilder& b, int v, const std::vector<int>&) {
                                return b.Op(OpKind::kGelu, {v}, {}, false, /*ivalue=*/0);
                              })},
      {"a scalar multiply", LinearTask(DType::kFloat32, 64, 64, 64, true,
                                       [](GraphBuilder& b, int v, const std::vector<int>&) {
                                         return b.Op(OpKind::kMul, {v, b.Const(2.0)});
                                       })},
      {"an add after the activation",
       LinearTask(
           DType::kFloat32, 64, 64, 64, false,
           [](GraphBuilder& b, int v, const std::vector<int>& e) { return b.Op(OpKind::kAdd, {b.Op(OpKind::kRelu, {v}), e[0]}); },
           {Spec(DType::kFloat32, {64, 64})})},
      {"a second bias beside linear's",
       LinearTask(
           DType::kFloat32, 64, 64, 64, true,
           [](GraphBuilder& b, int v, const std::vector<int>& e) { return b.Op(OpKind::kAdd, {v, e[0]}); },
           {Spec(DType::kFloat32, {64})})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_TRUE(LtOnly(c.task).empty());
    EXPECT_FALSE(All(c.task).empty()) << "the CUTLASS family still serves it";
  }
}

TEST(GemmLtTemplates, EnvironmentSwitchTurnsTheFamilyOff) {
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh);
  ::setenv("DICE_GEMM_LT", "0", 1);
  const auto lt = LtOnly(task);
  const auto all = All(task);
  ::unsetenv("DICE_GEMM_LT");
  EXPECT_TRUE(lt.empty());
  EXPECT_FALSE(all.empty());
  EXPECT_EQ(LtOnly(task).size(), 3u);
}

// Under DICE_STRICT_FP32=1 the CUTLASS family drops its 3xTF32 candidates;
// cuBLASLt's CUBLAS_COMPUTE_32F is strict float32, so it still serves.
TEST(GemmLtTemplates, StrictFp32KeepsTheFloat32CublasLtCandidates) {
  const Task task = LinearTask(DType::kFloat32, 256, 256, 256, true,
                               [](GraphBuilder& b, int v, const std::vector<int>&) { return b.Op(OpKind::kRelu, {v}); });
  ::setenv("DICE_STRICT_FP32", "1", 1);
  const auto all = All(task);
  ::unsetenv("DICE_STRICT_FP32");
  ASSERT_EQ(all.size(), 3u);
  for (const auto& c : all) EXPECT_EQ(c.origin.rfind("template:gemm_lt/bias_relu/", 0), 0u) << c.origin;
}

TEST(GemmLtTemplates, MaxCandidatesCapsTheRanks) {
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh);
  const auto two = All(task, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].origin, "template:gemm_lt/bias_gelu/a1");
}

// One real build: host C++ only (no CUTLASS), linked against cuBLASLt.
TEST(GemmLtTemplates, BFloat16CandidateCompilesForSm90AndLinksCublasLt) {
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, GeluTanh);
  const auto lt = LtOnly(task, 1);
  ASSERT_EQ(lt.size(), 1u);
  runtime::ExtensionCompileOptions opt;
  opt.timeout_s = 900;
  opt.build_cache_dir = "off";
  auto build = runtime::CompileExtensionCached(lt[0], "sm_90", static_cast<int>(task.inputs.size()), opt);
  if (!build.ok() && build.status().code() == StatusCode::kNotFound) {
    GTEST_SKIP() << "no compiler toolchain: " << build.status().ToString();
  }
  ASSERT_TRUE(build.ok()) << build.status().ToString();
  std::printf("[gemm_lt] %s built in %.1f s\n", lt[0].origin.c_str(), (*build)->compile_ms() / 1000.0);
  // The library names cuBLASLt among its needed libraries (readelf -d).
  const std::string cmd = "readelf -d '" + (*build)->library_path() + "' | grep -q 'NEEDED.*libcublasLt'";
  if (std::system("command -v readelf > /dev/null") != 0) GTEST_SKIP() << "readelf absent";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "libcublasLt is not a NEEDED entry of " << (*build)->library_path();
}

}  // namespace
}  // namespace dice::generator
