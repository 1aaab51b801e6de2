// The attention capture pass (issue 18 item 3) on the CPU: which chains
// optimize() replaces by aten::scaled_dot_product_attention, which it leaves
// and why, and that the model's outputs keep eager's values.
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/torch.h>

#include "../../torch_ext/src/attention_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

// minGPT's causal self-attention core: scale, then a causal bool mask from a
// buffer sliced to the sequence length, softmax, eval dropout, matmul.
constexpr const char* kCausal = R"(
def forward(self, q, k, v):
    T = q.size(2)
    att = torch.matmul(q, k.transpose(-2, -1)) * 0.25
    att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))
    att = torch.softmax(att, -1)
    att = torch.dropout(att, 0.1, False)
    return torch.matmul(att, v)
)";

// Scale by division, an additive float mask, transpose(-1, -2), rank 3.
constexpr const char* kAdditive = R"(
def forward(self, q, k, v):
    s = torch.matmul(q, k.transpose(-1, -2)) / 8.0
    p = torch.softmax(s + self.bias, -1)
    return torch.matmul(p, v)
)";

// The attention weights are returned as well: the softmax output has a
// second use, so the chain must stay.
constexpr const char* kWeightsReturned = R"(
def forward(self, q, k, v):
    p = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 0.25, -1)
    return torch.matmul(p, v), p
)";

// -1e9 instead of -inf: SDPA's bool mask would mean -inf.
constexpr const char* kFiniteFill = R"(
def forward(self, q, k, v):
    T = q.size(2)
    att = torch.matmul(q, k.transpose(-2, -1)) * 0.25
    att = att.masked_fill(self.mask[:, :, :T, :T] == 0, -1000000000.0)
    return torch.matmul(torch.softmax(att, -1), v)
)";

torch::jit::Module Make(const std::string& source, const std::vector<std::pair<std::string, at::Tensor>>& buffers) {
  torch::jit::Module m("TestModule");
  for (const auto& [name, t] : buffers) m.register_buffer(name, t);
  m.define(source);
  return m;
}

at::Tensor CausalMask(int64_t t) { return torch::tril(torch::ones({t, t})).view({1, 1, t, t}); }

std::vector<c10::IValue> Qkv(std::vector<int64_t> shape) {
  torch::manual_seed(0);
  return {torch::randn(shape), torch::randn(shape), torch::randn(shape)};
}

Options SdpaOptions(const std::vector<c10::IValue>& inputs, AttentionMode mode) {
  Options o;
  o.mode = Mode::kOff;  // the capture passes run; no fusion group is inserted
  o.example_inputs = inputs;
  o.attention = mode;
  return o;
}

// Runs `m` before and after optimize() on the same inputs; returns the report.
OptimizeReport OptimizeAndCompare(torch::jit::Module m, const std::vector<c10::IValue>& inputs, AttentionMode mode) {
  m.eval();
  const c10::IValue before = m.forward(inputs);
  auto report = optimize(m, SdpaOptions(inputs, mode));
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return {};
  const c10::IValue after = m.forward(inputs);
  auto first = [](const c10::IValue& v) { return v.isTuple() ? v.toTupleRef().elements()[0].toTensor() : v.toTensor(); };
  EXPECT_TRUE(torch::allclose(first(before), first(after), 1e-5, 1e-5))
      << "max abs diff " << (first(before) - first(after)).abs().max().item<float>();
  return *report;
}

bool Contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(AttentionPass, CausalMaskedChainBecomesOneIsCausalSdpaCallWithTheSameValues) {
  auto report = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "sdpa") << report.attention_reason;
  EXPECT_TRUE(Contains(report.attention_reason, "1 chain(s), 1 masked, 1 of them causal")) << report.attention_reason;
  EXPECT_TRUE(Contains(report.graph, "aten::scaled_dot_product_attention")) << report.graph;
  // No mask is built any more: is_causal = (L == S) replaces the sliced buffer.
  EXPECT_FALSE(Contains(report.graph, "aten::logical_not")) << report.graph;
  EXPECT_FALSE(Contains(report.graph, "aten::slice")) << report.graph;
  EXPECT_FALSE(Contains(report.graph, "aten::softmax")) << report.graph;
  EXPECT_FALSE(Contains(report.graph, "aten::masked_fill")) << report.graph;
  EXPECT_EQ(report.attention_us.first, 0.0);  // forced: not timed
}

