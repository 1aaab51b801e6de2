// The SDPA backend step (issue 18 item 3) on the CPU: which backends a
// scaled_dot_product_attention call can be pinned to and why not, that a
// pinned graph keeps the dispatcher's values, that a backend that fails or
// disagrees is the candidate's error and not the step's, and that without a
// CUDA input nothing is measured. The measured choice itself runs in
// attention_gpu_test.cc.
#include "../../torch_ext/src/sdpa_backend.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "../../torch_ext/src/attention_pass.h"

namespace dice::torch_ext {
namespace {

// One SDPA call on [2, 4, 16, 8] q/k/v of `dtype` ("Float", "BFloat16"),
// with `mask` (an IR value name or "%none"), dropout `dropout`.
std::shared_ptr<torch::jit::Graph> SdpaGraph(const std::string& dtype, const std::string& mask_decl,
                                             const std::string& mask, const std::string& dropout = "0.",
                                             const std::string& shape = "2, 4, 16, 8",
                                             const std::string& strides = "512, 128, 8, 1") {
  const std::string t = dtype + "(" + shape + ", strides=[" + strides + "], requires_grad=0, device=cpu)";
  const std::string ir = "graph(%q : " + t + ", %k : " + t + ", %v : " + t + mask_decl + R"IR():
  %none : NoneType = prim::Constant()
  %p : float = prim::Constant[value=)IR" +
                         dropout + R"IR(]()
  %f : bool = prim::Constant[value=0]()
  %y : )IR" + t + " = aten::scaled_dot_product_attention(%q, %k, %v, " +
                         mask + R"IR(, %p, %f, %none, %f)
  return (%y)
)IR";
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

std::vector<c10::IValue> Qkv(at::ScalarType dtype, std::vector<int64_t> shape = {2, 4, 16, 8}) {
  torch::manual_seed(0);
  auto o = torch::TensorOptions().dtype(dtype);
  return {torch::randn(shape, o), torch::randn(shape, o), torch::randn(shape, o)};
}

int Count(const torch::jit::Graph& g, const char* aten_name) {
  int n = 0;
  for (const torch::jit::Node* node : g.nodes()) n += node->kind() == c10::Symbol::aten(aten_name) ? 1 : 0;
  return n;
}

bool Contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(SdpaBackend, MathPinnedKeepsTheDispatchersValues) {
  auto g = SdpaGraph("Float", "", "%none");
  auto pinned = g->copy();
  auto n = PinSdpaBackend(pinned, SdpaBackend::kMath);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(CountSdpaCalls(*pinned), 0);
  EXPECT_EQ(Count(*pinned, "_scaled_dot_product_attention_math"), 1);
  pinned->lint();
  const auto inputs = Qkv(at::kFloat);
  Status same = CheckForwardAgainstReference(g, pinned, inputs);
  EXPECT_TRUE(same.ok()) << same.ToString();
}

TEST(SdpaBackend, DispatchPinsNothing) {
  auto g = SdpaGraph("Float", "", "%none");
  auto n = PinSdpaBackend(g, SdpaBackend::kDispatch);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(CountSdpaCalls(*g), 1);
}

TEST(SdpaBackend, EachBackendRefusesWhatItCannotTakeAndLeavesTheGraph) {
  struct Case {
    std::shared_ptr<torch::jit::Graph> g;
    SdpaBackend backend;
    const char* why;
  };
  const std::string bool_mask = ", %m : Bool(16, 16, strides=[16, 1], requires_grad=0, device=cpu)";
  const std::string add_mask = ", %m : Float(16, 16, strides=[16, 1], requires_grad=0, device=cpu)";
  const std::vector<Case> cases = {
      {SdpaGraph("BFloat16", add_mask, "%m"), SdpaBackend::kFlash, "it has a mask"},
      {SdpaGraph("Float", bool_mask, "%m"), SdpaBackend::kEfficient, "not an additive bias"},
      {SdpaGraph("Float", bool_mask, "%m"), SdpaBackend::kCudnn, "not an additive bias"},
      {SdpaGraph("Float", "", "%none"), SdpaBackend::kFlash, "not float16 or bfloat16"},
      {SdpaGraph("Float", "", "%none"), SdpaBackend::kCudnn, "not float16 or bfloat16"},
      {SdpaGraph("Float", "", "%none", "0.", "8, 16, 8", "128, 8, 1"), SdpaBackend::kEfficient, "rank 4"},
      {SdpaGraph("Float", "", "%none", "0.1"), SdpaBackend::kMath, "dropout_p is not the constant 0"},
  };
  for (const Case& c : cases) {
    auto n = PinSdpaBackend(c.g, c.backend);
    ASSERT_FALSE(n.ok()) << SdpaBackendName(c.backend) << " pinned " << *n << " call(s)";
    EXPECT_TRUE(Contains(n.status().message(), c.why)) << n.status().message();
    EXPECT_TRUE(Contains(n.status().message(), SdpaBackendName(c.backend))) << n.status().message();
    EXPECT_EQ(CountSdpaCalls(*c.g), 1) << "a refused pin changed the graph";
  }
  // An additive bias of the query's dtype fits the efficient backend.
  auto g = SdpaGraph("Float", add_mask, "%m");
  auto n = PinSdpaBackend(g, SdpaBackend::kEfficient);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(Count(*g, "_scaled_dot_product_efficient_attention"), 1);
}

TEST(SdpaBackend, ABackendThatCannotRunHereIsTheCandidatesErrorWithPyTorchsCause) {
  // Flash has no CPU kernel for this op: the check run fails, naming it.
  auto g = SdpaGraph("BFloat16", "", "%none");
  auto pinned = g->copy();
  ASSERT_TRUE(PinSdpaBackend(pinned, SdpaBackend::kFlash).ok());
  Status st = CheckForwardAgainstReference(g, pinned, Qkv(at::kBFloat16));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "the forward failed")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "Could not run 'aten::_scaled_dot_product_flash_attention'")) << st.message();
}

