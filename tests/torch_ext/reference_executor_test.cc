// Tests of dice::reference::Run: every IR op is evaluated on CPU tensors and
// compared with the ATen/torch call written out here, plus promotion, upcast,
// broadcasting and input validation.
#include "dice/reference/reference_executor.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

namespace dice::reference {
namespace {

using ir::DType;
using ir::OpKind;

constexpr double kInf = std::numeric_limits<double>::infinity();

ir::Op MakeOp(OpKind kind, std::vector<int32_t> args, std::vector<double> scalars = {}, int64_t ivalue = 0,
              std::vector<int64_t> dims = {}, bool keepdim = false) {
  ir::Op op;
  op.kind = kind;
  op.args = std::move(args);
  op.scalars = std::move(scalars);
  op.ivalue = ivalue;
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  return op;
}

ir::Op Const(double v) { return MakeOp(OpKind::kConstant, {}, {v}); }

/// A graph of `ops` over `inputs` whose single output is the last op.
ir::Graph MakeGraph(std::vector<ir::InputDecl> inputs, std::vector<ir::Op> ops) {
  ir::Graph g;
  g.inputs = std::move(inputs);
  g.ops = std::move(ops);
  g.outputs = {g.num_values() - 1};
  return g;
}

at::Tensor RunOne(const ir::Graph& g, const std::vector<at::Tensor>& inputs, bool upcast = false) {
  auto out = reference::Run(g, inputs, upcast);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return at::Tensor();
  EXPECT_EQ(out->size(), 1u);
  return out->at(0);
}

void ExpectSame(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.scalar_type(), want.scalar_type());
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-6, /*equal_nan=*/true))
      << "max abs diff " << (got - want).abs().max().item<double>();
}

class ReferenceExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { at::manual_seed(1234); }
  at::Tensor Randn(std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat) {
    return at::randn(shape, at::TensorOptions().dtype(dtype)) * 3;
  }
};

struct UnaryCase {
  const char* name;
  OpKind kind;
  std::vector<double> scalars;
  int64_t ivalue;
  bool positive_input;  // keep log/sqrt/rsqrt inside their domain
  std::function<at::Tensor(const at::Tensor&)> torch_call;
};