TEST(AttentionPass, AnAddedCausalBiasBecomesIsCausal) {
  // GPT-2's form (bench/tasks/gpt2_block.py): scores * c + bias[:T, :T],
  // bias = full((n, n), -inf).triu(1).
  constexpr const char* kBias = R"(
def forward(self, q, k, v):
    T = q.size(2)
    s = torch.matmul(q, k.transpose(-2, -1)) * 0.25 + self.bias[:T, :T]
    return torch.matmul(torch.softmax(s, -1), v)
)";
  at::Tensor bias = torch::full({16, 16}, -std::numeric_limits<float>::infinity()).triu(1);
  auto report = OptimizeAndCompare(Make(kBias, {{"bias", bias}}), Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  EXPECT_TRUE(Contains(report.attention_reason, "1 masked, 1 of them causal")) << report.attention_reason;
  EXPECT_FALSE(Contains(report.graph, "aten::slice")) << report.graph;
  // A bias that is not causal (one more -inf) stays an added mask.
  at::Tensor other = bias.clone();
  other.index_put_({5, 0}, -std::numeric_limits<float>::infinity());
  report = OptimizeAndCompare(Make(kBias, {{"bias", other}}), Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  EXPECT_TRUE(Contains(report.attention_reason, "1 masked, 0 of them causal")) << report.attention_reason;
}

TEST(AttentionPass, ABoolMaskThatIsNotCausalStaysAMask) {
  // The same chain on a buffer that is not a lower triangle of ones (one
  // more key masked in row 3): SDPA gets logical_not(mask), not is_causal.
  at::Tensor mask = CausalMask(16).clone();
  mask.index_put_({0, 0, 3, 0}, 0.0);
  auto report = OptimizeAndCompare(Make(kCausal, {{"mask", mask}}), Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "sdpa") << report.attention_reason;
  EXPECT_TRUE(Contains(report.attention_reason, "1 masked, 0 of them causal")) << report.attention_reason;
  EXPECT_TRUE(Contains(report.graph, "aten::logical_not")) << report.graph;
}

TEST(AttentionPass, ACausalMaskOnAOneRowQueryAgainstALongerKeyIsNoMask) {
  // Observed with L == S, run with one query row against 12 keys: eager's
  // [1, 1] slice of the mask is False (no key masked), and so is is_causal.
  torch::jit::Module m = Make(kCausal, {{"mask", CausalMask(16)}});
  m.eval();
  auto observed = Qkv({2, 3, 12, 8});
  auto report = optimize(m, SdpaOptions(observed, AttentionMode::kSdpa));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(Contains(report->attention_reason, "1 of them causal")) << report->attention_reason;
  torch::manual_seed(3);
  std::vector<c10::IValue> one_row = {torch::randn({2, 3, 1, 8}), torch::randn({2, 3, 12, 8}),
                                      torch::randn({2, 3, 12, 8})};
  const at::Tensor& q = one_row[0].toTensor();
  const at::Tensor& k = one_row[1].toTensor();
  const at::Tensor& v = one_row[2].toTensor();
  at::Tensor want = torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * 0.25, -1), v);
  at::Tensor got = m.forward(one_row).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<float>();
}

TEST(AttentionPass, AdditiveMaskAndDivisionScaleOnRank3) {
  torch::manual_seed(1);
  auto report = OptimizeAndCompare(Make(kAdditive, {{"bias", torch::randn({10, 10})}}), Qkv({4, 10, 16}),
                                   AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "sdpa") << report.attention_reason;
  EXPECT_TRUE(Contains(report.graph, "aten::scaled_dot_product_attention")) << report.graph;
  EXPECT_FALSE(Contains(report.graph, "aten::softmax")) << report.graph;
}

// Rewrites `m`'s forward the way torch.jit.trace records a Python scalar
// operand: every float-constant second input of aten::mul / aten::div becomes
// a one-element tensor constant (prim::Constant[value={0.25}]). Returns how
// many it replaced.
int TraceStyleScales(torch::jit::Module& m) {
  auto graph = m.get_method("forward").graph();
  int replaced = 0;
  for (torch::jit::Node* n : graph->nodes()) {
    if (n->kind() != c10::aten::mul && n->kind() != c10::aten::div) continue;
    auto iv = torch::jit::toIValue(n->input(1));
    if (!iv || !iv->isDouble()) continue;
    torch::jit::WithInsertPoint guard(n);
    n->replaceInput(1, graph->insertConstant(torch::tensor(iv->toDouble())));
    ++replaced;
  }
  return replaced;
}

