// IR: canonical form, parser, hashing, type/shape inference, task keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dice/core/ir.h"
#include "dice/core/task.h"

namespace dice::ir {
namespace {

// x:[B,N] f32, b:[N] f32 -> gelu(x*0.5 + b) and its row sum.
Graph BiasGeluSum() {
  Graph g;
  g.inputs = {{DType::kFloat32, 2}, {DType::kFloat32, 1}};
  Op c; c.kind = OpKind::kConstant; c.scalars = {0.5};
  Op mul; mul.kind = OpKind::kMul; mul.args = {0, 2};
  Op add; add.kind = OpKind::kAdd; add.args = {3, 1};
  Op gelu; gelu.kind = OpKind::kGelu; gelu.args = {4}; gelu.ivalue = 1;
  Op sum; sum.kind = OpKind::kSum; sum.args = {5}; sum.dims = {1}; sum.keepdim = true;
  g.ops = {c, mul, add, gelu, sum};
  g.outputs = {5, 6};
  return g;
}

TEST(IrTest, CanonicalTextRoundTripsThroughParser) {
  const Graph g = BiasGeluSum();
  const std::string text = Canonical(g);
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, g);
  EXPECT_EQ(Canonical(*parsed), text);
}

TEST(IrTest, CanonicalTextIsReadable) {
  const std::string text = Canonical(BiasGeluSum());
  EXPECT_NE(text.find("input %0 f32 rank=2"), std::string::npos) << text;
  EXPECT_NE(text.find("%2 = const(0.5)"), std::string::npos) << text;
  EXPECT_NE(text.find("%6 = sum(%5) dims=[1] keepdim=1"), std::string::npos) << text;
  EXPECT_NE(text.find("output %5, %6"), std::string::npos) << text;
}

TEST(IrTest, DoublesRoundTripExactly) {
  Graph g;
  g.inputs = {{DType::kFloat16, 1}};
  Op c; c.kind = OpKind::kConstant; c.scalars = {0.1};
  Op clamp; clamp.kind = OpKind::kClamp; clamp.args = {0};
  clamp.scalars = {-std::numeric_limits<double>::infinity(), 1.0 / 3.0};
  Op mul; mul.kind = OpKind::kMul; mul.args = {2, 1};
  g.ops = {c, clamp, mul};
  g.outputs = {3};
  auto parsed = Parse(Canonical(g));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->ops[0].scalars[0], 0.1);
  EXPECT_EQ(parsed->ops[1].scalars[1], 1.0 / 3.0);
  EXPECT_TRUE(std::isinf(parsed->ops[1].scalars[0]));
}

// The hash is a cache key: a change here silently invalidates every cache.
// Update the golden value only together with kRuntimeAbiVersion.
TEST(IrTest, GraphHashIsStableAcrossBuilds) {
  EXPECT_EQ(GraphHash(BiasGeluSum()), Sha256Hex(Canonical(BiasGeluSum())));
  EXPECT_EQ(GraphHash(BiasGeluSum()), "ed18e293010f3761d4d15b25fcad2e6872797352f8f0b196912e4178867f4814");
}