TEST_F(ReferenceExecutorTest, UnaryOpsMatchTheirTorchCalls) {
  const std::vector<UnaryCase> cases = {
      {"neg", OpKind::kNeg, {}, 0, false, [](const at::Tensor& x) { return -x; }},
      {"abs", OpKind::kAbs, {}, 0, false, [](const at::Tensor& x) { return x.abs(); }},
      {"exp", OpKind::kExp, {}, 0, false, [](const at::Tensor& x) { return x.exp(); }},
      {"log", OpKind::kLog, {}, 0, true, [](const at::Tensor& x) { return x.log(); }},
      {"sqrt", OpKind::kSqrt, {}, 0, true, [](const at::Tensor& x) { return x.sqrt(); }},
      {"rsqrt", OpKind::kRsqrt, {}, 0, true, [](const at::Tensor& x) { return 1 / x.sqrt(); }},
      {"reciprocal", OpKind::kReciprocal, {}, 0, false, [](const at::Tensor& x) { return 1 / x; }},
      {"tanh", OpKind::kTanh, {}, 0, false, [](const at::Tensor& x) { return x.tanh(); }},
      {"sigmoid", OpKind::kSigmoid, {}, 0, false, [](const at::Tensor& x) { return 1 / (1 + (-x).exp()); }},
      {"erf", OpKind::kErf, {}, 0, false, [](const at::Tensor& x) { return at::erf(x); }},
      {"relu", OpKind::kRelu, {}, 0, false, [](const at::Tensor& x) { return x.clamp_min(0); }},
      {"gelu", OpKind::kGelu, {}, 0, false,
       [](const at::Tensor& x) { return 0.5 * x * (1 + at::erf(x / std::sqrt(2.0))); }},
      {"gelu_tanh", OpKind::kGelu, {}, 1, false, [](const at::Tensor& x) { return at::gelu(x, "tanh"); }},
      {"silu", OpKind::kSilu, {}, 0, false, [](const at::Tensor& x) { return x * at::sigmoid(x); }},
      {"mish", OpKind::kMish, {}, 0, false,
       [](const at::Tensor& x) { return x * at::tanh(at::softplus(x)); }},
      {"softplus", OpKind::kSoftplus, {2.0, 5.0}, 0, false,
       [](const at::Tensor& x) { return at::softplus(x, 2.0, 5.0); }},
      {"softsign", OpKind::kSoftsign, {}, 0, false, [](const at::Tensor& x) { return x / (1 + x.abs()); }},
      {"elu", OpKind::kElu, {1.5, 2.0, 0.5}, 0, false,
       [](const at::Tensor& x) { return at::where(x > 0, 2.0 * x, 2.0 * 1.5 * ((x * 0.5).exp() - 1)); }},
      {"selu", OpKind::kSelu, {}, 0, false, [](const at::Tensor& x) { return at::selu(x); }},
      {"leaky_relu", OpKind::kLeakyRelu, {0.2}, 0, false,
       [](const at::Tensor& x) { return at::where(x > 0, x, x * 0.2); }},
      {"clamp", OpKind::kClamp, {-1.0, 2.0}, 0, false, [](const at::Tensor& x) { return x.clamp(-1.0, 2.0); }},
      {"clamp_min_only", OpKind::kClamp, {-1.0, kInf}, 0, false,
       [](const at::Tensor& x) { return x.clamp_min(-1.0); }},
      {"clamp_max_only", OpKind::kClamp, {-kInf, 0.5}, 0, false,
       [](const at::Tensor& x) { return x.clamp_max(0.5); }},
      {"clamp_none", OpKind::kClamp, {-kInf, kInf}, 0, false, [](const at::Tensor& x) { return x.clone(); }},
      {"hardswish", OpKind::kHardswish, {}, 0, false,
       [](const at::Tensor& x) { return x * (x + 3).clamp(0, 6) / 6; }},
      {"hardsigmoid", OpKind::kHardsigmoid, {}, 0, false,
       [](const at::Tensor& x) { return (x + 3).clamp(0, 6) / 6; }},
      {"pow_scalar", OpKind::kPowScalar, {3.0}, 0, false, [](const at::Tensor& x) { return x * x * x; }},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    at::Tensor x = Randn({6, 7});
    if (c.positive_input) x = x.abs() + 0.1;
    ir::Graph g = MakeGraph({{DType::kFloat32, 2}}, {MakeOp(c.kind, {0}, c.scalars, c.ivalue)});
    at::Tensor got = RunOne(g, {x});
    at::Tensor want = c.torch_call(x);
    ASSERT_TRUE(got.defined());
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << "max abs diff " << (got - want).abs().max().item<double>();
  }
}

TEST_F(ReferenceExecutorTest, CastChangesDtype) {
  at::Tensor x = Randn({5, 3});
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}},
                          {MakeOp(OpKind::kCast, {0}, {}, static_cast<int64_t>(DType::kBFloat16))});
  ExpectSame(RunOne(g, {x}), x.to(at::kBFloat16));
}

TEST_F(ReferenceExecutorTest, BinaryTensorOpsMatchTorch) {
  struct Case {
    const char* name;
    OpKind kind;
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> torch_call;
  };
  const std::vector<Case> cases = {
      {"add", OpKind::kAdd, [](const at::Tensor& a, const at::Tensor& b) { return a + b; }},
      {"sub", OpKind::kSub, [](const at::Tensor& a, const at::Tensor& b) { return a - b; }},
      {"mul", OpKind::kMul, [](const at::Tensor& a, const at::Tensor& b) { return a * b; }},
      {"div", OpKind::kDiv, [](const at::Tensor& a, const at::Tensor& b) { return a / b; }},
      {"maximum", OpKind::kMaximum, [](const at::Tensor& a, const at::Tensor& b) { return at::where(a > b, a, b); }},
      {"minimum", OpKind::kMinimum, [](const at::Tensor& a, const at::Tensor& b) { return at::where(a < b, a, b); }},
      {"pow", OpKind::kPow, [](const at::Tensor& a, const at::Tensor& b) { return (b * a.log()).exp(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    at::Tensor a = Randn({4, 5}).abs() + 0.5;  // positive base for pow
    at::Tensor b = Randn({4, 5}) / 3;
    ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}}, {MakeOp(c.kind, {0, 1})});
    at::Tensor got = RunOne(g, {a, b});
    ASSERT_TRUE(got.defined());
    EXPECT_TRUE(at::allclose(got, c.torch_call(a, b), 1e-5, 1e-5));
  }
}

