// The conv-algorithm capture pass (issue 18 item 2) on the CPU: which convs
// become aten::_convolution with benchmark = true, that the values stay
// eager's, what it leaves and why, the mode switch, and that a failure
// leaves the model as it was. The measured decision runs in
// conv_algo_gpu_test.cc.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "../../torch_ext/src/conv_algo_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

// A conv2d, a conv_transpose2d and a conv1d (on a view), each with an int
// padding, and a conv2d with padding="same".
constexpr const char* kConvs = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [1, 1])
    z = torch.conv_transpose2d(torch.relu(y), self.wt, self.bt, [2, 2], [1, 1], [1, 1])
    s = torch.conv2d(x, self.w, self.b, [1, 1], "same")
    u = torch.conv1d(x.flatten(2), self.w1, None, [1], [0])
    return z, s, u
)";

torch::jit::Module MakeConvs() {
  torch::manual_seed(0);
  torch::jit::Module m("Convs");
  m.register_parameter("w", torch::randn({8, 4, 3, 3}) * 0.1, false);
  m.register_parameter("b", torch::randn({8}), false);
  m.register_parameter("wt", torch::randn({8, 6, 3, 3}) * 0.1, false);
  m.register_parameter("bt", torch::randn({6}), false);
  m.register_parameter("w1", torch::randn({5, 4, 3}) * 0.1, false);
  m.define(kConvs);
  return m;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// optimize() with the capture passes only (no fusion group), DICE_CONV_ALGORITHM = `mode`.
OptimizeReport OptimizeWith(torch::jit::Module& m, const std::vector<c10::IValue>& inputs, const char* mode) {
  setenv("DICE_CONV_ALGORITHM", mode, 1);
  Options o;
  o.mode = Mode::kOff;
  o.example_inputs = inputs;
  auto report = optimize(m, o);
  unsetenv("DICE_CONV_ALGORITHM");
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? *report : OptimizeReport{};
}

TEST(ConvAlgoPass, BenchmarkMakesEveryIntPaddingConvASearchingConvolutionWithEagersValues) {
  torch::jit::Module m = MakeConvs();
  m.eval();
  const std::vector<c10::IValue> inputs = {torch::randn({2, 4, 10, 10})};
  const auto before = m.forward(inputs).toTuple()->elements();
  const OptimizeReport report = OptimizeWith(m, inputs, "benchmark");
  EXPECT_EQ(report.conv_algorithm, "benchmark") << report.conv_algorithm_reason;
  EXPECT_NE(report.conv_algorithm_reason.find("benchmark requested (3 conv(s))"), std::string::npos)
      << report.conv_algorithm_reason;
  EXPECT_EQ(report.conv_algorithm_us.first, 0.0);  // forced: not timed
  // Three convs rewritten; the "same" conv stays aten::conv2d.
  EXPECT_EQ(Count(report.graph, "aten::_convolution("), 3) << report.graph;
  EXPECT_EQ(Count(report.graph, "aten::conv2d("), 1) << report.graph;
  EXPECT_EQ(Count(report.graph, "aten::conv_transpose2d("), 0) << report.graph;
  EXPECT_EQ(Count(report.graph, "aten::conv1d("), 0) << report.graph;
  const auto after = m.forward(inputs).toTuple()->elements();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    // The conv-bias pass moves a bias after its conv (rounding may differ in the last bit).
    EXPECT_TRUE(torch::allclose(after[i].toTensor(), before[i].toTensor(), 1e-5, 1e-6)) << "output " << i;
  }
}

TEST(ConvAlgoPass, AutoWithoutCudaInputsKeepsTheHeuristicsAndSaysSo) {
  torch::jit::Module m = MakeConvs();
  const OptimizeReport report = OptimizeWith(m, {torch::randn({2, 4, 10, 10})}, "auto");
  EXPECT_EQ(report.conv_algorithm, "heuristic");
  EXPECT_NE(report.conv_algorithm_reason.find("not measured (no CUDA example inputs)"), std::string::npos)
      << report.conv_algorithm_reason;
  EXPECT_EQ(Count(report.graph, "aten::_convolution("), 0) << report.graph;
}

