// Graph capture, the fusion pass and the fallback path on the CPU.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include "dice/core/ir.h"
#include "dice/reference/reference_executor.h"
#include "dice/torch_ext/capture.h"
#include "dice/torch_ext/fusion_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

torch::jit::Module Compile(const std::string& source) {
  torch::jit::Module m("TestModule");
  m.define(source);
  return m;
}

std::vector<ir::OpKind> NonConstantOps(const ir::Graph& g) {
  std::vector<ir::OpKind> kinds;
  for (const auto& op : g.ops)
    if (op.kind != ir::OpKind::kConstant) kinds.push_back(op.kind);
  return kinds;
}

int CountKind(const std::string& graph_text, const std::string& kind) {
  int n = 0;
  for (size_t pos = graph_text.find(kind); pos != std::string::npos; pos = graph_text.find(kind, pos + 1)) ++n;
  return n;
}

const GroupStats* FindStats(const std::vector<GroupStats>& all, int id) {
  for (const auto& s : all)
    if (s.id == id) return &s;
  return nullptr;
}

class CaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DICE_MODE");
    EnsureRegistered();
  }
};

constexpr const char* kMlpLike = R"(
def forward(self, x, y, w):
    a = x * 0.5 + y
    b = torch.gelu(a)
    c = torch.matmul(b, w)
    d = torch.relu(c)
    return torch.sum(d, 1)
)";

TEST_F(CaptureTest, FormsElementwiseAndReductionGroupsAroundMatmul) {
  auto m = Compile(kMlpLike);
  Options opt;
  opt.example_inputs = {torch::randn({4, 8}), torch::randn({4, 8}), torch::randn({8, 6})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 2u) << rep->graph;

  // Groups are listed in graph order: the prologue before matmul, then the epilogue.
  const auto& pro = rep->groups[0].group;
  const auto& epi = rep->groups[1].group;
  EXPECT_EQ(NonConstantOps(pro.graph),
            (std::vector<ir::OpKind>{ir::OpKind::kMul, ir::OpKind::kAdd, ir::OpKind::kGelu}));
  EXPECT_EQ(pro.summary, ir::Summary(pro.graph));
  ASSERT_EQ(pro.graph.inputs.size(), 2u);
  EXPECT_EQ(pro.graph.inputs[0], (ir::InputDecl{ir::DType::kFloat32, 2}));
  EXPECT_NE(pro.canonical.find("const(0.5)"), std::string::npos) << pro.canonical;
  EXPECT_EQ(pro.graph.ops.back().ivalue, 0);  // exact gelu

  EXPECT_EQ(NonConstantOps(epi.graph), (std::vector<ir::OpKind>{ir::OpKind::kRelu, ir::OpKind::kSum}));
  EXPECT_EQ(epi.graph.ops.back().dims, (std::vector<int64_t>{1}));
  EXPECT_FALSE(epi.graph.ops.back().keepdim);
  ASSERT_EQ(epi.graph.inputs.size(), 1u);  // the matmul result enters as a group input

  EXPECT_EQ(CountKind(rep->graph, "= dice::FusionGroup"), 2) << rep->graph;
  bool matmul_left_out = false;
  for (const auto& n : rep->left_out)
    if (n.kind == "aten::matmul" && n.reason == "not a fusible op") matmul_left_out = true;
  EXPECT_TRUE(matmul_left_out);
  auto ir_back = ir::Parse(pro.canonical);
  ASSERT_TRUE(ir_back.ok());
  EXPECT_EQ(*ir_back, pro.graph);
}

