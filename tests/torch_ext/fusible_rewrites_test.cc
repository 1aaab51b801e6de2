// The capture rewrites into fusible ops (fusible_rewrites.h, issue 18): an
// inference batch_norm that torch.jit.freeze cannot fold becomes a
// per-channel multiply-add inside its neighbours' fusion group, in-place
// activations become functional, and a global average pool a mean, so that
// groups can take them; the model's values stay eager's.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/torch.h>

#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

using Params = std::vector<std::pair<std::string, at::Tensor>>;

torch::jit::Module Make(const std::string& source, const Params& params) {
  torch::jit::Module m("TestModule");
  for (const auto& [name, t] : params) m.register_parameter(name, t, /*is_buffer=*/false);
  m.define(source);
  return m;
}

int Count(const torch::jit::Module& m, const char* kind) {
  int n = 0;
  for (const torch::jit::Node* node : m.get_method("forward").graph()->nodes())
    n += std::string(node->kind().toQualString()) == kind;
  return n;
}

Params BatchNormParams(int64_t c) {
  return {{"bn_w", torch::rand({c}) + 0.5},
          {"bn_b", torch::randn({c})},
          {"bn_m", torch::randn({c})},
          {"bn_v", torch::rand({c}) + 0.1}};
}

// DenseNet's transition layer: BN -> ReLU -> conv -> avg_pool.
constexpr const char* kPreActivation = R"(
def forward(self, x):
    y = torch.batch_norm(x, self.bn_w, self.bn_b, self.bn_m, self.bn_v, False, 0.1, 1e-5, False)
    y = torch.relu(y)
    y = torch.conv2d(y, self.w, None, [1, 1], [0, 0])
    return torch.avg_pool2d(y, [2, 2], [2, 2])
)";

class FusibleRewritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DICE_MODE");
    unsetenv("DICE_INJECT_CAPTURE_FAILURE");
    setenv("DICE_MEMORY_FORMAT", "contiguous", 1);
    EnsureRegistered();
    torch::manual_seed(0);
  }
  void TearDown() override {
    unsetenv("DICE_MEMORY_FORMAT");
    unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  }
  static Expected<OptimizeReport> Observe(torch::jit::Module& m, std::vector<c10::IValue> in) {
    Options opt;
    opt.mode = Mode::kObserve;
    opt.example_inputs = std::move(in);
    return optimize(m, opt);
  }
  static void ExpectSameOutputs(torch::jit::Module& got, torch::jit::Module& want, const at::Tensor& x) {
    torch::NoGradGuard no_grad;
    const at::Tensor a = got.forward({x}).toTensor(), b = want.forward({x}).toTensor();
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5)) << (a - b).abs().max().item<double>();
  }
};

TEST_F(FusibleRewritesTest, ABatchNormBeforeAnActivationFusesWithItAsAMultiplyAdd) {
  Params p = BatchNormParams(6);
  p.emplace_back("w", torch::randn({4, 6, 1, 1}));
  auto original = Make(kPreActivation, p);
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 6, 8, 8})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->batch_norms_folded, 1);
  EXPECT_EQ(Count(m, "aten::batch_norm"), 0) << rep->graph;
  // The BN before the conv is one group with the activation; the 2x2 pool after
  // the conv is one of its own (a windowed pool is an IR op).
  ASSERT_EQ(rep->groups.size(), 2u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "mul+add+relu");
  EXPECT_EQ(rep->groups[1].group.summary, "avg_pool");
  ExpectSameOutputs(m, original, torch::randn({2, 6, 8, 8}));
}

TEST_F(FusibleRewritesTest, ABatchNormAfterAnActivationWithoutWeightOrBiasFolds) {
  // KernelBench level-2 task 52's shape: conv -> activation -> BN (freeze cannot fold it).
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [0, 0])
    y = torch.tanh(y) * y
    return torch.batch_norm(y, None, None, self.bn_m, self.bn_v, False, 0.1, 1e-3, False)
)", {{"w", torch::randn({5, 3, 3, 3})}, {"b", torch::randn({5})}, {"bn_m", torch::randn({5})},
     {"bn_v", torch::rand({5}) + 0.1}});
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 3, 7, 7})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->batch_norms_folded, 1);
  EXPECT_EQ(Count(m, "aten::batch_norm"), 0) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  // The conv has two readers, both fused: its bias moves into the group too
  // (conv_bias_pass.h; cuDNN would add it in a pass of its own).
  EXPECT_EQ(rep->groups[0].group.summary, "add+tanh+mul+mul+add");
  ExpectSameOutputs(m, original, torch::randn({2, 3, 7, 7}));
}

