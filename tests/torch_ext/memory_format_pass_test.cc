// The memory-format capture pass (issue 18 item 2) on the CPU: which conv
// regions optimize() runs in channels_last, where it converts, and that the
// model's outputs keep eager's values and strides.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/torch.h>

#include "../../torch_ext/src/memory_format_pass.h"
#include "dice/core/tensor_layout.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

constexpr const char* kConvFlattenLinear = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])
    y = torch.relu(y)
    y = torch.conv2d(y, self.w2, self.b2, [1, 1], [1, 1])
    z = torch.flatten(y, 1)
    return torch.linear(z, self.w3, self.b3)
)";

constexpr const char* kConv3dRelu = R"(
def forward(self, x):
    y = torch.conv3d(x, self.w1, self.b1, [1, 1, 1], [1, 1, 1])
    return torch.relu(y)
)";

// KernelBench level-2 task 1's shape of model: conv, then an epilogue, NCHW out.
constexpr const char* kConvReluBias = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [0, 0])
    y = torch.relu(y)
    return y + self.bias
)";

constexpr const char* kNoConv = R"(
def forward(self, x):
    y = torch.linear(x, self.w1, self.b1)
    return torch.relu(y) * 2.0
)";

// The conv reads its input x, and x is then written in place: a channels_last
// copy of x made for the conv would not see that write.
constexpr const char* kInputWrittenInPlace = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])
    x.relu_()
    return y + 1.0, x
)";

// A residual block as torchvision writes it (in-place relu and add).
constexpr const char* kResidualInPlace = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    y = torch.relu_(y)
    z = torch.conv2d(y, self.w2, None, [1, 1], [1, 1])
    z += y
    z = torch.relu_(z)
    return torch.flatten(torch.adaptive_avg_pool2d(z, [1, 1]), 1)
)";

// y leaves the region (to flatten) and stays in it (the second conv).
constexpr const char* kValueInsideAndOutside = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    a = torch.flatten(y, 1)
    b = torch.conv2d(y, self.w2, None, [1, 1], [1, 1])
    return a, b
)";

torch::jit::Module Make(const std::string& source, const std::vector<std::pair<std::string, at::Tensor>>& params) {
  torch::jit::Module m("TestModule");
  for (const auto& [name, t] : params) m.register_parameter(name, t, /*is_buffer=*/false);
  m.define(source);
  return m;
}

torch::jit::Module ConvFlattenLinear() {
  return Make(kConvFlattenLinear, {{"w1", torch::randn({8, 3, 3, 3})},
                                   {"b1", torch::randn({8})},
                                   {"w2", torch::randn({6, 8, 3, 3})},
                                   {"b2", torch::randn({6})},
                                   {"w3", torch::randn({5, 6 * 8 * 8})},
                                   {"b3", torch::randn({5})}});
}

std::vector<torch::jit::Node*> NodesOf(const torch::jit::Module& m, const char* kind) {
  std::vector<torch::jit::Node*> nodes;
  for (torch::jit::Node* n : m.get_method("forward").graph()->nodes())
    if (std::string(n->kind().toQualString()) == kind) nodes.push_back(n);
  return nodes;
}

at::Tensor ConstantTensor(const torch::jit::Value* v) {
  auto iv = torch::jit::toIValue(v);
  return iv && iv->isTensor() ? iv->toTensor() : at::Tensor();
}

// The memory_format argument of an aten::contiguous node.
int64_t FormatOf(const torch::jit::Node* contiguous) {
  auto iv = torch::jit::toIValue(contiguous->input(1));
  return iv ? iv->toInt() : -1;
}

class MemoryFormatPassTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DICE_MODE");
    unsetenv("DICE_MEMORY_FORMAT");
    unsetenv("DICE_INJECT_CAPTURE_FAILURE");
    EnsureRegistered();
    torch::manual_seed(0);
  }
  void TearDown() override {
    unsetenv("DICE_MEMORY_FORMAT");
    unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  }

  // optimize() in mode off (no fusion group: the pure TorchScript graph).
  static Expected<OptimizeReport> Capture(torch::jit::Module& m, const at::Tensor& x) {
    Options opt;
    opt.mode = Mode::kOff;
    opt.example_inputs = {x};
    return optimize(m, opt);
  }
};