TEST_F(CaptureTest, FallbackOutputsAreBitIdenticalToTheOriginal) {
  auto original = Compile(kMlpLike);
  auto m = original.clone();
  std::vector<c10::IValue> in = {torch::randn({16, 32}), torch::randn({16, 32}), torch::randn({32, 24})};
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = in;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 2u);
  ResetGroupStats();

  torch::NoGradGuard no_grad;
  // Different values and a different batch size than the example inputs.
  for (int64_t rows : {16, 5}) {
    std::vector<c10::IValue> run = {torch::randn({rows, 32}) * 10, torch::randn({rows, 32}), torch::randn({32, 24})};
    at::Tensor want = original.forward(run).toTensor();
    at::Tensor got = m.forward(run).toTensor();
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(torch::equal(got, want));
  }
  auto stats = GetGroupStats();
  for (const auto& g : rep->groups) {
    const GroupStats* s = FindStats(stats, g.id);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->calls, 2);
    EXPECT_EQ(s->fallbacks, 2);
    EXPECT_EQ(s->hits, 0);
    EXPECT_EQ(s->timed_calls, 2);
    ASSERT_FALSE(s->fallback_reasons.empty());
    EXPECT_EQ(s->fallback_reasons.front().first, "observe mode");
  }
  EXPECT_NE(FormatProfile(stats).find("mul+add+gelu"), std::string::npos);
}

TEST_F(CaptureTest, FreezeFailureCapturesUnfrozenWithAWarningNamingThePass) {
  auto original = Compile(kMlpLike);
  auto m = original.clone();
  std::vector<c10::IValue> in = {torch::randn({16, 32}), torch::randn({16, 32}), torch::randn({32, 24})};
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = in;
  setenv("DICE_INJECT_CAPTURE_FAILURE", "freeze", 1);
  auto rep = optimize(m, opt);
  unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_FALSE(rep->frozen);
  ASSERT_EQ(rep->warnings.size(), 1u);
  EXPECT_NE(rep->warnings[0].find("torch.jit.freeze failed"), std::string::npos) << rep->warnings[0];
  EXPECT_NE(rep->warnings[0].find("injected failure"), std::string::npos) << rep->warnings[0];
  // The rest of the capture still ran: the same groups form, outputs equal the original.
  EXPECT_EQ(rep->groups.size(), 2u);
  torch::NoGradGuard no_grad;
  std::vector<c10::IValue> run = {torch::randn({16, 32}), torch::randn({16, 32}), torch::randn({32, 24})};
  EXPECT_TRUE(torch::equal(m.forward(run).toTensor(), original.forward(run).toTensor()));

  auto ok = original.clone();
  auto frozen = optimize(ok, opt);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  EXPECT_TRUE(frozen->frozen);
  EXPECT_TRUE(frozen->warnings.empty());
}

// Issue 18 item 6: an exception in a capture pass after freezing (inlining,
// type observation, the fusion pass) never fails optimize(): the model is
// left unchanged, with a warning naming the pass, and still runs as before.
TEST_F(CaptureTest, CapturePassFailureLeavesTheModelUnchangedWithAWarningNamingThePass) {
  auto original = Compile(kMlpLike);
  std::vector<c10::IValue> in = {torch::randn({16, 32}), torch::randn({16, 32}), torch::randn({32, 24})};
  for (const char* pass : {"inline", "functional", "identity_copies", "observe", "batch_norm", "global_pool", "fusion"}) {
    auto m = original.clone();
    Options opt;
    opt.mode = Mode::kObserve;
    opt.example_inputs = in;
    setenv("DICE_INJECT_CAPTURE_FAILURE", pass, 1);
    auto rep = optimize(m, opt);
    unsetenv("DICE_INJECT_CAPTURE_FAILURE");
    ASSERT_TRUE(rep.ok()) << pass << ": " << rep.status().ToString();
    EXPECT_TRUE(rep->frozen) << pass;
    EXPECT_TRUE(rep->groups.empty()) << pass;
    ASSERT_EQ(rep->warnings.size(), 1u) << pass;
    EXPECT_NE(rep->warnings[0].find(std::string("capture pass '") + pass + "' failed"), std::string::npos)
        << rep->warnings[0];
    EXPECT_NE(rep->warnings[0].find("injected failure"), std::string::npos) << rep->warnings[0];
    EXPECT_NE(rep->warnings[0].find("left unchanged"), std::string::npos) << rep->warnings[0];
    // No dice::FusionGroup in the graph that runs; the outputs equal the original's.
    EXPECT_EQ(m.get_method("forward").graph()->toString().find("dice::FusionGroup"), std::string::npos) << pass;
    torch::NoGradGuard no_grad;
    std::vector<c10::IValue> run = {torch::randn({16, 32}), torch::randn({16, 32}), torch::randn({32, 24})};
    EXPECT_TRUE(torch::allclose(m.forward(run).toTensor(), original.forward(run).toTensor())) << pass;
  }
}