TEST(ConvAlgoPass, HeuristicAndAnUnknownModeLeaveTheConvs) {
  torch::jit::Module m = MakeConvs();
  OptimizeReport report = OptimizeWith(m, {torch::randn({2, 4, 10, 10})}, "heuristic");
  EXPECT_EQ(report.conv_algorithm_reason, "heuristic requested");
  EXPECT_EQ(Count(report.graph, "aten::_convolution("), 0) << report.graph;
  torch::jit::Module m2 = MakeConvs();
  report = OptimizeWith(m2, {torch::randn({2, 4, 10, 10})}, "fastest");
  bool warned = false;
  for (const std::string& w : report.warnings) warned = warned || w.find("DICE_CONV_ALGORITHM: unknown") == 0;
  EXPECT_TRUE(warned) << "no warning names the unknown value";
  EXPECT_EQ(report.conv_algorithm, "heuristic");  // read as auto: not measured on the CPU
}

TEST(ConvAlgoPass, AnInjectedFailureLeavesTheConvsWithAWarningNamingThePass) {
  torch::jit::Module m = MakeConvs();
  m.eval();
  const std::vector<c10::IValue> inputs = {torch::randn({2, 4, 10, 10})};
  setenv("DICE_INJECT_CAPTURE_FAILURE", "conv_algorithm", 1);
  const OptimizeReport report = OptimizeWith(m, inputs, "benchmark");
  unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  EXPECT_EQ(report.conv_algorithm, "heuristic");
  bool warned = false;
  for (const std::string& w : report.warnings) warned = warned || w.find("capture pass 'conv_algorithm' failed") == 0;
  EXPECT_TRUE(warned);
  EXPECT_EQ(Count(report.graph, "aten::_convolution("), 0) << report.graph;
  EXPECT_NO_THROW(m.forward(inputs));
}

TEST(ConvAlgoPass, AnExistingConvolutionKeepsItsOwnFlagsAndOnlyAsksForTheSearch) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Float(2, 4, 10, 10, strides=[400, 100, 10, 1], requires_grad=0, device=cpu),
      %w : Float(8, 4, 3, 3, strides=[36, 9, 3, 1], requires_grad=0, device=cpu)):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %l1 : int[] = prim::Constant[value=[1, 1]]()
  %l0 : int[] = prim::Constant[value=[0, 0]]()
  %f : bool = prim::Constant[value=0]()
  %t : bool = prim::Constant[value=1]()
  %y : Float(2, 8, 10, 10, strides=[800, 100, 10, 1], requires_grad=0, device=cpu) = aten::_convolution(%x, %w, %none, %l1, %l1, %l1, %f, %l0, %one, %f, %t, %f, %f)
  return (%y)
)IR",
                      g.get());
  EXPECT_EQ(AskCudnnToSearch(g), 1);
  const torch::jit::Node* conv = nullptr;
  for (const torch::jit::Node* n : g->nodes()) {
    if (n->kind() == c10::Symbol::aten("_convolution")) conv = n;
  }
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(torch::jit::toIValue(conv->input(9))->toBool(), true);    // benchmark
  EXPECT_EQ(torch::jit::toIValue(conv->input(10))->toBool(), true);   // its own deterministic
  EXPECT_EQ(torch::jit::toIValue(conv->input(11))->toBool(), false);  // its own cudnn_enabled
  EXPECT_EQ(torch::jit::toIValue(conv->input(12))->toBool(), false);  // its own allow_tf32
}

TEST(ConvAlgoPass, ParseAndTheTimingRule) {
  EXPECT_EQ(*ParseConvAlgorithm("auto"), ConvAlgorithm::kAuto);
  EXPECT_EQ(*ParseConvAlgorithm("heuristic"), ConvAlgorithm::kHeuristic);
  EXPECT_EQ(*ParseConvAlgorithm("benchmark"), ConvAlgorithm::kBenchmark);
  auto bad = ParseConvAlgorithm("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fast'"), std::string::npos);
  EXPECT_TRUE(KeepsCudnnSearch(100.0, 98.0));
  EXPECT_FALSE(KeepsCudnnSearch(100.0, 98.5));
  EXPECT_FALSE(KeepsCudnnSearch(0.0, 50.0));
  EXPECT_FALSE(KeepsCudnnSearch(100.0, 0.0));
}

}  // namespace
}  // namespace dice::torch_ext
