// The conv template family (generator/src/templates/conv.cc, issue 18 item
// 2) on CPU: which conv2d + epilogue groups become CUTLASS implicit-GEMM
// extension-form candidates, their origins, precision marks and tile order,
// DICE_STRICT_FP32, the groups it refuses (with the reason), shape-generic
// sources, and one real nvcc build of a TF32 candidate for sm_90 (skipped
// without nvcc or the CUTLASS headers).
#include <gtest/gtest.h>

#include <unistd.h>

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
using tmpl_test::MakeTask;
using tmpl_test::Spec;

struct ConvShape {
  int64_t n = 8, c = 64, h = 64, w = 64, k = 128, r = 3, s = 3;
  std::vector<int64_t> attrs = {1, 1, 1, 1, 1, 1};  // {sh, sw, ph, pw, dh, dw}
  int64_t groups = 1;
};

// Output spatial size (torch's formula), for the extra tensors' specs.
std::vector<int64_t> OutShape(const ConvShape& cs) {
  const int64_t p = (cs.h + 2 * cs.attrs[2] - cs.attrs[4] * (cs.r - 1) - 1) / cs.attrs[0] + 1;
  const int64_t q = (cs.w + 2 * cs.attrs[3] - cs.attrs[5] * (cs.s - 1) - 1) / cs.attrs[1] + 1;
  return {cs.n, cs.k, p, q};
}

// conv2d(x, w[, b]) followed by `chain` (called with the builder, the conv
// value and the extra inputs; returns the output value).
template <typename Chain>
Task ConvTask(DType dt, const ConvShape& cs, bool bias, Chain chain, std::vector<ir::TensorSpec> extra_specs = {}) {
  GraphBuilder b;
  const int x = b.Input(dt, 4), w = b.Input(dt, 4);
  std::vector<int32_t> args = {x, w};
  std::vector<ir::TensorSpec> specs = {Spec(dt, {cs.n, cs.c, cs.h, cs.w}), Spec(dt, {cs.k, cs.c / cs.groups, cs.r, cs.s})};
  if (bias) {
    args.push_back(b.Input(dt, 1));
    specs.push_back(Spec(dt, {cs.k}));
  }
  std::vector<int> extras;
  for (const auto& s : extra_specs) {
    extras.push_back(b.Input(s.dtype, static_cast<int>(s.shape.size())));
    specs.push_back(s);
  }
  const int conv = b.Op(OpKind::kConv2d, args, cs.attrs, false, cs.groups);
  b.Output(chain(b, conv, extras));
  return MakeTask(b.g, specs);
}

int Relu(GraphBuilder& b, int v, const std::vector<int>&) { return b.Op(OpKind::kRelu, {v}); }
int Mish(GraphBuilder& b, int v, const std::vector<int>&) { return b.Op(OpKind::kMish, {v}); }
int MishMish(GraphBuilder& b, int v, const std::vector<int>&) {
  return b.Op(OpKind::kMish, {b.Op(OpKind::kMish, {v})});
}
int AddExtraRelu(GraphBuilder& b, int v, const std::vector<int>& e) {
  return b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {v, e.at(0)})});
}

std::vector<Candidate> Generate(const Task& task, int max = 8) {
  TemplateGenerator gen;
  auto c = gen.Generate(task, max);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : std::vector<Candidate>{};
}