TEST_F(CaptureTest, CacheModeOnCpuFallsBackWithNoGpuReason) {
  auto m = Compile(kMlpLike);
  std::vector<c10::IValue> in = {torch::randn({4, 8}), torch::randn({4, 8}), torch::randn({8, 6})};
  Options opt;
  opt.mode = Mode::kCache;
  opt.cache_dir = ::testing::TempDir() + "/dice_capture_test_cache";
  opt.example_inputs = in;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_FALSE(rep->groups.empty());
  ResetGroupStats();
  torch::NoGradGuard no_grad;
  m.forward(in);
  auto stats = GetGroupStats();
  const GroupStats* s = FindStats(stats, rep->groups[0].id);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, 1);
  EXPECT_EQ(s->hits, 0);
  ASSERT_EQ(s->fallback_reasons.size(), 1u);
  EXPECT_EQ(s->fallback_reasons[0].first, "no GPU");
}

TEST_F(CaptureTest, Int64InputsStayOutsideWithAReason) {
  auto m = Compile(R"(
def forward(self, i, x):
    j = i * 2 + 1
    return j, torch.tanh(x) * 3.0
)");
  Options opt;
  opt.example_inputs = {torch::arange(6), torch::randn({2, 3})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(NonConstantOps(rep->groups[0].group.graph),
            (std::vector<ir::OpKind>{ir::OpKind::kTanh, ir::OpKind::kMul}));
  int int64_reasons = 0;
  for (const auto& n : rep->left_out) {
    if ((n.kind == "aten::mul" || n.kind == "aten::add") && n.reason.find("unsupported dtype int64") != std::string::npos)
      ++int64_reasons;
  }
  EXPECT_EQ(int64_reasons, 2);

  // The int64 path still computes the original result.
  torch::NoGradGuard no_grad;
  auto out = m.forward({torch::arange(6), torch::randn({2, 3})}).toTuple();
  EXPECT_TRUE(torch::equal(out->elements()[0].toTensor(), torch::arange(6) * 2 + 1));
}

TEST_F(CaptureTest, SoftmaxAndLayerNormCarryTheirAttributes) {
  auto original = Compile(R"(
def forward(self, x, w, b):
    s = torch.softmax(x, -1)
    return torch.layer_norm(s, [16], w, b, 1e-5)
)");
  auto m = original.clone();
  std::vector<c10::IValue> in = {torch::randn({3, 16}), torch::randn({16}), torch::randn({16})};
  Options opt;
  opt.example_inputs = in;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  const ir::Graph& g = rep->groups[0].group.graph;
  ASSERT_EQ(NonConstantOps(g), (std::vector<ir::OpKind>{ir::OpKind::kSoftmax, ir::OpKind::kLayerNorm}));
  const ir::Op* softmax = nullptr;
  const ir::Op* ln = nullptr;
  for (const auto& op : g.ops) {
    if (op.kind == ir::OpKind::kSoftmax) softmax = &op;
    if (op.kind == ir::OpKind::kLayerNorm) ln = &op;
  }
  EXPECT_EQ(softmax->dims, (std::vector<int64_t>{1}));  // -1 normalised against rank 2
  EXPECT_EQ(ln->ivalue, 1);
  ASSERT_EQ(ln->scalars.size(), 1u);
  EXPECT_DOUBLE_EQ(ln->scalars[0], 1e-5);
  EXPECT_EQ(ln->args.size(), 3u);  // x, weight, bias
  EXPECT_EQ(g.inputs.size(), 3u);

  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(m.forward(in).toTensor(), original.forward(in).toTensor()));
}