TEST_F(ReferenceExecutorTest, ScalarConstantOnEitherSideMatchesPythonOperators) {
  // Value 1 is the constant, value 0 the tensor. Expected values are what
  // torch eager computes for `x <op> c` and `c <op> x`.
  at::Tensor x = Randn({3, 4}).abs() + 0.5;
  const double c = 1.75;
  struct Case {
    const char* name;
    OpKind kind;
    at::Tensor tensor_first, constant_first;
  };
  const std::vector<Case> cases = {
      {"add", OpKind::kAdd, x + c, c + x},
      {"sub", OpKind::kSub, x - c, c - x},
      {"mul", OpKind::kMul, x * c, c * x},
      {"div", OpKind::kDiv, x / c, at::scalar_tensor(c) / x},
      {"pow", OpKind::kPow, at::pow(x, c), at::pow(c, x)},
      {"maximum", OpKind::kMaximum, x.clamp_min(c), x.clamp_min(c)},
      {"minimum", OpKind::kMinimum, x.clamp_max(c), x.clamp_max(c)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    ir::Graph tc = MakeGraph({{DType::kFloat32, 2}}, {Const(c), MakeOp(k.kind, {0, 1})});
    ir::Graph ct = MakeGraph({{DType::kFloat32, 2}}, {Const(c), MakeOp(k.kind, {1, 0})});
    ExpectSame(RunOne(tc, {x}), k.tensor_first);
    ExpectSame(RunOne(ct, {x}), k.constant_first);
  }
}

TEST_F(ReferenceExecutorTest, BroadcastsColumnAgainstRow) {
  at::Tensor a = Randn({4, 1});
  at::Tensor b = Randn({1, 3});
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}}, {MakeOp(OpKind::kAdd, {0, 1})});
  at::Tensor got = RunOne(g, {a, b});
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.sizes(), at::IntArrayRef({4, 3}));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_FLOAT_EQ(got[i][j].item<float>(), a[i][0].item<float>() + b[0][j].item<float>());
    }
  }
}

TEST_F(ReferenceExecutorTest, WeakScalarKeepsHalfDtype) {
  at::Tensor x = Randn({8, 8}, at::kHalf);
  ir::Graph g = MakeGraph({{DType::kFloat16, 2}}, {Const(0.5), MakeOp(OpKind::kMul, {0, 1})});
  at::Tensor got = RunOne(g, {x});
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(got, x * 0.5));
}

TEST_F(ReferenceExecutorTest, MixedHalfAndBFloat16PromoteToFloat) {
  at::Tensor a = Randn({2, 3}, at::kHalf);
  at::Tensor b = Randn({2, 3}, at::kBFloat16);
  ir::Graph g = MakeGraph({{DType::kFloat16, 2}, {DType::kBFloat16, 2}}, {MakeOp(OpKind::kAdd, {0, 1})});
  ExpectSame(RunOne(g, {a, b}), a + b);
}

TEST_F(ReferenceExecutorTest, FoldsConstantOnlyOpsIntoWeakScalar) {
  // y = x * exp(1.0 - 0.5): the folded constant must not promote f16.
  at::Tensor x = Randn({4, 4}, at::kHalf);
  ir::Graph g = MakeGraph({{DType::kFloat16, 2}}, {Const(1.0), Const(0.5), MakeOp(OpKind::kSub, {1, 2}),
                                                    MakeOp(OpKind::kExp, {3}), MakeOp(OpKind::kMul, {0, 4})});
  at::Tensor got = RunOne(g, {x});
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(got, x * std::exp(0.5)));
}