std::string Refusal(const Task& task) {
  TemplateGenerator gen;
  auto c = gen.Generate(task, 8);
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported) << c.status().ToString();
  return c.status().message();
}

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(ConvTemplates, ConvBiasMishF32GivesOneTf32ImplicitGemmCandidatePerTile) {
  const Task task = ConvTask(DType::kFloat32, ConvShape{}, true, MishMish);
  const auto cands = Generate(task);
  ASSERT_EQ(cands.size(), 3u);
  for (const Candidate& c : cands) {
    SCOPED_TRACE(c.origin);
    EXPECT_EQ(c.form, CandidateForm::kExtension);
    EXPECT_EQ(c.origin.rfind("template:conv/tf32/", 0), 0u);
    EXPECT_TRUE(c.reduced_precision);  // TF32, cuDNN's precision under PyTorch's default allow_tf32
    EXPECT_TRUE(Contains(c.source, "cutlass/conv/kernel/default_conv2d_fprop.h"));
    EXPECT_TRUE(Contains(c.source, "cutlass::conv::device::ImplicitGemmConvolution<DiceConvKernel>"));
    EXPECT_TRUE(Contains(c.source, "cutlass::conv::IteratorAlgorithm::kOptimized"));
    EXPECT_TRUE(Contains(c.source, "cutlass::arch::OpMultiplyAdd,"));
    EXPECT_FALSE(Contains(c.source, "OpMultiplyAddFastF32"));
    EXPECT_TRUE(Contains(c.source, "cutlass::gemm::GemmShape<16, 8, 8>"));
    EXPECT_TRUE(Contains(c.source, "torch::Tensor dice_forward(torch::Tensor in0, torch::Tensor in1, torch::Tensor in2)"));
    // Two mish calls in the generated epilogue, the bias broadcast per channel (stride 0) and added to acc.
    const size_t first = c.source.find("dice_mish(");
    ASSERT_NE(first, std::string::npos);
    EXPECT_NE(c.source.find("dice_mish(", first + 1), std::string::npos);
    EXPECT_TRUE(Contains(c.source, "Layout(Layout::Stride(0))"));
    EXPECT_TRUE(Contains(c.source, "(acc + c)"));
    EXPECT_TRUE(Contains(c.source, "static int const kCount = 4;"));
    EXPECT_TRUE(Contains(c.source, "static bool const kIsHeavy = true;"));
    EXPECT_TRUE(Contains(c.source, "Per element, in float: the conv2d"));
    // NHWC operands made inside, a channels_last output returned.
    EXPECT_TRUE(Contains(c.source, "in0.contiguous(at::MemoryFormat::ChannelsLast)"));
    EXPECT_TRUE(Contains(c.source, "in1.contiguous(at::MemoryFormat::ChannelsLast)"));
    EXPECT_TRUE(Contains(c.source, "memory_format(at::MemoryFormat::ChannelsLast)"));
    EXPECT_TRUE(Contains(c.source, "constexpr int64_t sh = 1LL, sw = 1LL, ph = 1LL, pw = 1LL, dh = 1LL, dw = 1LL;"));
    EXPECT_TRUE(Contains(c.source, "getCurrentCUDAStream"));
  }
  EXPECT_EQ(cands[0].origin, "template:conv/tf32/128x128x16/s3");
  EXPECT_NE(cands[1].origin, cands[2].origin);
}

TEST(ConvTemplates, SmallOutputsTryTheSmallTileFirst) {
  ConvShape cs;
  cs.n = 1, cs.c = 16, cs.h = 16, cs.w = 16, cs.k = 32;  // M = 256: 2 CTAs of 128 rows, 4 of 64
  const auto cands = Generate(ConvTask(DType::kFloat32, cs, false, Mish));
  ASSERT_EQ(cands.size(), 3u);
  EXPECT_EQ(cands[0].origin, "template:conv/tf32/64x64x16/s3");
  EXPECT_EQ(Generate(ConvTask(DType::kFloat32, cs, false, Mish), 1).size(), 1u);
}

TEST(ConvTemplates, StrictFp32GivesThreeXTf32CandidatesAtFloat32Precision) {
  ::setenv("DICE_STRICT_FP32", "1", 1);
  const auto cands = Generate(ConvTask(DType::kFloat32, ConvShape{}, true, Mish));
  ::unsetenv("DICE_STRICT_FP32");
  ASSERT_EQ(cands.size(), 3u);
  for (const Candidate& c : cands) {
    SCOPED_TRACE(c.origin);
    EXPECT_EQ(c.origin.rfind("template:conv/3xtf32/", 0), 0u);
    EXPECT_FALSE(c.reduced_precision);
    EXPECT_TRUE(Contains(c.source, "cutlass::arch::OpMultiplyAddFastF32"));
  }
}

// One build per configuration: sizes are read at run time, so tasks of other
// N/C/H/W/K (same alignment class) give byte-identical sources; the stride,
// a graph attribute, is baked in.
TEST(ConvTemplates, OtherSizesShareSourcesAndOtherStridesDoNot) {
  ConvShape other;
  other.n = 2, other.c = 32, other.h = 31, other.w = 17, other.k = 256, other.r = 5, other.s = 5;
  const auto a = Generate(ConvTask(DType::kFloat32, ConvShape{}, true, Relu));
  const auto b = Generate(ConvTask(DType::kFloat32, other, true, Relu));
  ASSERT_EQ(a.size(), b.size());
  int matched = 0;
  for (const Candidate& ca : a) {
    for (const Candidate& cb : b) {
      if (ca.origin != cb.origin) continue;
      EXPECT_EQ(ca.source, cb.source) << ca.origin;
      ++matched;
    }
  }
  EXPECT_EQ(matched, 3);
  ConvShape strided;
  strided.attrs = {2, 2, 1, 1, 1, 1};
  const auto c = Generate(ConvTask(DType::kFloat32, strided, true, Relu));
  ASSERT_FALSE(c.empty());
  EXPECT_TRUE(Contains(c[0].source, "constexpr int64_t sh = 2LL, sw = 2LL,"));
  for (const Candidate& ca : a) {
    if (ca.origin == c[0].origin) {
      EXPECT_NE(ca.source, c[0].source);
    }
  }
}

