// The gemm family's Hopper kernels (generator/src/templates/gemm_sm90.cc,
// issue 18 item 1: CUTLASS 3.x GEMM with TMA and wgmma, the epilogue an
// epilogue visitor tree) on CPU: off unless DICE_GEMM_SM90=1; then first
// for bf16 / f16 groups on sm_90 with 16-byte rows, never for float32 or on
// another arch; the source's kind (row broadcast, output-shaped C, none);
// and one real nvcc build for sm_90a (skipped without nvcc or the headers).
#include <gtest/gtest.h>

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

// DICE_GEMM_SM90=1 and DICE_GEMM_LT=0 (cuBLASLt would take the plain
// epilogues first) for the scope of one test.
struct Sm90On {
  Sm90On() {
    ::setenv("DICE_GEMM_SM90", "1", 1);
    ::setenv("DICE_GEMM_LT", "0", 1);
  }
  ~Sm90On() {
    ::unsetenv("DICE_GEMM_SM90");
    ::unsetenv("DICE_GEMM_LT");
  }
};

std::vector<Candidate> Generate(const Task& task, int max = 8) {
  auto c = TemplateGenerator().Generate(task, max);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : std::vector<Candidate>{};
}

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// leaky_relu(linear * 2): an epilogue cuBLASLt has no fused form of.
int MulLeakyRelu(GraphBuilder& b, int v, const std::vector<int>&) {
  return b.Op(OpKind::kLeakyRelu, {b.Op(OpKind::kMul, {v, b.Const(2.0)})}, {}, false, 0, {0.1});
}

int AddResidualRelu(GraphBuilder& b, int v, const std::vector<int>& e) {
  return b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {v, e[0]})});
}

TEST(GemmSm90Templates, OffByDefaultThenFirstForSixteenBitGroupsOnHopper) {
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, MulLeakyRelu);
  ::setenv("DICE_GEMM_LT", "0", 1);
  const auto off = Generate(task);
  ::unsetenv("DICE_GEMM_LT");
  ASSERT_FALSE(off.empty());
  EXPECT_EQ(off[0].origin.rfind("template:gemm/tc/", 0), 0u) << off[0].origin;
  Sm90On on;
  const auto cands = Generate(task);
  ASSERT_GE(cands.size(), 4u);
  EXPECT_EQ(cands[0].origin, "template:gemm/sm90-tc/128x128x64");
  EXPECT_EQ(cands[1].origin, "template:gemm/sm90-tc/128x256x64");
  EXPECT_EQ(cands[2].origin, "template:gemm/sm90-tc/128x128x64/c2");
  EXPECT_EQ(cands[3].origin.rfind("template:gemm/tc/", 0), 0u) << cands[3].origin;  // then the 2.x tiles
  const Candidate& c = cands[0];
  EXPECT_EQ(c.form, CandidateForm::kExtension);
  EXPECT_FALSE(c.reduced_precision);
  EXPECT_EQ(runtime::NvccArch(c, "sm_90"), "sm_90a");
  EXPECT_TRUE(Contains(c.source, "cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;"));
  EXPECT_TRUE(Contains(c.source, "cutlass::epilogue::TmaWarpSpecializedCooperative, DiceFusion>::CollectiveOp;"));
  // The bias is the row broadcast feeding the compute node, which runs the generated epilogue.
  EXPECT_TRUE(Contains(c.source, "Sm90RowBroadcast<0, DiceTileShape, cutlass::bfloat16_t, float"));
  EXPECT_TRUE(Contains(c.source, "DiceEpilogue::Apply(float(acc[i]), float(c[i]))"));
  EXPECT_TRUE(Contains(c.source, "args.epilogue.thread = {{}, {static_cast<E const*>(in2.data_ptr()), E(0), {}}, {}};"));
  EXPECT_TRUE(Contains(c.source, "args.epilogue.ptr_C = nullptr;"));
  EXPECT_TRUE(Contains(c.source, "cutlass::make_cute_packed_stride(DiceGemmKernel::StrideB{}, {n, k, 1})"));
  // Shape-generic: M, N, K come from the tensors.
  EXPECT_FALSE(Contains(c.source, "3072")) << "no shape baked in";
  EXPECT_EQ(Generate(task, 2).size(), 2u);
}

TEST(GemmSm90Templates, SourceKindsAndWhereTheyDoNotApply) {
  Sm90On on;
  // An output-shaped residual: the epilogue's TMA-loaded C.
  const auto res = Generate(LinearTask(DType::kFloat16, 256, 512, 512, false, AddResidualRelu,
                                       {Spec(DType::kFloat16, {256, 512})}));
  ASSERT_EQ(res[0].origin, "template:gemm/sm90-tc/128x128x64");
  EXPECT_TRUE(Contains(res[0].source, "Sm90SrcFetch<cutlass::half_t>"));
  EXPECT_TRUE(Contains(res[0].source, "args.epilogue.dC = cutlass::make_cute_packed_stride"));
  EXPECT_TRUE(Contains(res[0].source, "args.epilogue.thread = {{}, {}, {}};"));
  // No source at all.
  const auto plain = Generate(LinearTask(DType::kBFloat16, 256, 512, 512, false, MulLeakyRelu));
  EXPECT_TRUE(Contains(plain[0].source, "args.epilogue.thread = {{}, {}};"));
  // float32: 3xTF32 has no sm90 form; another arch; rows that are not 16-byte multiples.
  EXPECT_EQ(Generate(LinearTask(DType::kFloat32, 256, 512, 512, true, MulLeakyRelu))[0].origin.rfind(
                "template:gemm/3xtf32/", 0),
            0u);
  TargetInfo ampere;
  ampere.arch = "sm_80";
  const Task t = LinearTask(DType::kBFloat16, 256, 512, 512, true, MulLeakyRelu);
  EXPECT_EQ(Generate(MakeTask(t.graph, t.inputs, ampere))[0].origin.rfind("template:gemm/tc/", 0), 0u);
  EXPECT_EQ(Generate(LinearTask(DType::kBFloat16, 256, 516, 512, true, MulLeakyRelu))[0].origin.rfind(
                "template:gemm/tc/", 0),
            0u)
      << "K = 516: 8-byte rows, no TMA";
}

// One real build (issue 18: "CUTLASS candidates compile for sm_90a on CPU
// where the compiler allows"): nvcc for sm_90a, minutes on 2 cores.
TEST(GemmSm90Templates, Bf16CandidateCompilesForSm90aWithNvcc) {
  Sm90On on;
  const Task task = LinearTask(DType::kBFloat16, 512, 768, 3072, true, MulLeakyRelu);
  const auto cands = Generate(task, 1);
  ASSERT_EQ(cands.size(), 1u);
  ASSERT_EQ(cands[0].origin, "template:gemm/sm90-tc/128x128x64");
  tmpl_test::BuildForSm90(cands[0], static_cast<int>(task.inputs.size()), "gemm-sm90");
}

}  // namespace
}  // namespace dice::generator