TEST(IrTest, Sha256MatchesKnownVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(IrTest, HashChangesWithAnyAttribute) {
  const Graph base = BiasGeluSum();
  Graph g1 = base; g1.ops[3].ivalue = 0;           // exact gelu
  Graph g2 = base; g2.ops[4].keepdim = false;      // no keepdim
  Graph g3 = base; g3.ops[0].scalars = {0.25};     // other constant
  Graph g4 = base; g4.inputs[1].dtype = DType::kBFloat16;
  for (const Graph& g : {g1, g2, g3, g4}) EXPECT_NE(GraphHash(g), GraphHash(base));
}

TEST(IrTest, ParserRejectsMalformedTextWithLineNumber) {
  const std::string good = Canonical(BiasGeluSum());
  struct Case { std::string text; std::string expect; };
  std::vector<Case> cases = {
      {"", "empty"},
      {"dice-ir v2\n", "header"},
      {"dice-ir v1\ninput %0 f64 rank=2\noutput %0\n", "line 2"},
      {"dice-ir v1\ninput %0 f32 rank=2\n%1 = frobnicate(%0)\noutput %1\n", "unknown op"},
      {"dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%7)\noutput %1\n", "not an earlier value"},
      {"dice-ir v1\ninput %0 f32 rank=2\n%1 = sum(%0) dims=[5]\noutput %1\n", "dim out of range"},
      {"dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\n", "no output"},
      {"dice-ir v1\ninput %0 f32 rank=2\n%1 = add(%0)\noutput %1\n", "args"},
      {good + "%9 = relu(%0)\n", "after the output"},
  };
  for (const auto& c : cases) {
    auto r = Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(IrTest, InfersBroadcastAndReductionShapes) {
  const Graph g = BiasGeluSum();
  auto shapes = InferShapes(g, {TensorSpec::Contiguous(DType::kFloat32, {64, 128}),
                                TensorSpec::Contiguous(DType::kFloat32, {128})});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ((*shapes)[5], (std::vector<int64_t>{64, 128}));
  EXPECT_EQ((*shapes)[6], (std::vector<int64_t>{64, 1}));
}

// x:[..., K], w:[N, K], b:[N] -> relu(linear(x, w, b)) (issue 18: GEMM + epilogue).
Graph LinearRelu() {
  Graph g;
  g.inputs = {{DType::kFloat32, 3}, {DType::kFloat32, 2}, {DType::kFloat32, 1}};
  Op lin; lin.kind = OpKind::kLinear; lin.args = {0, 1, 2};
  Op relu; relu.kind = OpKind::kRelu; relu.args = {3};
  g.ops = {lin, relu};
  g.outputs = {4};
  return g;
}

TEST(IrTest, LinearInfersLeadingDimsTimesOutFeatures) {
  auto shapes = InferShapes(LinearRelu(), {TensorSpec::Contiguous(DType::kFloat32, {4, 16, 64}),
                                           TensorSpec::Contiguous(DType::kFloat32, {32, 64}),
                                           TensorSpec::Contiguous(DType::kFloat32, {32})});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ((*shapes)[3], (std::vector<int64_t>{4, 16, 32}));
  EXPECT_EQ((*shapes)[4], (std::vector<int64_t>{4, 16, 32}));
  auto parsed = Parse(Canonical(LinearRelu()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, LinearRelu());
  EXPECT_NE(Canonical(LinearRelu()).find("%3 = linear(%0, %1, %2)"), std::string::npos) << Canonical(LinearRelu());
  EXPECT_EQ(GetOpInfo(OpKind::kLinear).category, OpCategory::kContraction);
}

TEST(IrTest, LinearRejectsMismatchedKBiasAndRanks) {
  auto k = InferShapes(LinearRelu(), {TensorSpec::Contiguous(DType::kFloat32, {4, 16, 64}),
                                      TensorSpec::Contiguous(DType::kFloat32, {32, 60}),
                                      TensorSpec::Contiguous(DType::kFloat32, {32})});
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("weight's K 60"), std::string::npos) << k.status().message();
  auto bias = InferShapes(LinearRelu(), {TensorSpec::Contiguous(DType::kFloat32, {4, 16, 64}),
                                         TensorSpec::Contiguous(DType::kFloat32, {32, 64}),
                                         TensorSpec::Contiguous(DType::kFloat32, {31})});
  ASSERT_FALSE(bias.ok());
  EXPECT_NE(bias.status().message().find("bias shape [31]"), std::string::npos) << bias.status().message();
  Graph rank = LinearRelu();
  rank.inputs[1].rank = 3;
  auto types = InferTypes(rank);
  ASSERT_FALSE(types.ok());
  EXPECT_NE(types.status().message().find("weight must be rank 2"), std::string::npos) << types.status().message();
  Graph mixed = LinearRelu();
  mixed.inputs[1].dtype = DType::kBFloat16;
  auto mixed_types = InferTypes(mixed);
  ASSERT_FALSE(mixed_types.ok());
  EXPECT_NE(mixed_types.status().message().find("one dtype"), std::string::npos) << mixed_types.status().message();
}

// x:[N, C, H, W], w:[K, C/g, R, S], b:[K] -> mish(conv2d(x, w, b)) (issue 18 item 2: conv + epilogue).
Graph ConvMish(std::vector<int64_t> dims = {1, 1, 1, 1, 1, 1}, int64_t groups = 1) {
  Graph g;
  g.inputs = {{DType::kFloat32, 4}, {DType::kFloat32, 4}, {DType::kFloat32, 1}};
  Op conv; conv.kind = OpKind::kConv2d; conv.args = {0, 1, 2}; conv.dims = std::move(dims); conv.ivalue = groups;
  Op mish; mish.kind = OpKind::kMish; mish.args = {3};
  g.ops = {conv, mish};
  g.outputs = {4};
  return g;
}

std::vector<TensorSpec> ConvSpecs(std::vector<int64_t> x, std::vector<int64_t> w, int64_t bias) {
  return {TensorSpec::Contiguous(DType::kFloat32, std::move(x)), TensorSpec::Contiguous(DType::kFloat32, std::move(w)),
          TensorSpec::Contiguous(DType::kFloat32, {bias})};
}

TEST(IrTest, Conv2dRoundTripsItsAttributesThroughTheCanonicalText) {
  const Graph g = ConvMish({2, 1, 3, 0, 2, 1}, 4);
  const std::string text = Canonical(g);
  EXPECT_NE(text.find("%3 = conv2d(%0, %1, %2) dims=[2,1,3,0,2,1] i=4"), std::string::npos) << text;
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, g);
  EXPECT_NE(GraphHash(g), GraphHash(ConvMish({1, 2, 3, 0, 2, 1}, 4)));  // stride order matters
  EXPECT_NE(GraphHash(g), GraphHash(ConvMish({2, 1, 3, 0, 2, 1}, 2)));  // groups matter
  EXPECT_FALSE(g == ConvMish({2, 1, 3, 0, 2, 2}, 4));
  EXPECT_EQ(GetOpInfo(OpKind::kConv2d).category, OpCategory::kContraction);
  EXPECT_EQ(Summary(g), "conv2d+mish");
}

TEST(IrTest, Conv2dInfersTorchsOutputSize) {
  // 3x3, stride 1, pad 1: same size.
  auto same = InferShapes(ConvMish(), ConvSpecs({8, 64, 32, 32}, {128, 64, 3, 3}, 128));
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)[3], (std::vector<int64_t>{8, 128, 32, 32}));
  EXPECT_EQ((*same)[4], (std::vector<int64_t>{8, 128, 32, 32}));
  // H: (31 + 2*3 - 2*(5-1) - 1) / 2 + 1 = 15; W: (20 + 0 - 1*(3-1) - 1) / 1 + 1 = 18; groups 4: C = 4 x 2.
  auto strided = InferShapes(ConvMish({2, 1, 3, 0, 2, 1}, 4), ConvSpecs({1, 8, 31, 20}, {12, 2, 5, 3}, 12));
  ASSERT_TRUE(strided.ok()) << strided.status().ToString();
  EXPECT_EQ((*strided)[3], (std::vector<int64_t>{1, 12, 15, 18}));
  auto specs = InferOutputSpecs(ConvMish(), ConvSpecs({2, 3, 5, 5}, {4, 3, 1, 1}, 4));
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  EXPECT_EQ((*specs)[0].shape, (std::vector<int64_t>{2, 4, 7, 7}));
}