TEST(ConvTemplates, BFloat16UsesTensorOpsWithFloatAccumulation) {
  const auto cands = Generate(ConvTask(DType::kBFloat16, ConvShape{}, true, Relu));
  ASSERT_EQ(cands.size(), 2u);
  for (const Candidate& c : cands) {
    SCOPED_TRACE(c.origin);
    EXPECT_EQ(c.origin.rfind("template:conv/tc/", 0), 0u);
    EXPECT_FALSE(c.reduced_precision);
    EXPECT_TRUE(Contains(c.source, "cutlass::bfloat16_t"));
    EXPECT_TRUE(Contains(c.source, "cutlass::gemm::GemmShape<16, 8, 16>"));
    EXPECT_TRUE(Contains(c.source, "static int const kCount = 8;"));
    EXPECT_TRUE(Contains(c.source, "torch::kBFloat16"));
  }
}

TEST(ConvTemplates, PerChannelExtraIsTheSourceWithStrideZero) {
  ConvShape cs;
  const auto cands = Generate(ConvTask(DType::kFloat32, cs, false, AddExtraRelu, {Spec(DType::kFloat32, {cs.k, 1, 1})}));
  ASSERT_FALSE(cands.empty());
  const std::string& src = cands[0].source;
  EXPECT_TRUE(Contains(src, "csrc = in2.reshape({K}).contiguous();"));
  EXPECT_TRUE(Contains(src, "Layout(Layout::Stride(0))"));
  EXPECT_TRUE(Contains(src, "must be per-channel ([K, 1, 1] or [1, K, 1, 1]"));
  EXPECT_FALSE(Contains(src, "(acc + c)"));  // c is read by the add node
}

TEST(ConvTemplates, OutputShapedResidualIsReadAsChannelsLast) {
  ConvShape cs;
  const auto cands = Generate(ConvTask(DType::kFloat32, cs, false, AddExtraRelu, {Spec(DType::kFloat32, OutShape(cs))}));
  ASSERT_FALSE(cands.empty());
  const std::string& src = cands[0].source;
  EXPECT_TRUE(Contains(src, "csrc = in2.contiguous(at::MemoryFormat::ChannelsLast);"));
  EXPECT_TRUE(Contains(src, "const Layout c_layout = out_layout;"));
  EXPECT_TRUE(Contains(src, "must be output-shaped"));
}

TEST(ConvTemplates, BiasAndPerChannelExtraAreSummedOnTheHost) {
  ConvShape cs;
  auto sub_then_relu = [](GraphBuilder& b, int v, const std::vector<int>& e) {
    return b.Op(OpKind::kRelu, {b.Op(OpKind::kSub, {v, e.at(0)})});
  };
  const auto cands = Generate(ConvTask(DType::kFloat32, cs, true, sub_then_relu, {Spec(DType::kFloat32, {1, cs.k, 1, 1})}));
  ASSERT_FALSE(cands.empty());
  EXPECT_TRUE(Contains(cands[0].source, "csrc = in2.sub(in3.reshape({K})).contiguous();"));
  EXPECT_TRUE(Contains(cands[0].source, "(acc + c)"));
}

TEST(ConvTemplates, ChannelCountsThatAreNotMultiplesOfFourUseSingleElementAccesses) {
  ConvShape cs;
  cs.c = 3, cs.k = 30;
  const auto cands = Generate(ConvTask(DType::kFloat32, cs, true, Relu));
  ASSERT_FALSE(cands.empty());
  EXPECT_TRUE(Contains(cands[0].source, "built for 1-element accesses along C and 2 along K"));
  EXPECT_TRUE(Contains(cands[0].source, "static int const kCount = 2;"));
}

TEST(ConvTemplates, GroupedConvIsRefusedWithTheReason) {
  ConvShape cs;
  cs.groups = 2;
  EXPECT_TRUE(Contains(Refusal(ConvTask(DType::kFloat32, cs, true, Relu)), "conv: groups = 2 (grouped / depthwise conv)"));
}