TEST_F(FusibleRewritesTest, AConvsBatchNormIsFoldedIntoItAsPythonsFreezeDoesElseFusedAfterIt) {
  // torch.jit.freeze (Python) folds conv -> BN into the conv's weights; the
  // C++ freeze_module alone does not, so optimize() runs PyTorch's folding too.
  Params p = BatchNormParams(4);
  p.emplace_back("w", torch::randn({4, 3, 3, 3}));
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, None, [1, 1], [1, 1])
    y = torch.batch_norm(y, self.bn_w, self.bn_b, self.bn_m, self.bn_v, False, 0.1, 1e-5, False)
    return torch.relu(y)
)", p);
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 3, 6, 6})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->warnings.empty()) << rep->warnings[0];
  EXPECT_EQ(rep->batch_norms_folded, 0);
  EXPECT_EQ(Count(m, "aten::batch_norm"), 0) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "add+relu");  // the folded bias, moved into the epilogue
  ExpectSameOutputs(m, original, torch::randn({2, 3, 6, 6}));
  // PyTorch's folding fails (as its conv folding asserts on some models):
  // frozen without it, said once, and the batch_norm fuses after the conv.
  auto unfolded = original.clone();
  setenv("DICE_INJECT_CAPTURE_FAILURE", "frozen_folding", 1);
  rep = Observe(unfolded, {torch::randn({2, 3, 6, 6})});
  unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->frozen);
  ASSERT_EQ(rep->warnings.size(), 1u);
  EXPECT_NE(rep->warnings[0].find("(OptimizeFrozenGraph) failed: injected failure"), std::string::npos) << rep->warnings[0];
  EXPECT_EQ(rep->batch_norms_folded, 1);
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "mul+add+relu");
  ExpectSameOutputs(unfolded, original, torch::randn({2, 3, 6, 6}));
}

TEST_F(FusibleRewritesTest, ALoneBatchNormOrOneInTrainingModeStaysWithPyTorch) {
  // Its input is the graph's and its reader (flatten) is no group op: one cuDNN pass already.
  auto lone = Make(R"(
def forward(self, x):
    y = torch.batch_norm(x, self.bn_w, self.bn_b, self.bn_m, self.bn_v, False, 0.1, 1e-5, False)
    return torch.flatten(y, 1)
)", BatchNormParams(3));
  auto rep = Observe(lone, {torch::randn({2, 3, 4, 4})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->batch_norms_folded, 0);
  EXPECT_EQ(Count(lone, "aten::batch_norm"), 1);
  // training = True normalises by the batch's own statistics: not a constant affine.
  auto training = Make(R"(
def forward(self, x):
    y = torch.batch_norm(x, self.bn_w, self.bn_b, self.bn_m, self.bn_v, True, 0.1, 1e-5, False)
    return torch.relu(y)
)", BatchNormParams(3));
  rep = Observe(training, {torch::randn({2, 3, 4, 4})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->batch_norms_folded, 0);
  EXPECT_EQ(Count(training, "aten::batch_norm"), 1);
}

TEST_F(FusibleRewritesTest, InPlaceActivationsBecomeFunctionalAndJoinTheConvEpilogue) {
  // torchvision's residual block: conv -> relu_, z += y, relu_.
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1])
    y = torch.relu_(y)
    z = torch.conv2d(y, self.w2, self.b2, [1, 1], [1, 1])
    z += y
    return torch.relu_(z)
)", {{"w1", torch::randn({4, 4, 3, 3})}, {"b1", torch::randn({4})},
     {"w2", torch::randn({4, 4, 3, 3})}, {"b2", torch::randn({4})}});
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 4, 6, 6})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->functional);
  EXPECT_EQ(Count(m, "aten::relu_") + Count(m, "aten::add_"), 0) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 2u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "add+relu");
  EXPECT_EQ(rep->groups[1].group.summary, "add+add+relu");
  ExpectSameOutputs(m, original, torch::randn({2, 4, 6, 6}));
}

TEST_F(FusibleRewritesTest, AGlobalAveragePoolIsAMeanThatFusesWithTheActivationBeforeIt) {
  // KernelBench level-2 task 67's shape: conv -> GELU -> global average pool.
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [0, 0])
    y = torch.gelu(y)
    y = torch.adaptive_avg_pool2d(y, [1, 1])
    z = torch.adaptive_avg_pool2d(y, [2, 2])
    return torch.flatten(y, 1), z
)", {{"w", torch::randn({6, 3, 3, 3})}, {"b", torch::randn({6})}});
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 3, 9, 9})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->global_pools_as_mean, 1);  // the [2, 2] pool is not a mean over all of H, W
  EXPECT_EQ(Count(m, "aten::adaptive_avg_pool2d"), 1) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "add+gelu+mean");  // the conv's bias leads (conv_bias_pass.h)
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({2, 3, 9, 9});
  auto got = m.forward({x}).toTuple(), want = original.forward({x}).toTuple();
  for (size_t i = 0; i < 2; ++i) {
    const at::Tensor a = got->elements()[i].toTensor(), b = want->elements()[i].toTensor();
    EXPECT_EQ(a.sizes(), b.sizes());
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5)) << i << ": " << (a - b).abs().max().item<double>();
  }
}