TEST(IrTest, Conv2dRejectsBadChannelsBiasKernelAndAttributes) {
  auto msg = [](const Expected<std::vector<std::vector<int64_t>>>& r) { return r.ok() ? std::string() : r.status().message(); };
  auto chans = InferShapes(ConvMish(), ConvSpecs({8, 64, 32, 32}, {128, 32, 3, 3}, 128));
  EXPECT_NE(msg(chans).find("input channels 64 != weight's C/groups 32 x groups 1"), std::string::npos) << msg(chans);
  auto kgroups = InferShapes(ConvMish({1, 1, 0, 0, 1, 1}, 2), ConvSpecs({1, 4, 8, 8}, {3, 2, 1, 1}, 3));
  EXPECT_NE(msg(kgroups).find("output channels 3 not divisible by groups 2"), std::string::npos) << msg(kgroups);
  auto bias = InferShapes(ConvMish(), ConvSpecs({8, 64, 32, 32}, {128, 64, 3, 3}, 127));
  EXPECT_NE(msg(bias).find("bias shape [127] != [K] = [128]"), std::string::npos) << msg(bias);
  auto big = InferShapes(ConvMish({1, 1, 0, 0, 1, 1}), ConvSpecs({1, 4, 2, 8}, {4, 4, 3, 3}, 4));
  EXPECT_NE(msg(big).find("larger than the padded input (2 + 2 x 0) along H"), std::string::npos) << msg(big);
  auto type_msg = [](const Graph& g) {
    auto t = InferTypes(g);
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(type_msg(ConvMish({1, 1, 1, 1})).find("needs dims = [stride_h"), std::string::npos);
  EXPECT_NE(type_msg(ConvMish({0, 1, 1, 1, 1, 1})).find("stride must be >= 1"), std::string::npos);
  EXPECT_NE(type_msg(ConvMish({1, 1, 1, 1, 0, 1})).find("dilation must be >= 1"), std::string::npos);
  EXPECT_NE(type_msg(ConvMish({1, 1, 1, 1, 1, 1}, 0)).find("groups must be >= 1"), std::string::npos);
  Graph rank = ConvMish();
  rank.inputs[0].rank = 3;
  EXPECT_NE(type_msg(rank).find("input must be rank 4 [N, C, H, W]"), std::string::npos) << type_msg(rank);
  rank = ConvMish();
  rank.inputs[1].rank = 2;
  EXPECT_NE(type_msg(rank).find("weight must be rank 4"), std::string::npos) << type_msg(rank);
  Graph mixed = ConvMish();
  mixed.inputs[1].dtype = DType::kBFloat16;
  EXPECT_NE(type_msg(mixed).find("one dtype"), std::string::npos) << type_msg(mixed);
  // linear still takes no dims.
  Graph lin = LinearRelu();
  lin.ops[0].dims = {1};
  EXPECT_NE(type_msg(lin).find("takes no dims"), std::string::npos) << type_msg(lin);
}

// x [N, C, S...] -> kind(x, window) * 2.
Graph PoolTimesTwo(OpKind kind, int rank, std::vector<int64_t> window) {
  Graph g;
  g.inputs = {{DType::kFloat32, rank}};
  Op pool; pool.kind = kind; pool.args = {0}; pool.dims = std::move(window);
  Op c; c.kind = OpKind::kConstant; c.scalars = {2.0};
  Op mul; mul.kind = OpKind::kMul; mul.args = {1, 2};
  g.ops = {pool, c, mul};
  g.outputs = {3};
  return g;
}

TEST(IrTest, PoolsRoundTripAndInferTorchsFloorShapes) {
  const Graph g = PoolTimesTwo(OpKind::kAvgPool, 4, {2, 3});
  const std::string text = Canonical(g);
  EXPECT_NE(text.find("%1 = avg_pool(%0) dims=[2,3]"), std::string::npos) << text;
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, g);
  EXPECT_NE(GraphHash(g), GraphHash(PoolTimesTwo(OpKind::kMaxPool, 4, {2, 3})));
  EXPECT_NE(GraphHash(g), GraphHash(PoolTimesTwo(OpKind::kAvgPool, 4, {3, 2})));  // window order matters
  EXPECT_EQ(GetOpInfo(OpKind::kMaxPool).category, OpCategory::kPool);
  // Floor mode, as torch's pools: 9 rows in windows of 2 give 4, 7 columns in windows of 3 give 2.
  auto shapes = InferShapes(g, {TensorSpec::Contiguous(DType::kFloat32, {5, 6, 9, 7})});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ((*shapes)[1], (std::vector<int64_t>{5, 6, 4, 2}));
  EXPECT_EQ((*shapes)[3], (std::vector<int64_t>{5, 6, 4, 2}));
  auto one_d = InferShapes(PoolTimesTwo(OpKind::kMaxPool, 3, {4}), {TensorSpec::Contiguous(DType::kFloat32, {2, 3, 17})});
  ASSERT_TRUE(one_d.ok()) << one_d.status().ToString();
  EXPECT_EQ((*one_d)[1], (std::vector<int64_t>{2, 3, 4}));
}