TEST(ConvTemplates, ReductionAfterConvIsRefused) {
  auto sum = [](GraphBuilder& b, int v, const std::vector<int>&) { return b.Op(OpKind::kSum, {v}, {1}, true); };
  EXPECT_TRUE(Contains(Refusal(ConvTask(DType::kFloat32, ConvShape{}, true, sum)), "after conv2d is not elementwise"));
}

TEST(ConvTemplates, OddChannelsForSixteenBitTypesAreRefused) {
  ConvShape cs;
  cs.c = 3;
  EXPECT_TRUE(Contains(Refusal(ConvTask(DType::kFloat16, cs, true, Relu)), "need C and K even"));
}

TEST(ConvTemplates, ExtraTensorsThatAreNotPerChannelOrOutputShapedAreRefused) {
  ConvShape cs;
  // [K] broadcasts along W (the last dim), not along channels.
  EXPECT_TRUE(Contains(Refusal(ConvTask(DType::kFloat32, cs, false, AddExtraRelu, {Spec(DType::kFloat32, {64})})),
                       "neither per-channel"));
  auto two = [](GraphBuilder& b, int v, const std::vector<int>& e) {
    return b.Op(OpKind::kAdd, {b.Op(OpKind::kAdd, {v, e.at(0)}), e.at(1)});
  };
  EXPECT_TRUE(Contains(Refusal(ConvTask(DType::kFloat32, cs, false, two,
                                        {Spec(DType::kFloat32, {cs.k, 1, 1}), Spec(DType::kFloat32, {cs.k, 1, 1})})),
                       "2 group inputs read after conv2d"));
}

TEST(ConvTemplates, StridedInputIsRefused) {
  ConvShape cs;
  Task task = ConvTask(DType::kFloat32, cs, true, Relu);
  task.inputs[0].strides = {cs.c * cs.h * cs.w * 2, cs.h * cs.w, cs.w, 1};  // a slice along N
  EXPECT_TRUE(Contains(Refusal(task), "is neither contiguous nor channels_last"));
}

// Builds the first candidate for `task` with nvcc for an sm_90 task (as the
// worker would: CompileExtensionCached into a fresh build cache) and prints
// the time; skips without the CUTLASS headers or a compiler toolchain.
// `origin` is the candidate expected first.
void BuildFirstCandidateForSm90(const Task& task, const std::string& origin) {
  const auto cands = Generate(task, 1);
  ASSERT_EQ(cands.size(), 1u);
  ASSERT_EQ(cands[0].origin, origin);
  tmpl_test::BuildForSm90(cands[0], static_cast<int>(task.inputs.size()), "conv");
}

// One real build (issue 18: "CUTLASS candidates compile for sm_90 on CPU"):
// nvcc with LibTorch's and CUTLASS's headers, a minute or more on 2 cores.
// mish(mish(conv + bias - e)) with a per-channel e, so the host code that
// sums bias and e into C (kBiasMinusExtra) is compiled too.
TEST(ConvTemplates, Tf32CandidateCompilesForSm90WithNvcc) {
  ConvShape cs;
  auto sub_mish_mish = [](GraphBuilder& b, int v, const std::vector<int>& e) {
    return MishMish(b, b.Op(OpKind::kSub, {v, e.at(0)}), e);
  };
  BuildFirstCandidateForSm90(ConvTask(DType::kFloat32, cs, true, sub_mish_mish, {Spec(DType::kFloat32, {1, cs.k, 1, 1})}),
                             "template:conv/tf32/128x128x16/s3");
}

// DICE_CONV_SM90=1 for the scope of one test (conv_sm90.cc's switch).
struct Sm90On {
  Sm90On() { ::setenv("DICE_CONV_SM90", "1", 1); }
  ~Sm90On() { ::unsetenv("DICE_CONV_SM90"); }
};