TEST(SdpaBackend, AForwardThatDisagreesIsNamedByItsOutput) {
  auto g = SdpaGraph("Float", "", "%none");
  auto wrong = g->copy();
  // y * 1.001: off by 1e-3 relative, ten times the float32 limit.
  torch::jit::Value* y = wrong->outputs()[0];
  torch::jit::WithInsertPoint guard(wrong->return_node());
  torch::jit::Value* scaled = wrong->insert(c10::aten::mul, {y, 1.001});
  wrong->return_node()->replaceInput(0, scaled);
  Status st = CheckForwardAgainstReference(g, wrong, Qkv(at::kFloat));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "output 0")) << st.message();
  // The same forward agrees with itself.
  EXPECT_TRUE(CheckForwardAgainstReference(g, g->copy(), Qkv(at::kFloat)).ok());
}

TEST(SdpaBackend, WithoutCudaInputsNothingIsMeasuredOrPinned) {
  auto g = SdpaGraph("Float", "", "%none");
  auto out = ChooseSdpaBackend(g, Qkv(at::kFloat));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->backend, SdpaBackend::kDispatch);
  EXPECT_TRUE(Contains(out->reason, "not measured (no CUDA example inputs)")) << out->reason;
  EXPECT_EQ(CountSdpaCalls(*g), 1);
  ASSERT_EQ(out->candidates.size(), 1u);
  EXPECT_EQ(out->candidates[0].backend, "dispatch");
}

TEST(SdpaBackend, TheKeepRuleAndTheNames) {
  EXPECT_TRUE(KeepsPinnedBackend(100.0, 98.0));
  EXPECT_FALSE(KeepsPinnedBackend(100.0, 98.5));
  EXPECT_FALSE(KeepsPinnedBackend(0.0, 50.0));   // dispatch not timed
  EXPECT_FALSE(KeepsPinnedBackend(100.0, 0.0));  // pinned not timed
  EXPECT_STREQ(SdpaBackendName(SdpaBackend::kDispatch), "dispatch");
  EXPECT_STREQ(SdpaBackendName(SdpaBackend::kFlash), "flash");
  EXPECT_STREQ(SdpaBackendName(SdpaBackend::kEfficient), "efficient");
  EXPECT_STREQ(SdpaBackendName(SdpaBackend::kCudnn), "cudnn");
  EXPECT_STREQ(SdpaBackendName(SdpaBackend::kMath), "math");
}

}  // namespace
}  // namespace dice::torch_ext