TEST(IrTest, PoolsRejectBadWindowsAndRanks) {
  auto type_msg = [](const Graph& g) {
    auto t = InferTypes(g);
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(type_msg(PoolTimesTwo(OpKind::kAvgPool, 4, {2})).find("one window size per spatial dim (2), got 1"),
            std::string::npos);
  EXPECT_NE(type_msg(PoolTimesTwo(OpKind::kMaxPool, 4, {2, 0})).find("window sizes must be >= 1"), std::string::npos);
  EXPECT_NE(type_msg(PoolTimesTwo(OpKind::kMaxPool, 2, {})).find("1 to 3 spatial dims"), std::string::npos);
  EXPECT_NE(type_msg(PoolTimesTwo(OpKind::kMaxPool, 6, {2, 2, 2, 2})).find("1 to 3 spatial dims"), std::string::npos);
  auto small = InferShapes(PoolTimesTwo(OpKind::kAvgPool, 4, {4, 4}), {TensorSpec::Contiguous(DType::kFloat32, {1, 2, 8, 3})});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("spatial dim 3 of size 3 is smaller than its window 4"), std::string::npos)
      << small.status().ToString();
}

TEST(IrTest, RejectsShapesThatDoNotBroadcast) {
  auto shapes = InferShapes(BiasGeluSum(), {TensorSpec::Contiguous(DType::kFloat32, {64, 128}),
                                            TensorSpec::Contiguous(DType::kFloat32, {100})});
  ASSERT_FALSE(shapes.ok());
  EXPECT_NE(shapes.status().message().find("do not broadcast"), std::string::npos) << shapes.status().message();
}

