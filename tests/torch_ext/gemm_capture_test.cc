// GEMM groups in the TorchScript fusion pass (issue 18 items 1 and 2): a frozen
// linear becomes ir::OpKind::kLinear and takes its elementwise epilogue into
// one group; DICE_GEMM_GROUPS gates which linears do; a linear group with no
// kernel falls back to PyTorch's own nodes; likewise a frozen conv2d
// (ir::OpKind::kConv2d, DICE_CONV_GROUPS). CPU only.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include "dice/core/ir.h"
#include "dice/torch_ext/fusion_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

using K = ir::OpKind;

std::vector<K> NonConstantOps(const ir::Graph& g) {
  std::vector<K> kinds;
  for (const auto& op : g.ops)
    if (op.kind != K::kConstant) kinds.push_back(op.kind);
  return kinds;
}

std::vector<std::vector<K>> GroupOps(const OptimizeReport& rep) {
  std::vector<std::vector<K>> out;
  for (const auto& g : rep.groups) out.push_back(NonConstantOps(g.group.graph));
  return out;
}

std::string LeftOutReason(const OptimizeReport& rep, const std::string& kind) {
  for (const auto& n : rep.left_out)
    if (n.kind == kind) return n.reason;
  return "<not left out>";
}

// A module with a frozen-to-be Linear(32 -> 16) weight `w` and bias `b`.
torch::jit::Module LinearModule(const std::string& forward, at::ScalarType dtype = at::kFloat) {
  torch::jit::Module m("GemmModule");
  m.register_parameter("w", torch::randn({16, 32}).to(dtype), false);
  m.register_parameter("b", torch::randn({16}).to(dtype), false);
  m.define(forward);
  return m;
}

class GemmCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DICE_MODE");
    unsetenv("DICE_GEMM_GROUPS");
    EnsureRegistered();
  }
  void TearDown() override { unsetenv("DICE_GEMM_GROUPS"); }

  // optimize() on a clone of `original` with x [8, 32] (plus `extra` inputs).
  OptimizeReport Optimize(const torch::jit::Module& original, torch::jit::Module* out,
                          std::vector<c10::IValue> in, Mode mode = Mode::kObserve) {
    *out = original.clone();
    Options opt;
    opt.mode = mode;
    opt.cache_dir = ::testing::TempDir() + "/dice_gemm_capture_test_cache";
    opt.example_inputs = std::move(in);
    auto rep = optimize(*out, opt);
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    return rep.ok() ? std::move(rep).value() : OptimizeReport{};
  }
};

constexpr const char* kLinearRelu = R"(
def forward(self, x):
    return torch.relu(torch.linear(x, self.w, self.b))
)";

TEST_F(GemmCaptureTest, FrozenLinearReluIsOneGroupWithInputsXWeightBias) {
  auto original = LinearModule(kLinearRelu);
  torch::jit::Module m;
  std::vector<c10::IValue> in = {torch::randn({8, 32})};
  auto rep = Optimize(original, &m, in);
  ASSERT_EQ(rep.groups.size(), 1u) << rep.graph;
  const CapturedGroup& g = rep.groups[0].group;
  EXPECT_EQ(NonConstantOps(g.graph), (std::vector<K>{K::kLinear, K::kRelu}));
  EXPECT_EQ(g.summary, "linear+relu");
  ASSERT_EQ(g.graph.inputs.size(), 3u) << g.canonical;
  const ir::Op* linear = nullptr;
  for (const auto& op : g.graph.ops)
    if (op.kind == K::kLinear) linear = &op;
  ASSERT_NE(linear, nullptr);
  ASSERT_EQ(linear->args.size(), 3u);
  // x [8, 32], weight [16, 32], bias [16]: all three are group inputs.
  EXPECT_EQ(g.graph.inputs[linear->args[0]], (ir::InputDecl{ir::DType::kFloat32, 2}));
  EXPECT_EQ(g.graph.inputs[linear->args[1]], (ir::InputDecl{ir::DType::kFloat32, 2}));
  EXPECT_EQ(g.graph.inputs[linear->args[2]], (ir::InputDecl{ir::DType::kFloat32, 1}));
  EXPECT_EQ(g.graph.outputs.size(), 1u);
  auto back = ir::Parse(g.canonical);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, g.graph);

  torch::NoGradGuard no_grad;
  auto x = torch::randn({5, 32});
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), original.forward({x}).toTensor()));
}