TEST_F(CaptureTest, MaxDimWithUsedIndicesIsLeftOut) {
  auto m = Compile(R"(
def forward(self, x):
    v, i = torch.max(x, 1)
    w, j = torch.max(x, 0)
    return torch.exp(v), i, w
)");
  Options opt;
  opt.example_inputs = {torch::randn({4, 5})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  bool reason = false;
  for (const auto& n : rep->left_out)
    if (n.kind == "aten::max" && n.reason == "indices output is used") reason = true;
  EXPECT_TRUE(reason);
  // The second max (indices unused) becomes amax in its own group.
  bool has_amax = false;
  for (const auto& g : rep->groups)
    for (const auto& op : g.group.graph.ops) has_amax |= op.kind == ir::OpKind::kAmax;
  EXPECT_TRUE(has_amax);
}

TEST_F(CaptureTest, AddWithAlphaAndRsubBecomeScaledOps) {
  auto original = Compile(R"(
def forward(self, x, y):
    return torch.rsub(torch.add(x, y, alpha=2.0), 1.0).clamp(min=-1.0)
)");
  auto m = original.clone();
  std::vector<c10::IValue> in = {torch::randn({8}), torch::randn({8})};
  Options opt;
  opt.example_inputs = in;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(NonConstantOps(rep->groups[0].group.graph),
            (std::vector<ir::OpKind>{ir::OpKind::kMul, ir::OpKind::kAdd, ir::OpKind::kSub, ir::OpKind::kClamp}));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(m.forward(in).toTensor(), original.forward(in).toTensor()));
}

TEST_F(CaptureTest, FrozenParametersBecomeGroupInputs) {
  torch::jit::Module original("Norm");
  original.register_parameter("w", torch::randn({8}), false);
  original.register_parameter("b", torch::randn({8}), false);
  original.define(R"(
def forward(self, x, r):
    return torch.layer_norm(x + r, [8], self.w, self.b, 1e-5)
)");
  auto m = original.clone();
  std::vector<c10::IValue> in = {torch::randn({5, 8}), torch::randn({5, 8})};
  Options opt;
  opt.example_inputs = in;
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  const ir::Graph& g = rep->groups[0].group.graph;
  EXPECT_EQ(NonConstantOps(g), (std::vector<ir::OpKind>{ir::OpKind::kAdd, ir::OpKind::kLayerNorm}));
  ASSERT_EQ(g.inputs.size(), 4u);  // x, r, weight, bias
  EXPECT_EQ(g.inputs[2], (ir::InputDecl{ir::DType::kFloat32, 1}));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(m.forward(in).toTensor(), original.forward(in).toTensor()));
}

TEST_F(CaptureTest, TracedScalarTensorConstantBecomesWeakScalar) {
  // torch.jit.trace records `x * 2.0` with a 0-d float64 tensor constant.
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::Value* x = graph->addInput("x");
  x->setType(c10::TensorType::create(torch::randn({4, 3})));
  torch::jit::Value* two = graph->insertConstant(torch::tensor(2.0, torch::kFloat64));
  torch::jit::Value* y = graph->insert(c10::aten::mul, {x, two});
  y->setType(x->type());  // what ObserveTypes would record
  torch::jit::Value* z = graph->insert(c10::aten::leaky_relu, {y, 0.1});
  graph->registerOutput(z);
  EXPECT_EQ(UnsupportedReason(y->node()), "");
  auto before = graph->copy();
  auto res = FuseDiceGroups(graph);
  ASSERT_EQ(res.group_ids.size(), 1u) << graph->toString();
  auto g = GetRegisteredGroup(res.group_ids[0]);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->graph.inputs.size(), 1u);
  EXPECT_NE(g->canonical.find("const(2)"), std::string::npos) << g->canonical;
  EXPECT_EQ(NonConstantOps(g->graph), (std::vector<ir::OpKind>{ir::OpKind::kMul, ir::OpKind::kLeakyRelu}));
}

TEST_F(CaptureTest, DiceModeOffDisablesTheRegisteredPass) {
  auto m = Compile(kMlpLike);
  auto graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  std::vector<c10::IValue> in = {m._ivalue(), torch::randn({4, 8}), torch::randn({4, 8}), torch::randn({8, 6})};
  ASSERT_TRUE(ObserveTypes(graph, in).ok());
  auto with_types = graph->copy();

  setenv("DICE_MODE", "off", 1);
  DiceModePass(graph);
  EXPECT_EQ(CountKind(graph->toString(), "= dice::FusionGroup"), 0);

  setenv("DICE_MODE", "observe", 1);
  DiceModePass(with_types);
  EXPECT_EQ(CountKind(with_types->toString(), "= dice::FusionGroup"), 2) << with_types->toString();
  unsetenv("DICE_MODE");

  auto parsed = ParseMode("tune-sync");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Mode::kTuneSync);
  EXPECT_FALSE(ParseMode("fast").ok());
}