TEST_F(FusibleRewritesTest, ACloneNobodyWritesIsItsInputSoTheConvBiasJoinsTheEpilogue) {
  // KernelBench level2/20: conv -> orig = x.clone().detach() -> + bias, + orig,
  // * orig, + orig. Both copies go; every reader of the conv then fuses, so
  // the conv's own bias moves into the one epilogue group (conv_bias_pass.h).
  auto original = Make(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [1, 1])
    orig = y.clone().detach()
    y = y + self.bias
    y = y + orig
    y = y * orig
    return y + orig
)", {{"w", torch::randn({4, 3, 3, 3})}, {"b", torch::randn({4})}, {"bias", torch::randn({4, 1, 1})}});
  auto m = original.clone();
  auto rep = Observe(m, {torch::randn({2, 3, 8, 8})});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_GE(rep->identity_copies_removed, 1);  // the clone (freezing may have dropped the detach already)
  EXPECT_EQ(Count(m, "aten::clone") + Count(m, "aten::detach"), 0) << rep->graph;
  ASSERT_EQ(rep->groups.size(), 1u) << rep->graph;
  EXPECT_EQ(rep->groups[0].group.summary, "add+add+add+mul+add");
  ASSERT_EQ(rep->groups[0].group.graph.inputs.size(), 3u) << rep->groups[0].group.canonical;  // conv out, two biases
  ExpectSameOutputs(m, original, torch::randn({2, 3, 8, 8}));
}

TEST_F(FusibleRewritesTest, ACopyThatCanBeToldFromItsInputStays) {
  // The clone holds x's value from before the in-place write to the graph's
  // input (which stays in place); a returned clone is the caller's own tensor.
  auto m = Make(R"(
def forward(self, x):
    c = x.clone()
    x.relu_()
    d = x * 2.0
    return c + x, d.clone(), d
)", {});
  at::Tensor x = torch::randn({3, 5});
  const at::Tensor x0 = x.clone();
  auto rep = Observe(m, {x.clone()});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->identity_copies_removed, 0);
  EXPECT_EQ(Count(m, "aten::clone"), 2) << rep->graph;
  torch::NoGradGuard no_grad;
  auto out = m.forward({x}).toTuple();
  EXPECT_TRUE(torch::equal(out->elements()[0].toTensor(), x0 + torch::relu(x0)));
  EXPECT_FALSE(out->elements()[1].toTensor().is_same(out->elements()[2].toTensor()));
}

TEST_F(FusibleRewritesTest, AnUnfrozenModuleKeepsItsDetach) {
  // Not frozen, the module may be trained: detach stops gradients there, so
  // it stays; the clone (a copy nobody writes) still goes.
  auto m = Make(R"(
def forward(self, x):
    y = x.detach() * 2.0
    c = x.clone()
    return y + c
)", {});
  Options opt;
  opt.mode = Mode::kObserve;
  opt.freeze = false;
  opt.example_inputs = {torch::randn({3, 5})};
  auto rep = optimize(m, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_FALSE(rep->frozen);
  EXPECT_EQ(rep->identity_copies_removed, 1);
  EXPECT_EQ(Count(m, "aten::detach"), 1) << rep->graph;
  EXPECT_EQ(Count(m, "aten::clone"), 0) << rep->graph;
}

TEST_F(FusibleRewritesTest, AWriteToTheGraphsInputStaysInPlace) {
  // The caller sees x written: RemoveTensorMutation's alias analysis keeps it.
  auto m = Make(R"(
def forward(self, x):
    y = x * 2.0
    x.relu_()
    return y + x
)", {});
  at::Tensor x = torch::randn({3, 5});
  const at::Tensor want = torch::relu(x.clone());
  auto rep = Observe(m, {x.clone()});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(Count(m, "aten::relu_"), 1) << rep->graph;
  torch::NoGradGuard no_grad;
  m.forward({x});
  EXPECT_TRUE(torch::equal(x, want));
}

}  // namespace
}  // namespace dice::torch_ext