TEST_F(GemmCaptureTest, LinearMulLeakyReluIsOneGroup) {
  auto original = LinearModule(R"(
def forward(self, x):
    y = torch.linear(x, self.w, self.b) * 2.0
    return torch.leaky_relu(y, 0.1)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear, K::kMul, K::kLeakyRelu}})) << rep.graph;
  ASSERT_EQ(rep.groups.size(), 1u);
  EXPECT_EQ(rep.groups[0].group.summary, "linear+mul+leaky_relu");
}

// DAG epilogues (fusion_policy.h rule 4): the GEMM result read twice.
// KernelBench 59's y * sigmoid(y) * 2 is one group that computes sigmoid
// once and multiplies it with linear's own value.
TEST_F(GemmCaptureTest, SwishTimesTwoIsOneGroupReadingTheLinearValueTwice) {
  auto original = LinearModule(R"(
def forward(self, x):
    y = torch.linear(x, self.w, self.b)
    return y * torch.sigmoid(y) * 2.0
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear, K::kSigmoid, K::kMul, K::kMul}})) << rep.graph;
  ASSERT_EQ(rep.groups.size(), 1u);
  const ir::Graph& g = rep.groups[0].group.graph;
  int32_t lin = -1, sig = -1;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind == K::kLinear) lin = g.op_value(i);
    if (g.ops[i].kind == K::kSigmoid) sig = g.op_value(i);
  }
  ASSERT_GE(lin, 0);
  ASSERT_GE(sig, 0);
  bool product = false;  // mul(linear, sigmoid) in either order
  for (const auto& op : g.ops)
    if (op.kind == K::kMul && op.args.size() == 2)
      product |= (op.args[0] == lin && op.args[1] == sig) || (op.args[0] == sig && op.args[1] == lin);
  EXPECT_TRUE(product) << rep.groups[0].group.canonical;
  EXPECT_EQ(g.outputs.size(), 1u);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({8, 32});
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), original.forward({x}).toTensor()));
}

// KernelBench 70 and 40: sigmoid(y) * s + y and y * s + y.
TEST_F(GemmCaptureTest, ScaledEpiloguePlusTheLinearValueIsOneGroup) {
  auto sigmoid_scaled = LinearModule(R"(
def forward(self, x):
    y = torch.linear(x, self.w, self.b)
    return torch.sigmoid(y) * 1.5 + y
)");
  torch::jit::Module m;
  auto rep = Optimize(sigmoid_scaled, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear, K::kSigmoid, K::kMul, K::kAdd}})) << rep.graph;
  auto scaled = LinearModule(R"(
def forward(self, x):
    y = torch.linear(x, self.w, self.b)
    return y * 0.5 + y
)");
  rep = Optimize(scaled, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear, K::kMul, K::kAdd}})) << rep.graph;
  torch::NoGradGuard no_grad;
  auto x = torch::randn({8, 32});
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), scaled.forward({x}).toTensor()));
}

// The intermediate sigmoid(y) is also returned: the group would have two
// outputs, so the linear stays alone.
TEST_F(GemmCaptureTest, DagEpilogueWhoseIntermediateIsReturnedStaysSplit) {
  auto original = LinearModule(R"(
def forward(self, x):
    y = torch.linear(x, self.w, self.b)
    s = torch.sigmoid(y)
    return (y * s, s)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear}, {K::kSigmoid, K::kMul}})) << rep.graph;
}

TEST_F(GemmCaptureTest, ReductionAfterLinearGetsItsOwnGroup) {
  auto original = LinearModule(R"(
def forward(self, x):
    return torch.sum(torch.linear(x, self.w, self.b), 1)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear}, {K::kSum}})) << rep.graph;
  torch::NoGradGuard no_grad;
  auto x = torch::randn({8, 32});
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), original.forward({x}).toTensor()));
}