TEST_F(MemoryFormatPassTest, ForcedChannelsLastConvertsWeightsAndOnlyTheRegionEdges) {
  auto original = ConvFlattenLinear();
  auto m = original.clone();
  const at::Tensor x = torch::randn({2, 3, 8, 8});
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(m, x);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "channels_last") << rep->memory_format_reason;
  EXPECT_NE(rep->memory_format_reason.find("channels_last requested"), std::string::npos) << rep->memory_format_reason;
  EXPECT_TRUE(rep->warnings.empty());

  auto convs = NodesOf(m, "aten::conv2d");
  ASSERT_EQ(convs.size(), 2u);
  for (auto* conv : convs) {
    at::Tensor w = ConstantTensor(conv->input(1));
    ASSERT_TRUE(w.defined());
    EXPECT_TRUE(w.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_FALSE(w.is_contiguous());
  }
  // One conversion into channels_last, of the graph's input x, and one back
  // to contiguous, feeding flatten; nothing between the convs.
  auto conversions = NodesOf(m, "aten::contiguous");
  ASSERT_EQ(conversions.size(), 2u) << m.get_method("forward").graph()->toString();
  const auto graph = m.get_method("forward").graph();
  int entries = 0, exits = 0;
  for (auto* c : conversions) {
    if (FormatOf(c) == static_cast<int64_t>(at::MemoryFormat::ChannelsLast)) {
      ++entries;
      EXPECT_EQ(c->input(0), graph->inputs()[1]);
      EXPECT_EQ(c->output()->uses().at(0).user, convs[0]);
    } else {
      ++exits;
      EXPECT_EQ(FormatOf(c), static_cast<int64_t>(at::MemoryFormat::Contiguous));
      // The second conv's bias add sits between (conv_bias_pass.h: the exit copy is its fusible reader).
      const torch::jit::Node* bias_add = c->input(0)->node();
      EXPECT_EQ(std::string(bias_add->kind().toQualString()), "aten::add");
      EXPECT_EQ(bias_add->input(0)->node(), convs[1]);
      ASSERT_EQ(c->output()->uses().size(), 1u);
      EXPECT_EQ(std::string(c->output()->uses()[0].user->kind().toQualString()), "aten::flatten");
    }
  }
  EXPECT_EQ(entries, 1);
  EXPECT_EQ(exits, 1);

  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 8, 8});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<double>();
  EXPECT_TRUE(got.is_contiguous());
}

TEST_F(MemoryFormatPassTest, OutputsMatchWithFusionGroupsServingTheRegion) {
  auto original = ConvFlattenLinear();
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  Options opt;
  opt.mode = Mode::kObserve;  // the relu between the convs becomes a group on its fallback
  opt.example_inputs = {torch::randn({2, 3, 8, 8})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "channels_last");
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 8, 8});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4));
}

TEST_F(MemoryFormatPassTest, RegionCopiesBecomeFusionGroupsTheExitFusedIntoTheEpilogue) {
  // Issue 18 item 2: PyTorch's strided layout copies cost more than the
  // channels_last conv saves; as group ops they get generated kernels. The
  // entry copy is a group of its own, the exit copy ends the epilogue group,
  // which reads channels_last and writes NCHW.
  auto original = Make(kConvReluBias, {{"w1", torch::randn({8, 3, 3, 3})},
                                       {"b1", torch::randn({8})},
                                       {"bias", torch::randn({8, 1, 1})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  Options opt;
  opt.mode = Mode::kObserve;  // groups on their fallback (no GPU needed)
  opt.example_inputs = {torch::randn({2, 3, 10, 10})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->memory_format, "channels_last") << rep->memory_format_reason;
  ASSERT_EQ(rep->groups.size(), 2u) << rep->graph;
  int entry = -1, epilogue = -1;
  for (size_t i = 0; i < rep->groups.size(); ++i) {
    const ir::Graph& g = rep->groups[i].group.graph;
    ASSERT_EQ(g.outputs.size(), 1u);
    const ir::Op& last = g.ops[static_cast<size_t>(g.outputs[0]) - g.inputs.size()];
    ASSERT_EQ(last.kind, ir::OpKind::kContiguous) << rep->groups[i].group.canonical;
    (last.ivalue == 1 ? entry : epilogue) = static_cast<int>(i);
  }
  ASSERT_GE(entry, 0);
  ASSERT_GE(epilogue, 0);
  EXPECT_EQ(rep->groups[entry].group.summary, "contiguous");
  // The conv's bias joins the group too (conv_bias_pass.h): cuDNN would add it in a pass of its own.
  EXPECT_EQ(rep->groups[epilogue].group.summary, "add+relu+add+contiguous");
  EXPECT_TRUE(NodesOf(m, "aten::contiguous").empty()) << rep->graph;  // both copies inside groups
  // The served task of the epilogue group: channels_last in, NCHW out.
  std::vector<ir::TensorSpec> in = {
      ServedInputSpec(ir::TensorSpec::Contiguous(ir::DType::kFloat32, {2, 8, 8, 8}), TensorLayout::kChannelsLast),
      ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 1, 1}),   // the conv's bias, moved
      ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 1, 1})};  // the model's bias
  in[0].strides = LayoutStrides({2, 8, 8, 8}, TensorLayout::kChannelsLast);
  auto task = MakeServedTask(rep->groups[epilogue].group.graph, in, TargetInfo{});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_TRUE(task->outputs[0].is_contiguous());

  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 10, 10});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<double>();
  EXPECT_TRUE(got.is_contiguous());
}