TEST_F(CaptureTest, ProfilingExecutorRunsThePassWhenDiceModeIsSet) {
  setenv("DICE_MODE", "observe", 1);
  auto original = Compile(kMlpLike);
  auto m = Compile(kMlpLike);
  torch::NoGradGuard no_grad;
  std::vector<c10::IValue> in = {torch::randn({4, 8}), torch::randn({4, 8}), torch::randn({8, 6})};
  at::Tensor got;
  for (int i = 0; i < 3; ++i) got = m.forward(in).toTensor();
  auto last = torch::jit::lastExecutedOptimizedGraph();
  unsetenv("DICE_MODE");
  ASSERT_NE(last, nullptr);
  EXPECT_GE(CountKind(last->toString(), "= dice::FusionGroup"), 1) << last->toString();
  EXPECT_TRUE(torch::equal(got, original.forward(in).toTensor()));
}

TEST_F(CaptureTest, ReductionsOverDifferentAxesGoToSeparateGroups) {
  // KernelBench level2/75's epilogue: group_norm (over each group's channels)
  // feeding amin over dim 1: one kernel cannot reduce over both, so the pass
  // forms two groups. amax and mean over the same dim (level2/80) stay one.
  auto m = Compile(R"(
def forward(self, x, b):
    y = torch.group_norm(x, 4)
    z = torch.amin(y, 1, keepdim=True)
    w = z + b
    u = torch.amax(x, 1, keepdim=True)
    v = torch.mean(u * 2.0, 1, keepdim=True)
    return w, v
)");
  Options opt;
  opt.example_inputs = {torch::randn({8, 32}), torch::randn({8, 1})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  std::vector<std::vector<ir::OpKind>> groups;
  for (const auto& g : rep->groups) groups.push_back(NonConstantOps(g.group.graph));
  const std::vector<ir::OpKind> gn = {ir::OpKind::kGroupNorm};
  const std::vector<ir::OpKind> amin_add = {ir::OpKind::kAmin, ir::OpKind::kAdd};
  const std::vector<ir::OpKind> amax_mean = {ir::OpKind::kAmax, ir::OpKind::kMul, ir::OpKind::kMean};
  EXPECT_NE(std::find(groups.begin(), groups.end(), gn), groups.end()) << rep->graph;
  EXPECT_NE(std::find(groups.begin(), groups.end(), amin_add), groups.end()) << rep->graph;
  EXPECT_NE(std::find(groups.begin(), groups.end(), amax_mean), groups.end()) << rep->graph;
  EXPECT_EQ(groups.size(), 3u) << rep->graph;
  // The fallback still computes the original outputs.
  torch::NoGradGuard no_grad;
  auto x = torch::randn({8, 32}), b = torch::randn({8, 1});
  auto out = m.forward({x, b}).toTuple();
  auto want = torch::amin(torch::group_norm(x, 4), 1, true) + b;
  EXPECT_TRUE(torch::allclose(out->elements()[0].toTensor(), want, 1e-5, 1e-6));
}

TEST_F(CaptureTest, InstanceNormIsGroupNormWithOneGroupPerChannel) {
  // KernelBench level2/17: conv -> InstanceNorm2d (affine=False, no running
  // statistics) -> divide. The norm is IR group_norm with groups = C, and
  // the group computes what torch.instance_norm does. With running
  // statistics (use_input_stats=False) it stays with PyTorch, with its reason.
  auto m = Compile(R"(
def forward(self, x):
    y = torch.instance_norm(x, None, None, None, None, True, 0.1, 1e-5, False)
    z = torch.instance_norm(x, None, None, torch.zeros([6]), torch.ones([6]), False, 0.1, 1e-5, False)
    return y / 2.0, z * 3.0
)");
  const at::Tensor x = torch::randn({2, 6, 5, 7}) * 3.0 + 1.0;
  Options opt;
  opt.example_inputs = {x};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  const CapturedGroup* norm = nullptr;
  for (const auto& g : rep->groups)
    for (const auto& op : g.group.graph.ops)
      if (op.kind == ir::OpKind::kGroupNorm) {
        EXPECT_EQ(op.ivalue, 6) << g.group.canonical;
        ASSERT_EQ(op.scalars.size(), 1u);
        EXPECT_DOUBLE_EQ(op.scalars[0], 1e-5);
        norm = &g.group;
      }
  ASSERT_NE(norm, nullptr) << rep->graph;
  ASSERT_EQ(norm->graph.inputs.size(), 1u) << norm->canonical;
  auto out = reference::Run(norm->graph, {x});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const at::Tensor want = torch::instance_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5, false);
  ASSERT_FALSE(out->empty());
  const at::Tensor got = out->front();
  // The divide joins the norm's group when the policy lets an epilogue follow it.
  const at::Tensor expect = norm->summary == "group_norm+div" ? want / 2.0 : want;
  EXPECT_TRUE(torch::allclose(got, expect, 1e-5, 1e-5)) << norm->summary << ": " << (got - expect).abs().max();
  bool running_left_out = false;
  for (const auto& n : rep->left_out)
    running_left_out = running_left_out || (n.kind == "aten::instance_norm" &&
                                            n.reason.find("running statistics") != std::string::npos);
  EXPECT_TRUE(running_left_out) << rep->graph;
  // The model (groups fall back to PyTorch on the CPU) still computes eager's values.
  torch::NoGradGuard no_grad;
  auto res = m.forward({x}).toTuple();
  EXPECT_TRUE(torch::allclose(res->elements()[0].toTensor(), want / 2.0, 1e-5, 1e-5));
}