TEST_F(GemmCaptureTest, GemmGroupsOffGivesTheGroupsWithoutLinear) {
  constexpr const char* kSrc = R"(
def forward(self, x):
    return torch.sum(torch.relu(torch.linear(x, self.w, self.b)), 1)
)";
  auto original = LinearModule(kSrc);
  torch::jit::Module m;
  auto on = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(on), (std::vector<std::vector<K>>{{K::kLinear, K::kRelu}, {K::kSum}})) << on.graph;

  setenv("DICE_GEMM_GROUPS", "0", 1);
  auto off = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(off), (std::vector<std::vector<K>>{{K::kRelu, K::kSum}})) << off.graph;
  EXPECT_EQ(LeftOutReason(off, "aten::linear"), "not a fusible op");
}

TEST_F(GemmCaptureTest, Bf16LinearIsGroupedOnlyWithGemmGroupsAll) {
  auto original = LinearModule(kLinearRelu, at::kBFloat16);
  torch::jit::Module m;
  std::vector<c10::IValue> in = {torch::randn({8, 32}).to(at::kBFloat16)};
  auto rep = Optimize(original, &m, in);
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kRelu}})) << rep.graph;
  EXPECT_NE(LeftOutReason(rep, "aten::linear").find("bf16 linear"), std::string::npos)
      << LeftOutReason(rep, "aten::linear");
  EXPECT_NE(LeftOutReason(rep, "aten::linear").find("DICE_GEMM_GROUPS=all"), std::string::npos);

  setenv("DICE_GEMM_GROUPS", "all", 1);
  auto all = Optimize(original, &m, in);
  EXPECT_EQ(GroupOps(all), (std::vector<std::vector<K>>{{K::kLinear, K::kRelu}})) << all.graph;
  ASSERT_EQ(all.groups.size(), 1u);
  EXPECT_EQ(all.groups[0].group.graph.inputs[0].dtype, ir::DType::kBFloat16);
}

// DICE_GEMM_GROUPS=epilogue (the FX backend's default; opt-in here): a bf16
// linear with an epilogue op forms its group, a lone one is left to PyTorch
// with the reason, and a float32 one still forms a group alone.
TEST_F(GemmCaptureTest, EpilogueSettingGroupsABf16LinearOnlyWithItsEpilogue) {
  setenv("DICE_GEMM_GROUPS", "epilogue", 1);
  torch::jit::Module m;
  std::vector<c10::IValue> in = {torch::randn({8, 32}).to(at::kBFloat16)};
  auto with = Optimize(LinearModule(kLinearRelu, at::kBFloat16), &m, in);
  EXPECT_EQ(GroupOps(with), (std::vector<std::vector<K>>{{K::kLinear, K::kRelu}})) << with.graph;
  EXPECT_EQ(LeftOutReason(with, "aten::linear"), "<not left out>");

  constexpr const char* kLone = R"(
def forward(self, x):
    return torch.sum(torch.linear(x, self.w, self.b), 1)
)";
  auto lone_module = LinearModule(kLone, at::kBFloat16);
  auto lone = Optimize(lone_module, &m, in);
  EXPECT_EQ(GroupOps(lone), (std::vector<std::vector<K>>{{K::kSum}})) << lone.graph;
  EXPECT_NE(LeftOutReason(lone, "aten::linear").find("only with an epilogue op"), std::string::npos)
      << LeftOutReason(lone, "aten::linear");
  auto out = m.forward({in[0]}).toTensor();  // the linear runs as PyTorch's own node
  auto want =
      torch::sum(torch::linear(in[0].toTensor(), lone_module.attr("w").toTensor(), lone_module.attr("b").toTensor()), 1);
  EXPECT_TRUE(torch::allclose(out.to(at::kFloat), want.to(at::kFloat), 1e-2, 1e-2));

  auto f32 = Optimize(LinearModule(kLone), &m, {torch::randn({8, 32})});
  EXPECT_EQ(GroupOps(f32), (std::vector<std::vector<K>>{{K::kLinear}, {K::kSum}})) << f32.graph;
}