TEST_F(MemoryFormatPassTest, AConvBiasMovesIntoTheEpilogueOnlyWhenEveryReaderFuses) {
  // y = conv(x) + b then relu: the bias add becomes the epilogue group's first op.
  auto original = Make(kConvReluBias, {{"w1", torch::randn({8, 3, 3, 3})},
                                       {"b1", torch::randn({8})},
                                       {"bias", torch::randn({8, 1, 1})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "contiguous", 1);
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = {torch::randn({2, 3, 10, 10})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto convs = NodesOf(m, "aten::conv2d");
  ASSERT_EQ(convs.size(), 1u);
  EXPECT_TRUE(convs[0]->input(2)->type()->kind() == c10::TypeKind::NoneType) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "add+relu+add");
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 10, 10});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
  // Two readers, both fused (level2/52's x * tanh(softplus(x))): the bias
  // moves and both read the add, inside one group.
  auto twice = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])
    return torch.mul(torch.tanh(torch.softplus(y)), y)
)", {{"w1", torch::randn({4, 3, 3, 3})}, {"b1", torch::randn({4})}});
  auto twice_original = twice.clone();
  opt.example_inputs = {torch::randn({2, 3, 6, 6})};
  auto twice_rep = optimize(twice, opt);
  ASSERT_TRUE(twice_rep.ok()) << twice_rep.status().ToString();
  auto moved = NodesOf(twice, "aten::conv2d");
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(moved[0]->input(2)->type()->kind() == c10::TypeKind::NoneType) << twice_rep->graph;
  ASSERT_EQ(twice_rep->groups.size(), 1u) << twice_rep->graph;
  EXPECT_EQ(twice_rep->groups[0].group.summary, "add+softplus+tanh+mul");
  const at::Tensor small = torch::randn({2, 3, 6, 6});
  at::Tensor twice_want = twice_original.forward({small}).toTensor();
  at::Tensor twice_got = twice.forward({small}).toTensor();
  EXPECT_TRUE(torch::allclose(twice_got, twice_want, 1e-5, 1e-5)) << (twice_got - twice_want).abs().max().item<double>();
  // One reader is not fused (flatten): the bias stays in the conv, whether
  // that reader is alone or beside a fused one.
  for (const char* body : {"    return torch.flatten(y, 1)\n",
                           "    return torch.relu(y), torch.flatten(y, 1)\n"}) {
    auto biased = Make(std::string("\ndef forward(self, x):\n    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])\n") +
                           body,
                       {{"w1", torch::randn({4, 3, 3, 3})}, {"b1", torch::randn({4})}});
    ASSERT_TRUE(optimize(biased, opt).ok()) << body;
    auto kept = NodesOf(biased, "aten::conv2d");
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_FALSE(kept[0]->input(2)->type()->kind() == c10::TypeKind::NoneType) << body;
  }
}