TEST_F(CaptureTest, WindowedPoolsJoinTheEpilogueBeforeThemAndOthersStayWithPyTorch) {
  // KernelBench level2/46's tail (x - a, tanh, - b, pool) and a pool after it:
  // the pools with stride = window and no padding are IR pools inside the
  // group; an overlapping pool (stride 1) stays with PyTorch, with its reason.
  auto m = Compile(R"(
def forward(self, x):
    y = torch.tanh(x - 0.5) - 0.2
    p = torch.max_pool2d(y, [2, 2])
    q = torch.avg_pool1d(p.flatten(2) * 2.0, [4])
    r = torch.max_pool2d(torch.relu(x), [2, 2], [1, 1])
    return q, r
)");
  Options opt;
  opt.example_inputs = {torch::randn({2, 4, 8, 8})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  std::vector<std::vector<ir::OpKind>> groups;
  for (const auto& g : rep->groups) groups.push_back(NonConstantOps(g.group.graph));
  const std::vector<ir::OpKind> tail = {ir::OpKind::kSub, ir::OpKind::kTanh, ir::OpKind::kSub, ir::OpKind::kMaxPool};
  EXPECT_NE(std::find(groups.begin(), groups.end(), tail), groups.end()) << rep->graph;
  for (const auto& g : rep->groups) {
    if (NonConstantOps(g.group.graph) != tail) continue;
    EXPECT_EQ(g.group.graph.ops.back().dims, (std::vector<int64_t>{2, 2}));
  }
  bool overlapping_left_out = false;
  for (const auto& n : rep->left_out)
    if (n.kind == "aten::max_pool2d" && n.reason == "stride differs from kernel_size") overlapping_left_out = true;
  EXPECT_TRUE(overlapping_left_out) << rep->graph;
  // The groups' fallback (the reference executor) computes the original outputs.
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 4, 8, 8});
  auto out = m.forward({x}).toTuple();
  auto y = torch::tanh(x - 0.5) - 0.2;
  auto want_q = torch::avg_pool1d(torch::max_pool2d(y, {2, 2}).flatten(2) * 2.0, {4});
  EXPECT_TRUE(torch::allclose(out->elements()[0].toTensor(), want_q, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(out->elements()[1].toTensor(), torch::max_pool2d(torch::relu(x), {2, 2}, {1, 1})));
}

}  // namespace
}  // namespace dice::torch_ext