TEST(IrTest, RejectsInputOfWrongRankOrDtype) {
  auto rank = InferShapes(BiasGeluSum(), {TensorSpec::Contiguous(DType::kFloat32, {64}),
                                          TensorSpec::Contiguous(DType::kFloat32, {64})});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("rank"), std::string::npos);
  auto dtype = InferShapes(BiasGeluSum(), {TensorSpec::Contiguous(DType::kFloat16, {64, 128}),
                                           TensorSpec::Contiguous(DType::kFloat32, {128})});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("f16"), std::string::npos);
}

TEST(IrTest, WeakScalarKeepsHalfDtypeAndTensorsPromote) {
  Graph g;
  g.inputs = {{DType::kFloat16, 1}, {DType::kBFloat16, 1}};
  Op c; c.kind = OpKind::kConstant; c.scalars = {2.0};
  Op m; m.kind = OpKind::kMul; m.args = {0, 2};
  Op a; a.kind = OpKind::kAdd; a.args = {3, 1};
  g.ops = {c, m, a};
  g.outputs = {3, 4};
  auto types = InferTypes(g);
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)[3].dtype, DType::kFloat16);
  EXPECT_EQ((*types)[4].dtype, DType::kFloat32);
}

TEST(IrTest, ParsesInputSpecs) {
  auto s = ParseInputSpec("1024x8192:f32");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape, (std::vector<int64_t>{1024, 8192}));
  EXPECT_EQ(s->strides, (std::vector<int64_t>{8192, 1}));
  EXPECT_EQ(ParseInputSpec("8x16:bf16")->dtype, DType::kBFloat16);
  EXPECT_TRUE(ParseInputSpec("scalar:f16")->shape.empty());
  for (const char* bad : {"1024x8192", "1024xx8:f32", "12xq:f32", "-4:f32", "8:int64", "8x:f32"}) {
    auto r = ParseInputSpec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

TEST(IrTest, TaskKeyDependsOnShapesArchAndVersions) {
  const std::vector<TensorSpec> in = {TensorSpec::Contiguous(DType::kFloat32, {64, 128}),
                                      TensorSpec::Contiguous(DType::kFloat32, {128})};
  TargetInfo target;
  auto base = Task::Make(BiasGeluSum(), in, target);
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(base->Key(), Task::Make(BiasGeluSum(), in, target)->Key());
  EXPECT_EQ(base->Key().size(), 64u);

  auto other_shape = in; other_shape[0] = TensorSpec::Contiguous(DType::kFloat32, {32, 128});
  EXPECT_NE(Task::Make(BiasGeluSum(), other_shape, target)->Key(), base->Key());
  auto strided = in; strided[0].strides = {256, 1};
  EXPECT_NE(Task::Make(BiasGeluSum(), strided, target)->Key(), base->Key());
  auto misaligned = in; misaligned[1].alignment = 4;
  EXPECT_NE(Task::Make(BiasGeluSum(), misaligned, target)->Key(), base->Key());
  for (int field = 0; field < 5; ++field) {
    TargetInfo t = target;
    if (field == 0) t.arch = "sm_80";
    if (field == 1) t.driver_major = 99;
    if (field == 2) t.nvrtc_version = 12080;
    if (field == 3) t.compile_flags += " -lineinfo";
    if (field == 4) t.abi_version += 1;
    EXPECT_NE(Task::Make(BiasGeluSum(), in, t)->Key(), base->Key()) << "field " << field;
  }
}

}  // namespace
}  // namespace dice::ir

namespace dice::ir {
namespace {
TEST(IrTest, ZeroDimTensorDoesNotPromoteDimensionedTensor) {
  Graph g;
  g.inputs = {{DType::kFloat16, 1}, {DType::kFloat32, 0}};
  Op a; a.kind = OpKind::kAdd; a.args = {0, 1};
  Op b; b.kind = OpKind::kMul; b.args = {1, 1};
  g.ops = {a, b};
  g.outputs = {2, 3};
  auto types = InferTypes(g);
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)[2].dtype, DType::kFloat16);  // torch: f16[N] + f32[] -> f16
  EXPECT_EQ((*types)[3].dtype, DType::kFloat32);
}
}  // namespace
}  // namespace dice::ir