TEST_F(MemoryFormatPassTest, AGlobalPoolWrittenAsAKeepdimReductionStaysInsideTheRegion) {
  // level2/44: conv, scale, mean over [2, 3] twice (keepdim). The region ends
  // after the means, whose [N, C, 1, 1] output is the same memory in either
  // layout: no full-size copy back to NCHW before them. The fusion group
  // reads the conv output channels_last and reduces it there.
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])
    y = torch.mean(y * 0.5, [2, 3], True)
    return torch.mean(y, [-1, -2], True)
)", {{"w1", torch::randn({8, 3, 3, 3})}, {"b1", torch::randn({8})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = {torch::randn({2, 3, 10, 10})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "channels_last");
  // The entry copy; then the bias and both means (PyTorch's frozen-graph
  // folding moved the scale into the conv's weights).
  ASSERT_EQ(rep->groups.size(), 2u) << rep->graph;
  EXPECT_EQ(rep->groups[1].group.summary, "add+mean+mean") << rep->graph;
  // Without groups (mode off), the one exit copy reads the last mean's
  // [2, 8, 1, 1] output (a free copy: already contiguous), not the activation.
  auto plain = original.clone();
  ASSERT_TRUE(Capture(plain, torch::randn({2, 3, 10, 10})).ok());
  const auto exits = NodesOf(plain, "aten::contiguous");
  ASSERT_EQ(exits.size(), 2u);  // the entry copy, then the exit
  EXPECT_EQ(FormatOf(exits[0]), static_cast<int64_t>(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(std::string(exits[1]->input(0)->node()->kind().toQualString()), "aten::mean");
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 10, 10});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
  // Not a global pool (H alone, or keepdim off): the region ends before it,
  // and the reduction reads the NCHW copy.
  for (const char* reduce : {"torch.mean(y, [2], True)", "torch.mean(y, [2, 3])"}) {
    auto partial = Make(std::string("\ndef forward(self, x):\n    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])\n"
                                    "    return ") + reduce + "\n",
                        {{"w1", torch::randn({8, 3, 3, 3})}, {"b1", torch::randn({8})}});
    auto partial_rep = Capture(partial, torch::randn({2, 3, 10, 10}));
    ASSERT_TRUE(partial_rep.ok()) << partial_rep.status().ToString();
    auto means = NodesOf(partial, "aten::mean");
    ASSERT_EQ(means.size(), 1u) << reduce;
    EXPECT_EQ(std::string(means[0]->input(0)->node()->kind().toQualString()), "aten::contiguous") << reduce;
  }
}

TEST_F(MemoryFormatPassTest, AKeepdimReductionOverTheChannelsStaysInsideTheRegion) {
  // level2/25: conv, min over the channels (keepdim), tanh; level2/43 and /58
  // take a logsumexp over dim 1 the same way. Their [N, 1, H, W] output is
  // the same memory in either layout: the exit copy reads it, not the
  // conv's full-size activation. Without keepdim, or over H alone, the
  // region ends before the reduction.
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  // The reduction of each model: whether it reads the activation through a copy.
  auto reduction_reads_a_copy = [](const torch::jit::Module& m) {
    for (const char* kind : {"aten::min", "aten::logsumexp", "aten::amax"}) {
      auto nodes = NodesOf(m, kind);
      if (!nodes.empty()) return std::string(nodes[0]->input(0)->node()->kind().toQualString()) == "aten::contiguous";
    }
    ADD_FAILURE() << "no reduction in the graph";
    return false;
  };
  for (const char* reduce : {"torch.tanh(torch.min(y, 1, True)[0])", "torch.tanh(torch.logsumexp(y, [1], True))",
                             "torch.tanh(torch.amax(y, [-3], True))"}) {
    auto original = Make(std::string("\ndef forward(self, x):\n    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])\n"
                                     "    return ") + reduce + "\n",
                         {{"w1", torch::randn({8, 3, 3, 3})}, {"b1", torch::randn({8})}});
    auto m = original.clone();
    auto rep = Capture(m, torch::randn({2, 3, 10, 10}));
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_EQ(rep->memory_format, "channels_last") << reduce;
    const auto copies = NodesOf(m, "aten::contiguous");
    ASSERT_EQ(copies.size(), 2u) << reduce << rep->graph;  // the entry copy, then the exit
    EXPECT_EQ(FormatOf(copies[0]), static_cast<int64_t>(at::MemoryFormat::ChannelsLast)) << reduce;
    // The region goes on through the tanh on [N, 1, H, W]; the exit copy reads it.
    EXPECT_EQ(std::string(copies[1]->input(0)->node()->kind().toQualString()), "aten::tanh") << reduce;
    EXPECT_FALSE(reduction_reads_a_copy(m)) << reduce << rep->graph;
    torch::NoGradGuard no_grad;
    const at::Tensor run = torch::randn({2, 3, 10, 10});
    const at::Tensor want = original.forward({run}).toTensor(), got = m.forward({run}).toTensor();
    EXPECT_EQ(got.sizes(), want.sizes()) << reduce;
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << reduce << ": " << (got - want).abs().max().item<double>();
  }
  for (const char* reduce : {"torch.min(y, 1)[0]", "torch.amax(y, [2], True)"}) {
    auto partial = Make(std::string("\ndef forward(self, x):\n    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])\n"
                                    "    return ") + reduce + "\n",
                        {{"w1", torch::randn({8, 3, 3, 3})}, {"b1", torch::randn({8})}});
    auto partial_rep = Capture(partial, torch::randn({2, 3, 10, 10}));
    ASSERT_TRUE(partial_rep.ok()) << reduce;
    EXPECT_TRUE(reduction_reads_a_copy(partial)) << reduce << partial_rep->graph;
  }
}