TEST_F(GemmCaptureTest, BiasVectorAndResidualAreTheOneExtraTensor) {
  // linear (no bias) + bias row vector -> relu; then + residual: a second extra tensor.
  auto original = LinearModule(R"(
def forward(self, x, r):
    y = torch.relu(torch.linear(x, self.w) + self.b)
    return y + r
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32}), torch::randn({8, 16})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kLinear, K::kAdd, K::kRelu}, {K::kAdd}})) << rep.graph;

  auto residual = LinearModule(R"(
def forward(self, x, r):
    return torch.linear(x, self.w, self.b) + r
)");
  auto rep2 = Optimize(residual, &m, {torch::randn({8, 32}), torch::randn({8, 16})});
  EXPECT_EQ(GroupOps(rep2), (std::vector<std::vector<K>>{{K::kLinear, K::kAdd}})) << rep2.graph;
  ASSERT_EQ(rep2.groups.size(), 1u);
  EXPECT_EQ(rep2.groups[0].group.graph.inputs.size(), 4u);  // x, weight, bias, r
}

TEST_F(GemmCaptureTest, EpilogueThatIsNotOneElementwiseOpStaysOutside) {
  // add with alpha (mul + add in the IR), a column-broadcast add, and a
  // linear result that is also a graph output: none joins its linear.
  torch::jit::Module original("GemmModule");
  for (const char* name : {"w1", "w2", "w3"}) original.register_parameter(name, torch::randn({16, 32}), false);
  original.define(R"(
def forward(self, x, c):
    y = torch.linear(x, self.w1)
    z = torch.linear(x, self.w2)
    u = torch.linear(x, self.w3)
    return torch.add(y, 1.0, alpha=2.0), z + c, u, torch.tanh(u)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32}), torch::randn({8, 1})});
  int lone_linears = 0;
  for (const auto& ops : GroupOps(rep)) {
    if (ops == std::vector<K>{K::kLinear}) ++lone_linears;
    else EXPECT_EQ(std::count(ops.begin(), ops.end(), K::kLinear), 0) << rep.graph;
  }
  EXPECT_EQ(lone_linears, 3) << rep.graph;
  torch::NoGradGuard no_grad;
  std::vector<c10::IValue> run = {torch::randn({8, 32}), torch::randn({8, 1})};
  auto got = m.forward(run).toTuple()->elements();
  auto want = original.forward(run).toTuple()->elements();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i].toTensor(), want[i].toTensor())) << i;
}

// torch.jit.freeze folds `w.t()` into a constant: matmul(x, C) and
// addmm(b, x, C) with that constant are respelled as linear and grouped;
// the outputs stay bit-identical to eager's. x @ W with W [K, N] contiguous
// (its transpose is not) and addmm with beta != 1 stay with PyTorch.
TEST_F(GemmCaptureTest, MatmulAndAddmmWithAFrozenTransposedWeightBecomeLinearGroups) {
  torch::jit::Module original("GemmModule");
  original.register_parameter("w", torch::randn({16, 32}), false);
  original.register_parameter("b", torch::randn({16}), false);
  original.register_parameter("v", torch::randn({32, 16}), false);
  original.define(R"(
def forward(self, x):
    y = torch.relu(torch.matmul(x, self.w.t()))
    z = torch.tanh(torch.addmm(self.b, x, self.w.t()))
    u = torch.relu(torch.matmul(x, self.v))
    s = torch.sigmoid(torch.addmm(self.b, x, self.w.t(), beta=2.0))
    return y, z, u, s
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({8, 32})});
  auto ops = GroupOps(rep);
  auto has = [&](const std::vector<K>& g) { return std::find(ops.begin(), ops.end(), g) != ops.end(); };
  EXPECT_TRUE(has({K::kLinear, K::kRelu})) << rep.graph;
  EXPECT_TRUE(has({K::kLinear, K::kTanh})) << rep.graph;
  EXPECT_TRUE(has({K::kRelu})) << rep.graph;     // after x @ v
  EXPECT_TRUE(has({K::kSigmoid})) << rep.graph;  // after addmm with beta=2
  EXPECT_EQ(ops.size(), 4u) << rep.graph;
  for (const auto& g : rep.groups) {
    for (const auto& op : g.group.graph.ops) {
      if (op.kind != K::kLinear) continue;
      EXPECT_EQ(g.group.graph.inputs[op.args[1]], (ir::InputDecl{ir::DType::kFloat32, 2}));
    }
  }
  torch::NoGradGuard no_grad;
  auto x = torch::randn({5, 32});
  auto got = m.forward({x}).toTuple()->elements();
  auto want = original.forward({x}).toTuple()->elements();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i].toTensor(), want[i].toTensor())) << i;

  setenv("DICE_GEMM_GROUPS", "0", 1);
  auto off = Optimize(original, &m, {torch::randn({8, 32})});
  EXPECT_EQ(off.graph.find("aten::linear"), std::string::npos) << off.graph;
  EXPECT_EQ(GroupOps(off).size(), 4u) << off.graph;
}