TEST_F(ReferenceExecutorTest, ReductionsMatchTorchWithDimsAndKeepdim) {
  at::Tensor x = Randn({3, 4, 5});
  struct Case {
    const char* name;
    OpKind kind;
    std::vector<double> scalars;
    std::function<at::Tensor(const at::Tensor&, at::IntArrayRef, bool)> torch_call;
  };
  const std::vector<Case> cases = {
      {"sum", OpKind::kSum, {}, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.sum(d, k); }},
      {"mean", OpKind::kMean, {}, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.mean(d, k); }},
      {"amax", OpKind::kAmax, {}, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.amax(d, k); }},
      {"amin", OpKind::kAmin, {}, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.amin(d, k); }},
      {"logsumexp", OpKind::kLogSumExp, {},
       [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.exp().sum(d, k).log(); }},
      {"norm2", OpKind::kNorm, {2.0},
       [](const at::Tensor& t, at::IntArrayRef d, bool k) { return (t * t).sum(d, k).sqrt(); }},
      {"norm1", OpKind::kNorm, {1.0},
       [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.abs().sum(d, k); }},
      {"norm_inf", OpKind::kNorm, {kInf},
       [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.abs().amax(d, k); }},
      {"norm3", OpKind::kNorm, {3.0},
       [](const at::Tensor& t, at::IntArrayRef d, bool k) { return t.abs().pow(3).sum(d, k).pow(1.0 / 3); }},
  };
  for (const Case& c : cases) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (keepdim ? " keepdim" : ""));
      ir::Graph some = MakeGraph({{DType::kFloat32, 3}}, {MakeOp(c.kind, {0}, c.scalars, 0, {0, 2}, keepdim)});
      at::Tensor got = RunOne(some, {x});
      at::Tensor want = c.torch_call(x, {0, 2}, keepdim);
      ASSERT_TRUE(got.defined());
      EXPECT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4));
      // Empty dims reduce every dim.
      ir::Graph all = MakeGraph({{DType::kFloat32, 3}}, {MakeOp(c.kind, {0}, c.scalars, 0, {}, keepdim)});
      got = RunOne(all, {x});
      want = c.torch_call(x, {0, 1, 2}, keepdim);
      ASSERT_TRUE(got.defined());
      EXPECT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4));
    }
  }
}

TEST_F(ReferenceExecutorTest, SoftmaxAndLogSoftmaxOverOneDim) {
  at::Tensor x = Randn({4, 6});
  ir::Graph sm = MakeGraph({{DType::kFloat32, 2}}, {MakeOp(OpKind::kSoftmax, {0}, {}, 0, {1})});
  at::Tensor e = (x - x.amax({1}, true)).exp();
  ExpectSame(RunOne(sm, {x}), e / e.sum({1}, true));
  ir::Graph lsm = MakeGraph({{DType::kFloat32, 2}}, {MakeOp(OpKind::kLogSoftmax, {0}, {}, 0, {0})});
  ExpectSame(RunOne(lsm, {x}), x - x.logsumexp({0}, true));
}

TEST_F(ReferenceExecutorTest, LinearIsXTimesWeightTransposedPlusBiasAndUpcasts) {
  at::Tensor x = Randn({2, 3, 8});
  at::Tensor w = Randn({5, 8});
  at::Tensor b = Randn({5});
  ir::Graph with_bias = MakeGraph({{DType::kFloat32, 3}, {DType::kFloat32, 2}, {DType::kFloat32, 1}},
                                  {MakeOp(OpKind::kLinear, {0, 1, 2})});
  ExpectSame(RunOne(with_bias, {x, w, b}), at::matmul(x, w.t()) + b);
  ir::Graph no_bias = MakeGraph({{DType::kFloat32, 3}, {DType::kFloat32, 2}}, {MakeOp(OpKind::kLinear, {0, 1})});
  ExpectSame(RunOne(no_bias, {x, w}), at::matmul(x, w.t()));
  at::Tensor up = RunOne(with_bias, {x, w, b}, /*upcast=*/true);
  ASSERT_TRUE(up.defined());
  EXPECT_EQ(up.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::allclose(up, at::matmul(x.to(at::kDouble), w.to(at::kDouble).t()) + b.to(at::kDouble), 1e-12, 1e-12));
}

TEST_F(ReferenceExecutorTest, Conv2dIsAtConv2dWithItsAttributesAndUpcasts) {
  at::Tensor x = Randn({2, 4, 9, 7});
  at::Tensor w = Randn({6, 2, 3, 2});
  at::Tensor b = Randn({6});
  // dims = {sh, sw, ph, pw, dh, dw}, ivalue = groups (ir.h).
  ir::Graph with_bias = MakeGraph({{DType::kFloat32, 4}, {DType::kFloat32, 4}, {DType::kFloat32, 1}},
                                  {MakeOp(OpKind::kConv2d, {0, 1, 2}, {}, 2, {2, 1, 1, 0, 1, 2}), MakeOp(OpKind::kMish, {3})});
  ExpectSame(RunOne(with_bias, {x, w, b}), at::mish(at::conv2d(x, w, b, {2, 1}, {1, 0}, {1, 2}, 2)));
  ir::Graph no_bias = MakeGraph({{DType::kFloat32, 4}, {DType::kFloat32, 4}},
                                {MakeOp(OpKind::kConv2d, {0, 1}, {}, 1, {1, 1, 1, 1, 1, 1})});
  at::Tensor w1 = Randn({3, 4, 3, 3});
  at::Tensor plain = RunOne(no_bias, {x, w1});
  ExpectSame(plain, at::conv2d(x, w1, {}, {1, 1}, {1, 1}));
  EXPECT_EQ(plain.sizes().vec(), (std::vector<int64_t>{2, 3, 9, 7}));
  at::Tensor up = RunOne(with_bias, {x, w, b}, /*upcast=*/true);
  ASSERT_TRUE(up.defined());
  EXPECT_EQ(up.scalar_type(), at::kDouble);
  at::Tensor want = at::mish(at::conv2d(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble), {2, 1}, {1, 0}, {1, 2}, 2));
  EXPECT_TRUE(at::allclose(up, want, 1e-12, 1e-12));
}