TEST_F(MemoryFormatPassTest, ACopyPyTorchMakesForFreeOrOfAViewStaysWithPyTorch) {
  // x.contiguous() of a contiguous value is free in eager, of a transpose a
  // strided gather the kernels do not serve: neither becomes a group op.
  auto m = Make(R"(
def forward(self, x):
    a = torch.relu(x).contiguous()
    b = torch.transpose(x, 1, 2).contiguous()
    return a, b
)", {});
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = {torch::randn({2, 3, 4})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(NodesOf(m, "aten::contiguous").size(), 2u) << rep->graph;
  std::string reasons;
  for (const auto& l : rep->left_out) reasons += l.kind + ": " + l.reason + "\n";
  EXPECT_NE(reasons.find("already in that memory format"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("strided view"), std::string::npos) << reasons;
}

TEST_F(MemoryFormatPassTest, Conv3dRegionGetsChannelsLast3dAndTheOutputKeepsEagerStrides) {
  auto original = Make(kConv3dRelu, {{"w1", torch::randn({4, 3, 3, 3, 3})}, {"b1", torch::randn({4})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(m, torch::randn({2, 3, 5, 6, 7}));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "channels_last");
  auto convs = NodesOf(m, "aten::conv3d");
  ASSERT_EQ(convs.size(), 1u);
  EXPECT_TRUE(ConstantTensor(convs[0]->input(1)).is_contiguous(at::MemoryFormat::ChannelsLast3d));
  auto conversions = NodesOf(m, "aten::contiguous");
  ASSERT_EQ(conversions.size(), 2u);
  EXPECT_EQ(FormatOf(conversions[0]), static_cast<int64_t>(at::MemoryFormat::ChannelsLast3d));
  // The relu runs in channels_last_3d; the graph's output is converted back.
  const auto graph = m.get_method("forward").graph();
  EXPECT_EQ(graph->outputs()[0]->node(), conversions[1]);
  EXPECT_EQ(FormatOf(conversions[1]), static_cast<int64_t>(at::MemoryFormat::Contiguous));

  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 5, 6, 7});
  at::Tensor want = original.forward({run}).toTensor();
  at::Tensor got = m.forward({run}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4));
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_EQ(got.strides(), want.strides());
}

TEST_F(MemoryFormatPassTest, ModelWithoutConvsIsUnchanged) {
  auto original = Make(kNoConv, {{"w1", torch::randn({6, 4})}, {"b1", torch::randn({6})}});
  auto contiguous = original.clone();
  auto forced = original.clone();
  const at::Tensor x = torch::randn({3, 4});
  setenv("DICE_MEMORY_FORMAT", "contiguous", 1);
  auto base = Capture(contiguous, x);
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(forced, x);
  ASSERT_TRUE(base.ok() && rep.ok());
  EXPECT_EQ(rep->memory_format, "contiguous");
  EXPECT_NE(rep->memory_format_reason.find("no conv region"), std::string::npos) << rep->memory_format_reason;
  // The same graph but for the module type's mangled name on its first line.
  auto body = [](const torch::jit::Module& m) {
    const std::string text = m.get_method("forward").graph()->toString();
    return text.substr(text.find('\n'));
  };
  EXPECT_EQ(body(forced), body(contiguous));
  EXPECT_TRUE(NodesOf(forced, "aten::contiguous").empty());
}

TEST_F(MemoryFormatPassTest, AutoWithoutGpuLeavesTheGraphAndSaysWhy) {
  auto m = ConvFlattenLinear();
  auto rep = Capture(m, torch::randn({2, 3, 8, 8}));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "contiguous");
  EXPECT_NE(rep->memory_format_reason.find("no CUDA example inputs"), std::string::npos) << rep->memory_format_reason;
  EXPECT_EQ(rep->memory_format_us, (std::pair<double, double>{0, 0}));
  EXPECT_TRUE(NodesOf(m, "aten::contiguous").empty());
  for (auto* conv : NodesOf(m, "aten::conv2d")) EXPECT_TRUE(ConstantTensor(conv->input(1)).is_contiguous());
}

