// The skinny-GEMM family (generator/src/templates/gemv.cc, issue 19 item 2)
// on CPU: which linear groups get "template:gemv" candidates, their launch
// plans (split-K only for few columns, a workspace for it), 16-byte loads only
// when rows stay aligned, and NVRTC builds for sm_90 in each dtype.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dice/generator/templates.h"
#include "../../generator/src/templates/gemv.h"
#include "dice/runtime/compiler.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;
using tmpl_test::GraphBuilder;
using tmpl_test::MakeTask;
using tmpl_test::Spec;

// out = linear(x [M, K], w [N, K][, b [N]]), optionally followed by relu.
Task Linear(DType dt, int64_t M, int64_t K, int64_t N, bool bias, bool relu = false) {
  GraphBuilder b;
  int x = b.Input(dt, 2), w = b.Input(dt, 2);
  std::vector<int32_t> args = {x, w};
  std::vector<ir::TensorSpec> specs = {Spec(dt, {M, K}), Spec(dt, {N, K})};
  if (bias) {
    args.push_back(b.Input(dt, 1));
    specs.push_back(Spec(dt, {N}));
  }
  int v = b.Op(OpKind::kLinear, args);
  if (relu) v = b.Op(OpKind::kRelu, {v});
  b.Output(v);
  return MakeTask(b.g, specs);
}

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::vector<Candidate> Gemv(const std::vector<Candidate>& all) {
  std::vector<Candidate> out;
  for (const auto& c : all) {
    if (c.origin.rfind("template:gemv/", 0) == 0) out.push_back(c);
  }
  return out;
}

TEST(GemvTemplate, FewRowsGetDeviceFormCandidatesThatCompileInEachDtype) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    auto all = TemplateGenerator().Generate(Linear(dt, 4, 2560, 1024, /*bias=*/true), 8);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    auto cands = Gemv(*all);
    ASSERT_GE(cands.size(), 4u) << ir::DTypeName(dt);
    std::vector<Candidate> some(cands.begin(), cands.begin() + 2);
    some.push_back(cands.back());
    auto built = runtime::CompileAll(some, "sm_90", 2);
    for (size_t i = 0; i < built.size(); ++i) {
      EXPECT_TRUE(built[i].ok()) << some[i].origin << ": " << built[i].status().ToString() << "\n" << some[i].source;
      EXPECT_EQ(some[i].form, CandidateForm::kDevice);
    }
  }
}

TEST(GemvTemplate, SplitKOnlyForFewColumnsAndItUsesAWorkspace) {
  auto few = TemplateGenerator().Generate(Linear(DType::kBFloat16, 4, 2560, 1024, true), 8);
  ASSERT_TRUE(few.ok());
  bool split = false;
  for (const auto& c : Gemv(*few)) {
    if (c.origin.find("/s1/") != std::string::npos) {
      EXPECT_EQ(c.plan.launches.size(), 1u) << c.origin;
      EXPECT_EQ(c.plan.workspace_bytes, 0u) << c.origin;
      EXPECT_EQ(c.plan.launches[0].grid[1], 1u) << c.origin;
    } else {
      split = true;
      ASSERT_EQ(c.plan.launches.size(), 2u) << c.origin;
      EXPECT_EQ(c.plan.workspace_bytes, 4u * 1024u * 4u) << c.origin;  // M * N floats
      EXPECT_GT(c.plan.launches[0].grid[1], 1u) << c.origin;
      EXPECT_EQ(c.plan.launches[1].kernel, "dice_gemv_finish");
    }
  }
  EXPECT_TRUE(split);
  // 9728 columns fill the GPU without splitting K.
  auto many = TemplateGenerator().Generate(Linear(DType::kBFloat16, 4, 2560, 9728, false), 8);
  ASSERT_TRUE(many.ok());
  for (const auto& c : Gemv(*many)) EXPECT_NE(c.origin.find("/s1/"), std::string::npos) << c.origin;
}