TEST_F(ReferenceExecutorTest, LayerNormWithAndWithoutAffine) {
  at::Tensor x = Randn({3, 4, 8});
  at::Tensor w = Randn({4, 8});
  at::Tensor b = Randn({4, 8});
  const double eps = 1e-5;
  at::Tensor mean = x.mean({1, 2}, true);
  at::Tensor var = (x - mean).pow(2).mean({1, 2}, true);  // biased
  at::Tensor normed = (x - mean) / (var + eps).sqrt();
  ir::Graph plain = MakeGraph({{DType::kFloat32, 3}}, {MakeOp(OpKind::kLayerNorm, {0}, {eps}, 2)});
  at::Tensor got = RunOne(plain, {x});
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(at::allclose(got, normed, 1e-4, 1e-4));
  ir::Graph affine = MakeGraph({{DType::kFloat32, 3}, {DType::kFloat32, 2}, {DType::kFloat32, 2}},
                               {MakeOp(OpKind::kLayerNorm, {0, 1, 2}, {eps}, 2)});
  got = RunOne(affine, {x, w, b});
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(at::allclose(got, normed * w + b, 1e-4, 1e-4));
}

TEST_F(ReferenceExecutorTest, GroupNormMatchesDefinition) {
  at::Tensor x = Randn({2, 6, 5});
  at::Tensor w = Randn({6});
  at::Tensor b = Randn({6});
  const double eps = 1e-5;
  at::Tensor g3 = x.reshape({2, 3, 10});
  at::Tensor mean = g3.mean({2}, true);
  at::Tensor var = (g3 - mean).pow(2).mean({2}, true);
  at::Tensor normed = ((g3 - mean) / (var + eps).sqrt()).reshape({2, 6, 5});
  ir::Graph g = MakeGraph({{DType::kFloat32, 3}, {DType::kFloat32, 1}, {DType::kFloat32, 1}},
                          {MakeOp(OpKind::kGroupNorm, {0, 1, 2}, {eps}, 3)});
  at::Tensor got = RunOne(g, {x, w, b});
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(at::allclose(got, normed * w.view({6, 1}) + b.view({6, 1}), 1e-4, 1e-4));
}

TEST_F(ReferenceExecutorTest, PoolsMatchTheirWindowDefinitionInOneTwoAndThreeDims) {
  // Each output is the mean / max of one non-overlapping window (stride =
  // window, no padding, floor mode: a trailing partial window is dropped),
  // computed here with reshape + reduce.
  at::Tensor x = Randn({2, 3, 9, 8});  // row 8 is dropped by windows of 2
  at::Tensor win = x.narrow(2, 0, 8).reshape({2, 3, 4, 2, 4, 2});
  ir::Graph avg = MakeGraph({{DType::kFloat32, 4}}, {MakeOp(OpKind::kAvgPool, {0}, {}, 0, {2, 2})});
  ir::Graph mx = MakeGraph({{DType::kFloat32, 4}}, {MakeOp(OpKind::kMaxPool, {0}, {}, 0, {2, 2})});
  ExpectSame(RunOne(avg, {x}), win.mean({3, 5}));
  ExpectSame(RunOne(mx, {x}), win.amax({3, 5}));
  at::Tensor x1 = Randn({2, 3, 12});
  ExpectSame(RunOne(MakeGraph({{DType::kFloat32, 3}}, {MakeOp(OpKind::kMaxPool, {0}, {}, 0, {3})}), {x1}),
             x1.reshape({2, 3, 4, 3}).amax({3}));
  at::Tensor x3 = Randn({1, 2, 4, 4, 6});
  ExpectSame(RunOne(MakeGraph({{DType::kFloat32, 5}}, {MakeOp(OpKind::kAvgPool, {0}, {}, 0, {2, 2, 3})}), {x3}),
             x3.reshape({1, 2, 2, 2, 2, 2, 2, 3}).mean({3, 5, 7}));
  // The float64 second opinion pools in float64; a NaN in a window is that window's max.
  at::Tensor up = RunOne(avg, {x}, /*upcast=*/true);
  EXPECT_EQ(up.scalar_type(), at::kDouble);
  at::Tensor with_nan = x.clone();
  with_nan.index_put_({0, 0, 0, 0}, std::nan(""));
  at::Tensor got = RunOne(mx, {with_nan});
  EXPECT_TRUE(std::isnan(got.index({0, 0, 0, 0}).item<float>()));
  EXPECT_FALSE(std::isnan(got.index({0, 0, 0, 1}).item<float>()));
}