TEST_F(MemoryFormatPassTest, ExplicitOptionWinsOverTheEnvironment) {
  auto m = ConvFlattenLinear();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  Options opt;
  opt.mode = Mode::kOff;
  opt.memory_format = MemoryFormat::kContiguous;
  opt.example_inputs = {torch::randn({2, 3, 8, 8})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->memory_format, "contiguous");
  EXPECT_TRUE(NodesOf(m, "aten::contiguous").empty());
}

TEST_F(MemoryFormatPassTest, UnknownEnvironmentValueWarnsAndReadsAsAuto) {
  auto m = ConvFlattenLinear();
  setenv("DICE_MEMORY_FORMAT", "nhwc", 1);
  auto rep = Capture(m, torch::randn({2, 3, 8, 8}));
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->warnings.size(), 1u);
  EXPECT_NE(rep->warnings[0].find("DICE_MEMORY_FORMAT"), std::string::npos) << rep->warnings[0];
  EXPECT_NE(rep->warnings[0].find("nhwc"), std::string::npos) << rep->warnings[0];
  EXPECT_EQ(rep->memory_format, "contiguous");
  EXPECT_FALSE(ParseMemoryFormat("nhwc").ok());
  for (MemoryFormat f : {MemoryFormat::kAuto, MemoryFormat::kContiguous, MemoryFormat::kChannelsLast})
    EXPECT_EQ(*ParseMemoryFormat(MemoryFormatName(f)), f);
}

TEST_F(MemoryFormatPassTest, InjectedFailureLeavesTheGraphUnchangedWithAWarningNamingThePass) {
  auto original = ConvFlattenLinear();
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  setenv("DICE_INJECT_CAPTURE_FAILURE", "memory_format", 1);
  Options opt;
  opt.mode = Mode::kObserve;
  opt.example_inputs = {torch::randn({2, 3, 8, 8})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->frozen);
  EXPECT_EQ(rep->memory_format, "contiguous");
  ASSERT_EQ(rep->warnings.size(), 1u);
  EXPECT_NE(rep->warnings[0].find("capture pass 'memory_format' failed"), std::string::npos) << rep->warnings[0];
  EXPECT_NE(rep->warnings[0].find("injected failure"), std::string::npos) << rep->warnings[0];
  EXPECT_TRUE(NodesOf(m, "aten::contiguous").empty());
  for (auto* conv : NodesOf(m, "aten::conv2d")) EXPECT_TRUE(ConstantTensor(conv->input(1)).is_contiguous());
  EXPECT_FALSE(rep->groups.empty());  // the fusion pass after it still ran
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 3, 8, 8});
  EXPECT_TRUE(torch::allclose(m.forward({run}).toTensor(), original.forward({run}).toTensor()));
}