TEST(GemvTemplate, WideLoadsOnlyWhenRowsStayAligned) {
  auto aligned = TemplateGenerator().Generate(Linear(DType::kBFloat16, 2, 2560, 4096, false), 8);
  ASSERT_TRUE(aligned.ok());
  for (const auto& c : Gemv(*aligned)) EXPECT_NE(c.origin.find("/v8"), std::string::npos) << c.origin;
  auto odd = TemplateGenerator().Generate(Linear(DType::kBFloat16, 2, 2561, 4096, false), 8);
  ASSERT_TRUE(odd.ok() || odd.status().code() == StatusCode::kUnsupported);
  if (odd.ok()) {
    auto cands = Gemv(*odd);
    ASSERT_FALSE(cands.empty());
    for (const auto& c : cands) EXPECT_NE(c.origin.find("/v1"), std::string::npos) << c.origin;
    auto built = runtime::CompileAll({cands[0]}, "sm_90", 1);
    EXPECT_TRUE(built[0].ok()) << built[0].status().ToString();
  }
}

TEST(GemvTemplate, ManyRowsOrAReductionGetNoGemvCandidate) {
  auto rows = TemplateGenerator().Generate(Linear(DType::kFloat32, 17, 1024, 1024, true), 8);
  if (rows.ok()) {
    EXPECT_TRUE(Gemv(*rows).empty());
  }
  auto rows_relu = TemplateGenerator().Generate(Linear(DType::kFloat32, 17, 1024, 1024, true, /*relu=*/true), 8);
  if (rows_relu.ok()) {
    EXPECT_TRUE(Gemv(*rows_relu).empty());
  }
  GraphBuilder b;
  const int lin = b.Op(OpKind::kLinear, {b.Input(DType::kFloat32, 2), b.Input(DType::kFloat32, 2)});
  b.Output(b.Op(OpKind::kSum, {lin}, {1}, false));
  auto sum = TemplateGenerator().Generate(
      MakeTask(b.g, {Spec(DType::kFloat32, {4, 1024}), Spec(DType::kFloat32, {1024, 1024})}), 8);
  if (sum.ok()) {
    EXPECT_TRUE(Gemv(*sum).empty());
  }
}

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// A DAG epilogue (fusion_policy.h rule 4): y * sigmoid(y) * 2 with the bias,
// applied where each output is stored (after the split-K sum in the
// finishing kernel), the linear value and the sigmoid computed once; the
// sources compile for sm_90. A bare linear's source has no epilogue.
TEST(GemvTemplate, DagEpilogueIsAppliedAtTheStoreAndComputesEachValueOnce) {
  GraphBuilder b;
  const int x = b.Input(DType::kBFloat16, 2), w = b.Input(DType::kBFloat16, 2), bias = b.Input(DType::kBFloat16, 1);
  const int y = b.Op(OpKind::kLinear, {x, w, bias});
  const int sig = b.Op(OpKind::kSigmoid, {y});
  b.Output(b.Op(OpKind::kMul, {b.Op(OpKind::kMul, {y, sig}), b.Const(2.0)}));
  const Task task = MakeTask(
      b.g, {Spec(DType::kBFloat16, {4, 2560}), Spec(DType::kBFloat16, {1024, 2560}), Spec(DType::kBFloat16, {1024})});
  auto all = TemplateGenerator().Generate(task, 8);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto cands = Gemv(*all);
  ASSERT_GE(cands.size(), 4u);
  bool split = false;
  for (const Candidate& c : cands) {
    SCOPED_TRACE(c.origin);
    const size_t begin = c.source.find("float dice_epilogue(float acc) {");
    ASSERT_NE(begin, std::string::npos) << c.source;
    const std::string body = c.source.substr(begin, c.source.find("\n}\n", begin) - begin);
    EXPECT_EQ(Count(body, "acc"), 2) << body;  // the parameter and `v0 = acc`
    EXPECT_EQ(Count(body, "expf("), 1) << body;
    EXPECT_TRUE(Contains(body, "= (v0 * v")) << body;
    if (c.origin.rfind("template:gemv/stream/", 0) == 0) {
      EXPECT_TRUE(Contains(c.source, "if (BIAS) v += dice_f(b[n0 + r]);\n        v = dice_epilogue(v);"));
      EXPECT_TRUE(Contains(c.source, ", false, true>(x, w, b, out, 4);")) << "bias on, silu off, 4 rows";
    } else if (c.origin.find("/s1/") != std::string::npos) {
      EXPECT_TRUE(Contains(c.source, "dice_epilogue(acc[m][r] + dice_f(b[n0 + r]))"));
    } else {
      split = true;
      EXPECT_TRUE(Contains(c.source, "dice_to(out + i, dice_epilogue(v));"));
    }
  }
  EXPECT_TRUE(split);
  std::vector<Candidate> some = {cands.front(), cands.back()};
  auto built = runtime::CompileAll(some, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_TRUE(built[i].ok()) << some[i].origin << ": " << built[i].status().ToString() << "\n" << some[i].source;
  auto bare = TemplateGenerator().Generate(Linear(DType::kBFloat16, 4, 2560, 1024, true), 8);
  ASSERT_TRUE(bare.ok());
  for (const Candidate& c : Gemv(*bare)) {
    // The stream form's epilogue is the identity; the others have none.
    if (c.origin.rfind("template:gemv/stream/", 0) == 0) {
      EXPECT_TRUE(Contains(c.source, "float dice_epilogue(float acc) { return acc; }")) << c.origin;
    } else {
      EXPECT_FALSE(Contains(c.source, "dice_epilogue")) << c.origin;
    }
  }
}

// The stream form (x staged in shared memory, 16-byte weight loads several
// deep, no split-K, no workspace) comes first for aligned rows, names its
// geometry in the origin and compiles for sm_90; unaligned rows get none.
TEST(GemvTemplate, StreamFormLeadsForAlignedRowsWithOneLaunchAndNoWorkspace) {
  for (const int64_t m : {4, 16}) {
    auto all = TemplateGenerator().Generate(Linear(DType::kBFloat16, m, 2560, 6144, false), 8);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    auto cands = Gemv(*all);
    ASSERT_FALSE(cands.empty());
    const Candidate& c = cands.front();
    // 16 rows: four columns a warp (x read from shared memory once for four weight rows), 2 loads deep.
    EXPECT_EQ(c.origin, m == 4 ? "template:gemv/stream/r2/w4/s1/u8/t2560/v8"
                               : "template:gemv/stream/r4/w4/s1/u2/t1024/v8");
    ASSERT_EQ(c.plan.launches.size(), 1u);
    EXPECT_EQ(c.plan.workspace_bytes, 0u);
    EXPECT_EQ(c.plan.launches[0].grid[0], 6144u / (m == 4 ? 8u : 16u));
    EXPECT_EQ(c.plan.launches[0].block[0], 128u);
    std::vector<Candidate> one = {c};
    auto built = runtime::CompileAll(one, "sm_90", 1);
    EXPECT_TRUE(built[0].ok()) << built[0].status().ToString() << "\n" << c.source;
  }
  auto odd = TemplateGenerator().Generate(Linear(DType::kBFloat16, 4, 2561, 1024, false), 8);
  ASSERT_TRUE(odd.ok());
  for (const auto& c : Gemv(*odd)) EXPECT_EQ(c.origin.find("/stream/"), std::string::npos) << c.origin;
}

// The decoder's entry points (templates/gemv.h): checks, the silu_mul
// instance over a [2n, k] weight, several instances after one prelude.
TEST(GemvTemplate, StreamSpecChecksAndSiluMulInstance) {
  tmpl::StreamGemvSpec s;
  s.m = 4, s.n = 9728, s.k = 2560, s.dtype = DType::kBFloat16, s.silu_mul = true;
  EXPECT_TRUE(tmpl::CheckStreamGemv(s).ok());
  EXPECT_EQ(tmpl::StreamGemvOrigin(s), "template:gemv/stream/r1/w4/s1/u8/t2560/v8/silu_mul");
  const KernelLaunch l = tmpl::StreamGemvLaunch(s, "gu");
  EXPECT_EQ(l.grid[0], 9728u / 4u);  // one output column (two weight rows) a warp
  tmpl::StreamGemvSpec bad = s;
  bad.k = 2561;
  EXPECT_EQ(tmpl::CheckStreamGemv(bad).code(), StatusCode::kUnsupported);
  bad = s, bad.m = 17;
  EXPECT_FALSE(tmpl::CheckStreamGemv(bad).ok());
  bad = s, bad.bias = true;
  EXPECT_FALSE(tmpl::CheckStreamGemv(bad).ok());
  tmpl::StreamGemvSpec down = s;
  down.silu_mul = false, down.n = 2560, down.k = 9728, down.m = 8;
  Candidate c;
  c.source = tmpl::StreamGemvPrelude(DType::kBFloat16, true) + tmpl::StreamGemvInstance(s, "gu", true) +
             tmpl::StreamGemvInstance(down, "down", true);
  EXPECT_TRUE(
      Contains(c.source, "gu(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int rows)"));
  EXPECT_TRUE(Contains(c.source, "v = dice_round(g / (1.f + expf(-g))) * up;"));
  c.plan.launches = {KernelLaunch{"gu"}, KernelLaunch{"down"}};
  auto r = runtime::CompileCandidate(c, "sm_90");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// The direct form (x through L1, grid-stride): geometry overrides, their
// checks, the capped grid, and one source holding a direct and a staged
// instance (the shared finish) that NVRTC builds for sm_90.
TEST(GemvTemplate, DirectFormWithGeometryOverridesCompilesBesideTheStagedForm) {
  tmpl::StreamGemvSpec s;
  s.m = 8, s.n = 2560, s.k = 4096, s.dtype = DType::kBFloat16;
  s.x_direct = true, s.cols_per_warp = 1, s.warps = 2, s.unroll = 8, s.grid_blocks = 528;
  ASSERT_TRUE(tmpl::CheckStreamGemv(s).ok());
  EXPECT_EQ(tmpl::StreamGemvOrigin(s), "template:gemv/direct/r1/w2/u8/g528/v8");
  EXPECT_EQ(tmpl::StreamGemvLaunch(s, "o").grid[0], 528u);  // 1280 column groups, capped
  EXPECT_EQ(tmpl::StreamGemvLaunch(s, "o").block[0], 64u);
  tmpl::StreamGemvSpec uncapped = s;
  uncapped.grid_blocks = 0;
  EXPECT_EQ(tmpl::StreamGemvLaunch(uncapped, "o").grid[0], 1280u);
  tmpl::StreamGemvSpec bad = s;
  bad.x_direct = false;  // the staged form does not loop over column groups
  EXPECT_EQ(tmpl::CheckStreamGemv(bad).code(), StatusCode::kUnsupported);
  bad = s, bad.unroll = 17;
  EXPECT_FALSE(tmpl::CheckStreamGemv(bad).ok());
  bad = s, bad.cols_per_warp = 5;
  EXPECT_FALSE(tmpl::CheckStreamGemv(bad).ok());
  bad = s, bad.warps = 9;
  EXPECT_FALSE(tmpl::CheckStreamGemv(bad).ok());
  tmpl::StreamGemvSpec gu;
  gu.m = 4, gu.n = 9728, gu.k = 2560, gu.dtype = DType::kBFloat16, gu.silu_mul = true, gu.x_direct = true;
  EXPECT_EQ(tmpl::StreamGemvOrigin(gu), "template:gemv/direct/r1/w4/u8/g0/v8/silu_mul");
  Candidate c;
  c.source = tmpl::StreamGemvPrelude(DType::kBFloat16, true) + tmpl::StreamGemvInstance(s, "o", true) +
             tmpl::StreamGemvInstance(gu, "gu", true) + tmpl::StreamGemvInstance(uncapped, "o_staged_geometry", false);
  EXPECT_TRUE(Contains(c.source, "  dice_gemv_direct<8, 2560LL, 4096LL, 1, 2, 8, false, false>(x, w, nullptr, out, rows);"))
      << c.source;
  c.plan.launches = {KernelLaunch{"o"}, KernelLaunch{"gu"}, KernelLaunch{"o_staged_geometry"}};
  auto r = runtime::CompileCandidate(c, "sm_90");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

}  // namespace
}  // namespace dice::generator