TEST_F(ReferenceExecutorTest, ChainsOpsAndReturnsSeveralOutputs) {
  at::Tensor x = Randn({4, 16});
  at::Tensor y = Randn({4, 16});
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}},
                          {MakeOp(OpKind::kAdd, {0, 1}), MakeOp(OpKind::kGelu, {2}, {}, 1),
                           MakeOp(OpKind::kSum, {3}, {}, 0, {1}, true)});
  g.outputs = {3, 4};
  auto out = reference::Run(g, {x, y});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  at::Tensor want = at::gelu(x + y, "tanh");
  ExpectSame((*out)[0], want);
  ExpectSame((*out)[1], want.sum({1}, true));
}

TEST_F(ReferenceExecutorTest, UpcastComputesInFloat64) {
  at::Tensor x = Randn({16, 16}, at::kHalf);
  ir::Graph g = MakeGraph({{DType::kFloat16, 2}}, {MakeOp(OpKind::kExp, {0}), MakeOp(OpKind::kSum, {1}, {}, 0, {1})});
  at::Tensor got = RunOne(g, {x}, /*upcast=*/true);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.scalar_type(), at::kDouble);
  ExpectSame(got, x.to(at::kDouble).exp().sum({1}));
  at::Tensor plain = RunOne(g, {x});
  ASSERT_TRUE(plain.defined());
  EXPECT_EQ(plain.scalar_type(), at::kHalf);
}