TEST(AttentionPass, TracedConstantTensorScaleIsRewrittenWithItsValue) {
  // torch.jit.trace of `(q @ k.mT) * (1.0 / math.sqrt(d))` with d from
  // x.shape gives the scale as a tensor constant (the GPT-2 block in
  // bench/tasks was left unfused for this before).
  auto causal = Make(kCausal, {{"mask", CausalMask(16)}});
  ASSERT_EQ(TraceStyleScales(causal), 1);
  ASSERT_TRUE(Contains(causal.get_method("forward").graph()->toString(), "value={0.25}"));
  auto report = OptimizeAndCompare(causal, Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "sdpa") << report.attention_reason;
  EXPECT_FALSE(Contains(report.graph, "aten::softmax")) << report.graph;

  // Division by a tensor constant: SDPA's scale is its reciprocal.
  torch::manual_seed(1);
  auto additive = Make(kAdditive, {{"bias", torch::randn({10, 10})}});
  ASSERT_EQ(TraceStyleScales(additive), 1);
  report = OptimizeAndCompare(additive, Qkv({4, 10, 16}), AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "sdpa") << report.attention_reason;
  EXPECT_TRUE(Contains(report.graph, "aten::scaled_dot_product_attention")) << report.graph;
}

TEST(AttentionPass, ReturnedAttentionWeightsKeepTheChainWithTheReason) {
  auto report = OptimizeAndCompare(Make(kWeightsReturned, {}), Qkv({2, 2, 8, 4}), AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "unfused");
  EXPECT_TRUE(Contains(report.attention_reason, "softmax output has another use")) << report.attention_reason;
  EXPECT_FALSE(Contains(report.graph, "scaled_dot_product_attention")) << report.graph;
}

TEST(AttentionPass, FiniteMaskFillIsNotRewritten) {
  auto report = OptimizeAndCompare(Make(kFiniteFill, {{"mask", CausalMask(8)}}), Qkv({1, 2, 8, 4}),
                                   AttentionMode::kSdpa);
  EXPECT_EQ(report.attention, "unfused");
  EXPECT_TRUE(Contains(report.attention_reason, "other than -inf")) << report.attention_reason;
}

TEST(AttentionPass, AutoWithoutCudaInputsLeavesItUnfusedAndSaysSo) {
  auto report = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}), AttentionMode::kAuto);
  EXPECT_EQ(report.attention, "unfused");
  EXPECT_TRUE(Contains(report.attention_reason, "not measured (no CUDA example inputs)")) << report.attention_reason;
  EXPECT_TRUE(Contains(report.graph, "aten::softmax")) << report.graph;
}

TEST(AttentionPass, UnfusedRequestedLeavesTheGraph) {
  auto report = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}),
                                   AttentionMode::kUnfused);
  EXPECT_EQ(report.attention, "unfused");
  EXPECT_EQ(report.attention_reason, "unfused requested");
  EXPECT_FALSE(Contains(report.graph, "scaled_dot_product_attention")) << report.graph;
}

TEST(AttentionPass, InjectedFailureLeavesItUnfusedWithAWarningNamingThePass) {
  ::setenv("DICE_INJECT_CAPTURE_FAILURE", "attention", 1);
  auto report = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}), AttentionMode::kSdpa);
  ::unsetenv("DICE_INJECT_CAPTURE_FAILURE");
  EXPECT_EQ(report.attention, "unfused");
  ASSERT_FALSE(report.warnings.empty());
  EXPECT_TRUE(Contains(report.warnings.front(), "capture pass 'attention' failed")) << report.warnings.front();
  EXPECT_FALSE(Contains(report.graph, "scaled_dot_product_attention")) << report.graph;
}

TEST(AttentionPass, DiceAttentionVariableIsReadWhenTheOptionIsAuto) {
  ::setenv("DICE_ATTENTION", "sdpa", 1);
  auto forced = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}), AttentionMode::kAuto);
  ::setenv("DICE_ATTENTION", "fast", 1);
  auto junk = OptimizeAndCompare(Make(kCausal, {{"mask", CausalMask(16)}}), Qkv({2, 3, 12, 8}), AttentionMode::kAuto);
  ::unsetenv("DICE_ATTENTION");
  EXPECT_EQ(forced.attention, "sdpa") << forced.attention_reason;
  EXPECT_EQ(junk.attention, "unfused");
  ASSERT_FALSE(junk.warnings.empty());
  EXPECT_TRUE(Contains(junk.warnings.front(), "DICE_ATTENTION: unknown attention mode 'fast'")) << junk.warnings.front();
}

TEST(AttentionPass, ParseAndNameRoundTripAndTheTimingRule) {
  for (auto m : {AttentionMode::kAuto, AttentionMode::kUnfused, AttentionMode::kSdpa}) {
    auto parsed = ParseAttentionMode(AttentionModeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(ParseAttentionMode("flash").ok());
  EXPECT_TRUE(KeepsSdpa(100.0, 98.0));
  EXPECT_FALSE(KeepsSdpa(100.0, 98.5));
  EXPECT_FALSE(KeepsSdpa(0.0, 50.0));
  EXPECT_FALSE(KeepsSdpa(100.0, 0.0));
}

}  // namespace
}  // namespace dice::torch_ext