TEST(ConvTemplates, Sm90CandidatesComeFirstOnHopperWhenTurnedOn) {
  const Task task = ConvTask(DType::kFloat32, ConvShape{}, true, MishMish);
  ASSERT_EQ(Generate(task)[0].origin.rfind("template:conv/tf32/", 0), 0u);  // off by default
  Sm90On on;
  const auto cands = Generate(task);
  ASSERT_EQ(cands.size(), 6u);
  for (size_t i = 0; i < 3; ++i) {
    const Candidate& c = cands[i];
    SCOPED_TRACE(c.origin);
    EXPECT_EQ(c.origin.rfind("template:conv/sm90-tf32/", 0), 0u);
    EXPECT_TRUE(c.reduced_precision);
    EXPECT_EQ(runtime::NvccArch(c, "sm_90"), "sm_90a");  // wgmma and TMA
    EXPECT_TRUE(Contains(c.source, "cutlass::conv::collective::CollectiveBuilder<"));
    EXPECT_TRUE(Contains(c.source, "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>"));
    // The bias is the per-channel row broadcast feeding the compute node, which runs the generated epilogue.
    EXPECT_TRUE(Contains(c.source, "Sm90RowBroadcast<0, DiceTileShape, float, float"));
    EXPECT_TRUE(Contains(c.source, "DiceEpilogue::Apply(float(acc[i]), float(c[i]))"));
    EXPECT_TRUE(Contains(c.source, "(acc + c)"));
    EXPECT_TRUE(Contains(c.source, "args.epilogue.thread = {{}, {static_cast<E const*>(csrc.data_ptr()), E(0), {}}, {}};"));
    EXPECT_TRUE(Contains(c.source, "in0.contiguous(at::MemoryFormat::ChannelsLast)"));
  }
  EXPECT_EQ(cands[0].origin, "template:conv/sm90-tf32/128x128x32");
  EXPECT_EQ(cands[2].origin, "template:conv/sm90-tf32/128x128x32/c2");
  EXPECT_EQ(cands[3].origin.rfind("template:conv/tf32/", 0), 0u);
  EXPECT_EQ(runtime::NvccArch(cands[3], "sm_90"), "sm_90");
  EXPECT_EQ(Generate(task, 2).size(), 2u);
}

TEST(ConvTemplates, Sm90SourceKindsAndSixteenBitTypes) {
  Sm90On on;
  // No source: accumulator only; an output-shaped residual: the epilogue's TMA-loaded C.
  const auto plain = Generate(ConvTask(DType::kFloat32, ConvShape{}, false, Relu));
  EXPECT_TRUE(Contains(plain[0].source, "args.epilogue.thread = {{}, {}};"));
  EXPECT_TRUE(Contains(plain[0].source, "args.epilogue.ptr_C = nullptr;"));
  const ConvShape cs;
  const auto res = Generate(ConvTask(DType::kFloat32, cs, false, AddExtraRelu, {Spec(DType::kFloat32, OutShape(cs))}));
  ASSERT_EQ(res[0].origin.rfind("template:conv/sm90-tf32/", 0), 0u);
  EXPECT_TRUE(Contains(res[0].source, "Sm90SrcFetch<float>"));
  EXPECT_TRUE(Contains(res[0].source, "args.epilogue.dC = d_c;"));
  const auto bf16 = Generate(ConvTask(DType::kBFloat16, ConvShape{}, true, Relu));
  EXPECT_EQ(bf16[0].origin, "template:conv/sm90-tc/128x128x64");
  EXPECT_FALSE(bf16[0].reduced_precision);
}

TEST(ConvTemplates, Sm90NeedsHopperTf32AndSixteenByteChannels) {
  Sm90On on;
  auto first = [](const Task& t) { return Generate(t)[0].origin; };
  TargetInfo ampere;
  ampere.arch = "sm_80";
  const Task on_ampere = tmpl_test::MakeTask(ConvTask(DType::kFloat32, ConvShape{}, true, Relu).graph,
                                             ConvTask(DType::kFloat32, ConvShape{}, true, Relu).inputs, ampere);
  EXPECT_EQ(first(on_ampere).rfind("template:conv/tf32/", 0), 0u);
  ConvShape rgb;
  rgb.c = 3;  // 12-byte pixels: no TMA
  EXPECT_EQ(first(ConvTask(DType::kFloat32, rgb, true, Relu)).rfind("template:conv/tf32/", 0), 0u);
  ::setenv("DICE_STRICT_FP32", "1", 1);  // 3xTF32 has no sm90 conv
  const std::string strict = first(ConvTask(DType::kFloat32, ConvShape{}, true, Relu));
  ::unsetenv("DICE_STRICT_FP32");
  EXPECT_EQ(strict.rfind("template:conv/3xtf32/", 0), 0u);
}

TEST(ConvTemplates, Sm90Tf32CandidateCompilesForSm90aWithNvcc) {
  Sm90On on;
  BuildFirstCandidateForSm90(ConvTask(DType::kFloat32, ConvShape{}, true, MishMish), "template:conv/sm90-tf32/128x128x32");
}

}  // namespace
}  // namespace dice::generator