TEST_F(ReferenceExecutorTest, RejectsWrongInputCount) {
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}}, {MakeOp(OpKind::kAdd, {0, 1})});
  auto out = reference::Run(g, {Randn({2, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("expected 2 inputs, got 1"), std::string::npos) << out.status().message();
}

TEST_F(ReferenceExecutorTest, RejectsWrongInputDtypeNamingTheInput) {
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}}, {MakeOp(OpKind::kAdd, {0, 1})});
  auto out = reference::Run(g, {Randn({2, 2}), Randn({2, 2}, at::kHalf)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("input 1"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("f32"), std::string::npos) << out.status().message();
}

TEST_F(ReferenceExecutorTest, RejectsWrongInputRankNamingTheInput) {
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}}, {MakeOp(OpKind::kRelu, {0})});
  auto out = reference::Run(g, {Randn({2, 2, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("input 0"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("rank 3"), std::string::npos) << out.status().message();
}

TEST_F(ReferenceExecutorTest, RejectsShapesThatDoNotBroadcast) {
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}, {DType::kFloat32, 2}}, {MakeOp(OpKind::kAdd, {0, 1})});
  auto out = reference::Run(g, {Randn({2, 3}), Randn({4, 3})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("op 0 (add)"), std::string::npos) << out.status().message();
}

TEST_F(ReferenceExecutorTest, RejectsInvalidGraph) {
  ir::Graph g = MakeGraph({{DType::kFloat32, 2}}, {MakeOp(OpKind::kAdd, {0, 5})});
  auto out = reference::Run(g, {Randn({2, 3})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
}

TEST(ReferenceSpecTest, SpecOfReportsStridesAndPointerAlignment) {
  at::Tensor base = at::zeros({64}, at::kFloat);
  auto full = SpecOf(base.view({8, 8}).t());
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->dtype, DType::kFloat32);
  EXPECT_EQ(full->shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(full->strides, (std::vector<int64_t>{1, 8}));
  EXPECT_FALSE(full->is_contiguous());
  const auto base_addr = reinterpret_cast<uintptr_t>(base.data_ptr());
  ASSERT_EQ(base_addr % 16, 0u) << "allocator returned an unaligned block";
  EXPECT_EQ(full->alignment, 16);
  auto off1 = SpecOf(base.slice(0, 1, 9));  // 4 bytes past a 16-aligned pointer
  ASSERT_TRUE(off1.ok());
  EXPECT_EQ(off1->alignment, 4);
  auto off2 = SpecOf(base.slice(0, 2, 10));  // 8 bytes past
  ASSERT_TRUE(off2.ok());
  EXPECT_EQ(off2->alignment, 8);
}

TEST(ReferenceSpecTest, DtypeConversionRoundTripsAndRejectsOthers) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    auto back = FromScalarType(ToScalarType(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
  }
  auto dbl = FromScalarType(at::kDouble);
  ASSERT_FALSE(dbl.ok());
  EXPECT_EQ(dbl.status().code(), StatusCode::kUnsupported);
  auto spec = SpecOf(at::zeros({2}, at::kInt));
  EXPECT_FALSE(spec.ok());
}

// The rendered KernelBench program (ir::RenderReferenceProgram) and this
// executor must compute the same thing op for op: run both on the same inputs.
TEST(ReferenceProgramAgreementTest, RenderedProgramMatchesExecutorInPython) {
  if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 cannot import torch here";
  }
  at::manual_seed(7);
  ir::Graph g;
  g.inputs = {{DType::kFloat32, 3}, {DType::kFloat32, 3}, {DType::kFloat16, 3}, {DType::kFloat32, 1}};
  auto add = [&](ir::Op op) {
    g.ops.push_back(std::move(op));
    return g.op_value(g.ops.size() - 1);
  };
  std::vector<int32_t> outs;
  const int32_t c = add(Const(0.3));
  const int32_t nc = add(Const(-1.25));
  for (OpKind k : {OpKind::kNeg, OpKind::kAbs, OpKind::kExp, OpKind::kLog, OpKind::kSqrt, OpKind::kRsqrt,
                   OpKind::kReciprocal, OpKind::kTanh, OpKind::kSigmoid, OpKind::kErf, OpKind::kRelu, OpKind::kSilu,
                   OpKind::kMish, OpKind::kSoftsign, OpKind::kSelu, OpKind::kHardswish, OpKind::kHardsigmoid}) {
    outs.push_back(add(MakeOp(k, {0})));
  }
  outs.push_back(add(MakeOp(OpKind::kGelu, {0}, {}, 0)));
  outs.push_back(add(MakeOp(OpKind::kGelu, {2}, {}, 1)));
  outs.push_back(add(MakeOp(OpKind::kSoftplus, {0}, {2.0, 3.0})));
  outs.push_back(add(MakeOp(OpKind::kElu, {0}, {1.5, 2.0, 0.5})));
  outs.push_back(add(MakeOp(OpKind::kElu, {0}, {0.7, 1.0, 1.0})));
  outs.push_back(add(MakeOp(OpKind::kLeakyRelu, {0}, {0.1})));
  outs.push_back(add(MakeOp(OpKind::kClamp, {0}, {-0.5, 0.75})));
  outs.push_back(add(MakeOp(OpKind::kClamp, {0}, {-kInf, 0.75})));
  outs.push_back(add(MakeOp(OpKind::kPowScalar, {0}, {3.0})));
  outs.push_back(add(MakeOp(OpKind::kCast, {0}, {}, static_cast<int64_t>(DType::kFloat16))));
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                   OpKind::kPow}) {
    outs.push_back(add(MakeOp(k, {0, 1})));
    outs.push_back(add(MakeOp(k, {2, c})));
    outs.push_back(add(MakeOp(k, {nc, 2})));
  }
  const int32_t folded = add(MakeOp(OpKind::kExp, {nc}));
  outs.push_back(add(MakeOp(OpKind::kMul, {2, folded})));
  for (OpKind k : {OpKind::kSum, OpKind::kMean, OpKind::kAmax, OpKind::kAmin, OpKind::kLogSumExp}) {
    outs.push_back(add(MakeOp(k, {0}, {}, 0, {1}, true)));
    outs.push_back(add(MakeOp(k, {0}, {}, 0, {}, false)));
  }
  outs.push_back(add(MakeOp(OpKind::kNorm, {0}, {2.0}, 0, {2}, false)));
  outs.push_back(add(MakeOp(OpKind::kNorm, {0}, {3.0}, 0, {0, 1}, true)));
  outs.push_back(add(MakeOp(OpKind::kSoftmax, {0}, {}, 0, {2})));
  outs.push_back(add(MakeOp(OpKind::kLogSoftmax, {2}, {}, 0, {1})));
  outs.push_back(add(MakeOp(OpKind::kLayerNorm, {0, 3, 3}, {1e-5}, 1)));
  outs.push_back(add(MakeOp(OpKind::kGroupNorm, {0}, {1e-5}, 2)));
  g.outputs = outs;

  const std::vector<at::Tensor> inputs = {
      at::randn({2, 4, 8}), at::randn({2, 1, 8}), at::randn({2, 4, 8}).to(at::kHalf), at::randn({8})};
  std::vector<ir::TensorSpec> specs;
  for (const at::Tensor& t : inputs) specs.push_back(*SpecOf(t));
  auto ours = reference::Run(g, inputs);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();

  char dir_template[] = "/tmp/dice_refexec_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::ofstream(dir + "/model.py") << ir::RenderReferenceProgram(g, specs, "cpu");
  for (size_t i = 0; i < inputs.size(); ++i) {  // raw float32 bytes; f16 values round-trip exactly
    at::Tensor f = inputs[i].to(at::kFloat).contiguous();
    std::ofstream(dir + "/in" + std::to_string(i) + ".bin", std::ios::binary)
        .write(static_cast<const char*>(f.data_ptr()), f.numel() * 4);
  }
  std::ofstream(dir + "/driver.py")
      << "import importlib.util, struct, sys, warnings\n"
         "warnings.simplefilter('ignore')\n"
         "import torch\n"
         "d = sys.argv[1]\n"
         "spec = importlib.util.spec_from_file_location('model', d + '/model.py')\n"
         "m = importlib.util.module_from_spec(spec)\n"
         "spec.loader.exec_module(m)\n"
         "xs = []\n"
         "for i, t in enumerate(m.get_inputs()):\n"
         "    raw = bytearray(open(f'{d}/in{i}.bin', 'rb').read())\n"
         "    xs.append(torch.frombuffer(raw, dtype=torch.float32).reshape(t.shape).to(t.dtype))\n"
         "out = m.Model(*m.get_init_inputs())(*xs)\n"
         "out = out if isinstance(out, tuple) else (out,)\n"
         "for k, o in enumerate(out):\n"
         "    v = o.to(torch.float64).reshape(-1).tolist()\n"
         "    open(f'{d}/out{k}.bin', 'wb').write(struct.pack(f'<{len(v)}d', *v))\n"
         "    open(f'{d}/out{k}.txt', 'w').write(str(o.dtype) + ' ' + str(list(o.shape)))\n";
  const std::string cmd = "python3 " + dir + "/driver.py " + dir + " > " + dir + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir + "/log.txt").rdbuf();
  ASSERT_EQ(rc, 0) << log.str();

  for (size_t k = 0; k < ours->size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k) + " (" + ir::GetOpInfo(g.ops[g.outputs[k] - 4].kind).name + ")");
    const at::Tensor& mine = (*ours)[k];
    std::stringstream meta;
    meta << std::ifstream(dir + "/out" + std::to_string(k) + ".txt").rdbuf();
    std::stringstream want_meta;
    want_meta << "torch." << (mine.scalar_type() == at::kFloat  ? "float32"
                              : mine.scalar_type() == at::kHalf ? "float16"
                                                                : "bfloat16")
              << " [";
    for (int64_t d = 0; d < mine.dim(); ++d) want_meta << (d ? ", " : "") << mine.size(d);
    want_meta << "]";
    EXPECT_EQ(meta.str(), want_meta.str());
    std::ifstream bin(dir + "/out" + std::to_string(k) + ".bin", std::ios::binary);
    std::vector<double> theirs(static_cast<size_t>(mine.numel()));
    bin.read(reinterpret_cast<char*>(theirs.data()), static_cast<std::streamsize>(theirs.size() * 8));
    ASSERT_TRUE(bin.good());
    at::Tensor t = at::from_blob(theirs.data(), {mine.numel()}, at::kDouble).clone();
    at::Tensor m = mine.to(at::kDouble).reshape({-1});
    EXPECT_TRUE(at::allclose(m, t, 1e-6, 1e-6, /*equal_nan=*/true))
        << "max abs diff " << at::nan_to_num(m - t).abs().max().item<double>();
  }
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace dice::reference