TEST_F(MemoryFormatPassTest, ResidualBlockWithInPlaceOpsIsOneRegionWithOneConversionEachWay) {
  auto original = Make(kResidualInPlace, {{"w1", torch::randn({4, 4, 3, 3})}, {"w2", torch::randn({4, 4, 3, 3})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(m, torch::randn({2, 4, 6, 6}));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "channels_last") << rep->memory_format_reason;
  EXPECT_NE(rep->memory_format_reason.find("1 region(s), 2 conv(s), 1 entry and 1 exit"), std::string::npos)
      << rep->memory_format_reason;
  auto conversions = NodesOf(m, "aten::contiguous");
  ASSERT_EQ(conversions.size(), 2u);
  // The exit copy moves the pooled values (the global pool, now a mean: fusible_rewrites.h).
  EXPECT_EQ(std::string(conversions[1]->input(0)->node()->kind().toQualString()), "aten::mean");
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({2, 4, 6, 6});
  EXPECT_TRUE(torch::allclose(m.forward({run}).toTensor(), original.forward({run}).toTensor(), 1e-4, 1e-4));
}

TEST_F(MemoryFormatPassTest, ValueUsedInsideAndOutsideTheRegionIsCopiedOnceForTheOutside) {
  auto original = Make(kValueInsideAndOutside, {{"w1", torch::randn({4, 3, 3, 3})}, {"w2", torch::randn({2, 4, 3, 3})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(m, torch::randn({1, 3, 5, 5}));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->memory_format, "channels_last") << rep->memory_format_reason;
  auto convs = NodesOf(m, "aten::conv2d");
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(convs[1]->input(0), convs[0]->output());  // the second conv reads y in channels_last
  auto conversions = NodesOf(m, "aten::contiguous");
  ASSERT_EQ(conversions.size(), 3u);  // x in; y out to flatten; b out to the graph's output
  torch::NoGradGuard no_grad;
  const at::Tensor run = torch::randn({1, 3, 5, 5});
  auto want = original.forward({run}).toTuple();
  auto got = m.forward({run}).toTuple();
  for (size_t i = 0; i < 2; ++i) {
    const at::Tensor g = got->elements()[i].toTensor();
    const at::Tensor w = want->elements()[i].toTensor();
    EXPECT_TRUE(torch::allclose(g, w, 1e-4, 1e-4)) << i;
    EXPECT_EQ(g.strides(), w.strides()) << i;
  }
}

TEST_F(MemoryFormatPassTest, RegionIsSkippedWhenAValueItWouldCopyIsWrittenInPlace) {
  auto original = Make(kInputWrittenInPlace, {{"w1", torch::randn({4, 3, 3, 3})}, {"b1", torch::randn({4})}});
  auto m = original.clone();
  setenv("DICE_MEMORY_FORMAT", "channels_last", 1);
  auto rep = Capture(m, torch::randn({1, 3, 6, 6}));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->memory_format, "contiguous");
  EXPECT_NE(rep->memory_format_reason.find("written in place"), std::string::npos) << rep->memory_format_reason;
  EXPECT_TRUE(NodesOf(m, "aten::contiguous").empty());
}

TEST(MemoryFormatDecisionTest, ChannelsLastIsKeptOnlyWhenAtLeastTwoPercentFaster) {
  EXPECT_TRUE(KeepsChannelsLast(100.0, 50.0));
  EXPECT_TRUE(KeepsChannelsLast(100.0, 98.0));
  EXPECT_FALSE(KeepsChannelsLast(100.0, 98.5));  // 1.5% faster: within noise, stays contiguous
  EXPECT_FALSE(KeepsChannelsLast(100.0, 120.0));
  EXPECT_FALSE(KeepsChannelsLast(0.0, 50.0));    // not measured
  EXPECT_FALSE(KeepsChannelsLast(100.0, 0.0));
}

TEST(MemoryFormatDecisionTest, TimingWithoutACudaInputIsAnError) {
  auto graph = std::make_shared<torch::jit::Graph>();
  auto times = TimeGraphsRoundRobin(graph, graph, {torch::randn({2, 2})}, 1, 1);
  ASSERT_FALSE(times.ok());
  EXPECT_EQ(times.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(times.status().message().find("no CUDA tensor"), std::string::npos) << times.status().message();
}

}  // namespace
}  // namespace dice::torch_ext