// A linear group with no kernel (on the CPU: no GPU, no winner, no tuning)
// runs PyTorch's own nodes: the outputs equal eager's, every call a fallback.
TEST_F(GemmCaptureTest, LinearGroupWithoutAKernelFallsBackToEager) {
  auto original = LinearModule(kLinearRelu);
  for (Mode mode : {Mode::kObserve, Mode::kCache, Mode::kTune}) {
    torch::jit::Module m;
    auto rep = Optimize(original, &m, {torch::randn({8, 32})}, mode);
    ASSERT_EQ(rep.groups.size(), 1u) << rep.graph;
    ResetGroupStats();
    torch::NoGradGuard no_grad;
    for (int64_t rows : {8, 3}) {
      auto x = torch::randn({rows, 32});
      EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), original.forward({x}).toTensor())) << rows;
    }
    auto stats = GetGroupStats();
    const GroupStats* s = nullptr;
    for (const auto& st : stats)
      if (st.id == rep.groups[0].id) s = &st;
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->calls, 2);
    EXPECT_EQ(s->hits, 0);
    EXPECT_EQ(s->fallbacks, 2);
  }
}

// DICE_MODE's pass inside the profiling executor (module not frozen: the
// weights are attributes, typed by the profiled runs) forms the linear group
// and the model computes what it computed before.
TEST_F(GemmCaptureTest, ProfilingExecutorFormsTheLinearGroupOfAnUnfrozenModule) {
  auto original = LinearModule(kLinearRelu);
  auto m = original.clone();
  setenv("DICE_MODE", "observe", 1);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({8, 32});
  at::Tensor got;
  for (int i = 0; i < 3; ++i) got = m.forward({x}).toTensor();
  auto last = torch::jit::lastExecutedOptimizedGraph();
  unsetenv("DICE_MODE");
  ASSERT_NE(last, nullptr);
  int grouped_linears = 0;
  for (const torch::jit::Node* n : last->nodes()) {
    EXPECT_NE(n->kind(), c10::aten::linear) << last->toString();  // not left at the top level
    if (n->kind() != FusionGroupSymbol()) continue;
    for (const torch::jit::Node* inner : n->g(c10::attr::Subgraph)->nodes())
      grouped_linears += inner->kind() == c10::aten::linear;
  }
  EXPECT_EQ(grouped_linears, 1) << last->toString();
  EXPECT_TRUE(torch::equal(got, original.forward({x}).toTensor()));
}

// Conv groups (issue 18 item 2): a frozen conv2d becomes ir kConv2d with its
// stride/padding/dilation and groups and takes its elementwise epilogue;
// DICE_CONV_GROUPS gates them.
torch::jit::Module ConvModule(const std::string& forward, at::ScalarType dtype = at::kFloat) {
  torch::jit::Module m("ConvModule");
  m.register_parameter("w", torch::randn({8, 4, 3, 3}).to(dtype), false);
  m.register_parameter("b", torch::randn({8}).to(dtype), false);
  m.define(forward);
  return m;
}

class ConvCaptureTest : public GemmCaptureTest {
 protected:
  void SetUp() override {
    setenv("DICE_CONV_GROUPS", "f32", 1);  // off by default (fusion_policy.h ParseConvGroups)
    GemmCaptureTest::SetUp();
  }
  void TearDown() override {
    unsetenv("DICE_CONV_GROUPS");
    GemmCaptureTest::TearDown();
  }
};

constexpr const char* kConvSigmoidTanh = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [2, 1], [1, 0], [1, 1], 1)
    return torch.tanh(torch.sigmoid(y))
)";

TEST_F(ConvCaptureTest, FrozenConvSigmoidTanhIsOneGroupWithItsAttributes) {
  auto original = ConvModule(kConvSigmoidTanh);
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({2, 4, 9, 7})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kConv2d, K::kSigmoid, K::kTanh}})) << rep.graph;
  ASSERT_EQ(rep.groups.size(), 1u);
  const CapturedGroup& g = rep.groups[0].group;
  const ir::Op* conv = nullptr;
  for (const auto& op : g.graph.ops)
    if (op.kind == K::kConv2d) conv = &op;
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->dims, (std::vector<int64_t>{2, 1, 1, 0, 1, 1}));
  EXPECT_EQ(conv->ivalue, 1);
  // x, the frozen weight and bias: all three are group inputs.
  ASSERT_EQ(conv->args.size(), 3u);
  EXPECT_EQ(g.graph.inputs[conv->args[0]], (ir::InputDecl{ir::DType::kFloat32, 4}));
  EXPECT_EQ(g.graph.inputs[conv->args[1]], (ir::InputDecl{ir::DType::kFloat32, 4}));
  EXPECT_EQ(g.graph.inputs[conv->args[2]], (ir::InputDecl{ir::DType::kFloat32, 1}));
  auto back = ir::Parse(g.canonical);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, g.graph);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 4, 9, 7});
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), original.forward({x}).toTensor()));
}

TEST_F(ConvCaptureTest, ReductionAfterConvStartsItsOwnGroup) {
  auto original = ConvModule(R"(
def forward(self, x):
    return torch.sum(torch.relu(torch.conv2d(x, self.w)), 1)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({2, 4, 9, 7})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kConv2d, K::kRelu}, {K::kSum}})) << rep.graph;
  ASSERT_FALSE(rep.groups.empty());
  for (const auto& op : rep.groups[0].group.graph.ops) {
    if (op.kind == K::kConv2d) EXPECT_EQ(op.args.size(), 2u);  // no bias
  }
}

TEST_F(ConvCaptureTest, ConvGroupsOffLeavesTheConvToPyTorch) {
  setenv("DICE_CONV_GROUPS", "0", 1);
  auto original = ConvModule(kConvSigmoidTanh);
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({2, 4, 9, 7})});
  // The conv's bias joins the epilogue group (conv_bias_pass.h).
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kAdd, K::kSigmoid, K::kTanh}})) << rep.graph;
  EXPECT_EQ(LeftOutReason(rep, "aten::conv2d"), "not a fusible op");
}

TEST_F(ConvCaptureTest, ConvGroupsUnsetLeaveTheConvToPyTorchByDefault) {
  unsetenv("DICE_CONV_GROUPS");
  auto original = ConvModule(kConvSigmoidTanh);
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({2, 4, 9, 7})});
  EXPECT_EQ(GroupOps(rep), (std::vector<std::vector<K>>{{K::kAdd, K::kSigmoid, K::kTanh}})) << rep.graph;
}

TEST_F(ConvCaptureTest, Bf16ConvIsGroupedOnlyWithConvGroupsAll) {
  auto original = ConvModule(kConvSigmoidTanh, at::kBFloat16);
  torch::jit::Module m;
  std::vector<c10::IValue> in = {torch::randn({2, 4, 9, 7}).to(at::kBFloat16)};
  auto rep = Optimize(original, &m, in);
  EXPECT_NE(LeftOutReason(rep, "aten::conv2d").find("bf16 conv2d: conv groups take float32 only"), std::string::npos)
      << LeftOutReason(rep, "aten::conv2d");
  setenv("DICE_CONV_GROUPS", "all", 1);
  auto all = Optimize(original, &m, in);
  EXPECT_EQ(GroupOps(all), (std::vector<std::vector<K>>{{K::kConv2d, K::kSigmoid, K::kTanh}})) << all.graph;
}

TEST_F(ConvCaptureTest, TransposedConvolutionIsLeftOutWithTheReason) {
  auto original = ConvModule(R"(
def forward(self, x):
    y = torch._convolution(x, self.w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1, False, False, True, True)
    return torch.relu(y)
)");
  torch::jit::Module m;
  auto rep = Optimize(original, &m, {torch::randn({2, 8, 9, 7})});
  EXPECT_NE(LeftOutReason(rep, "aten::_convolution").find("transposed"), std::string::npos)
      << LeftOutReason(rep, "aten::_convolution");
}

}  // namespace
}  // namespace dice::torch_ext
