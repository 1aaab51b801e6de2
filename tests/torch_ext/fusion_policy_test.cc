// The fusion policy both frontends share (torch_ext/src/fusion_policy.h), on
// hand-written node lists: no torch, no graph.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../torch_ext/src/fusion_policy.h"

namespace dice::torch_ext {
namespace {

using Groups = std::vector<std::vector<int>>;

PolicyNode Op(std::string kind, std::vector<int> inputs, bool fusible = true) {
  PolicyNode n;
  n.kind = std::move(kind);
  n.fusible = fusible;
  n.inputs = std::move(inputs);
  n.operands = static_cast<int>(n.inputs.size());
  n.tensor_operands = n.operands;
  n.rank = 2;
  return n;
}

PolicyNode Input() { return Op("input", {}, /*fusible=*/false); }

PolicyNode Reduce(std::string kind, int input, std::vector<int64_t> dims) {
  PolicyNode n = Op(std::move(kind), {input});
  n.operands = 3;  // self, dim, keepdim
  n.dim = DimArg::kList;
  n.dims = std::move(dims);
  return n;
}

Groups Propose(const std::vector<PolicyNode>& nodes, int min_nontrivial = 1) {
  auto groups = ProposeFusionGroups(nodes, min_nontrivial);
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  return groups.ok() ? *groups : Groups{};
}

TEST(FusionPolicyTest, ElementwiseChainIsOneGroup) {
  // x * 0.5 + y -> gelu
  std::vector<PolicyNode> g = {Input(), Input(), Op("aten::mul", {0}), Op("aten::add", {2, 1}),
                               Op("aten::gelu", {3})};
  EXPECT_EQ(Propose(g), (Groups{{2, 3, 4}}));
}

TEST(FusionPolicyTest, GroupNeverWrapsAroundAnUnfusibleNode) {
  // a = relu(x); a + a @ w: one group would have to contain the mm.
  std::vector<PolicyNode> g = {Input(), Input(), Op("aten::relu", {0}), Op("aten::mm", {2, 1}, false),
                               Op("aten::add", {2, 3})};
  EXPECT_EQ(Propose(g), (Groups{{2}, {4}}));
}

TEST(FusionPolicyTest, MatmulEpilogueIsOneGroupAfterTheMatmul) {
  std::vector<PolicyNode> g = {Input(), Input(), Input(), Op("aten::mm", {0, 1}, false), Op("aten::add", {3, 2}),
                               Op("aten::relu", {4})};
  EXPECT_EQ(Propose(g), (Groups{{4, 5}}));
}

TEST(FusionPolicyTest, LayoutCopyEndsItsProducersGroupAndIsReadByNoMember) {
  // relu(conv_out) + bias -> contiguous -> neg: the copy joins the epilogue
  // group as its output (rule 5); the neg that reads it starts a group of its own.
  std::vector<PolicyNode> g = {Input(), Input(), Op("aten::relu", {0}), Op("aten::add", {2, 1}),
                               Op("aten::contiguous", {3}), Op("aten::neg", {4})};
  EXPECT_EQ(Propose(g), (Groups{{2, 3, 4}, {5}}));
  // A reader of the copy that also reads the group's other value cannot pull the copy inside.
  std::vector<PolicyNode> h = {Input(), Op("aten::relu", {0}), Op("aten::contiguous", {1}),
                               Op("aten::mul", {2, 1})};
  EXPECT_EQ(Propose(h), (Groups{{1, 2}, {3}}));
  // A copy alone (the region's entry) is a group: a layout change is a real pass over memory.
  std::vector<PolicyNode> e = {Input(), Op("aten::contiguous", {0}), Op("aten::conv2d", {1}, false)};
  EXPECT_EQ(Propose(e), (Groups{{1}}));
  EXPECT_TRUE(IsLayoutCopy("aten::contiguous"));
  EXPECT_FALSE(IsLayoutCopy("aten::clone"));
}

TEST(FusionPolicyTest, CastOnlyGroupIsDissolved) {
  std::vector<PolicyNode> casts = {Input(), Op("aten::to", {0}), Op("aten::type_as", {1, 0})};
  EXPECT_EQ(Propose(casts), Groups{});
  EXPECT_EQ(Propose(casts, /*min_nontrivial=*/0), (Groups{{1, 2}}));
  std::vector<PolicyNode> fx_casts = {Input(), Op("prims::convert_element_type", {0}), Op("aten::_to_copy", {1})};
  EXPECT_EQ(Propose(fx_casts), Groups{});
  // A cast next to a real op rides along.
  std::vector<PolicyNode> mixed = {Input(), Op("aten::_to_copy", {0}), Op("aten::exp", {1})};
  EXPECT_EQ(Propose(mixed), (Groups{{1, 2}}));
  // min_nontrivial_ops counts only the non-casts.
  EXPECT_EQ(Propose(mixed, 2), Groups{});
}

TEST(FusionPolicyTest, ReductionsOverDifferentAxesFormSeparateGroups) {
  // group_norm -> amin(dim 1) -> + b; amax(x, 1) -> * 2 -> mean(-1) (= dim 1 at rank 2).
  PolicyNode gn = Op("aten::group_norm", {0});
  std::vector<PolicyNode> g = {Input(),
                               Input(),
                               gn,
                               Reduce("aten::amin", 2, {1}),
                               Op("aten::add", {3, 1}),
                               Reduce("aten::amax", 0, {1}),
                               Op("aten::mul", {5}),
                               Reduce("aten::mean", 6, {-1})};
  EXPECT_EQ(Propose(g), (Groups{{2}, {3, 4}, {5, 6, 7}}));
}

TEST(FusionPolicyTest, TwoConsumersReducingOverDifferentAxesSplitTheFirstComesFirst) {
  // e = exp(x); sum(e, 1); sum(e, 0): e joins the first reduction only.
  std::vector<PolicyNode> g = {Input(), Op("aten::exp", {0}), Reduce("aten::sum", 1, {1}),
                               Reduce("aten::sum", 1, {0})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2}, {3}}));
}

TEST(FusionPolicyTest, VarMeanJoinsOpsReducingOverTheSameAxes) {
  // var_mean(x, -1) -> getitem 0/1 -> (x - mean) * rsqrt(var + eps) -> softmax(-1); then sum(dim 0).
  PolicyNode vm = Reduce("aten::var_mean", 0, {-1});
  std::vector<PolicyNode> g = {Input(),
                               vm,
                               Op("getitem", {1}),
                               Op("getitem", {1}),
                               Op("aten::add", {2}),
                               Op("aten::rsqrt", {4}),
                               Op("aten::sub", {0, 3}),
                               Op("aten::mul", {6, 5}),
                               Reduce("aten::_softmax", 7, {1}),
                               Reduce("aten::sum", 8, {0})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3, 4, 5, 6, 7, 8}, {9}}));
  EXPECT_EQ(ReductionSignature(vm, "u"), "dims:1");
}

TEST(FusionPolicyTest, LayerNormReducesOverItsLastAxes) {
  PolicyNode ln = Op("aten::native_layer_norm", {0});
  ln.rank = 3;
  ln.normalized_dims = 2;
  EXPECT_EQ(ReductionSignature(ln, "u"), "dims:1,2");
  ln.normalized_dims = 4;  // more axes than the input has
  EXPECT_EQ(ReductionSignature(ln, "u"), "u");
  ln.normalized_dims.reset();
  EXPECT_EQ(ReductionSignature(ln, "u"), "u");
  // layer_norm(x + r) then softmax over the last axis: one group.
  PolicyNode ln1 = Op("aten::layer_norm", {2});
  ln1.normalized_dims = 1;
  std::vector<PolicyNode> g = {Input(), Input(), Op("aten::add", {0, 1}), ln1, Reduce("aten::softmax", 3, {-1})};
  EXPECT_EQ(Propose(g), (Groups{{2, 3, 4}}));
}

TEST(FusionPolicyTest, SignaturesNameTheAxesOrSayTheyCannot) {
  PolicyNode sum = Reduce("aten::sum", 0, {-1, 0});
  EXPECT_EQ(ReductionSignature(sum, "u"), "dims:0,1");
  sum.rank.reset();
  EXPECT_EQ(ReductionSignature(sum, "u"), "dims:-1,0");
  sum.dims.clear();
  EXPECT_EQ(ReductionSignature(sum, "u"), "dims:all");
  sum.dim = DimArg::kNone;
  EXPECT_EQ(ReductionSignature(sum, "u"), "dims:all");
  sum.dim = DimArg::kUnknown;
  EXPECT_EQ(ReductionSignature(sum, "u"), "u");
  sum.dim = DimArg::kAbsent;  // sum(x): every axis
  EXPECT_EQ(ReductionSignature(sum, "u"), "dims:all");
  sum.operands = 0;
  EXPECT_EQ(ReductionSignature(sum, "u"), "u");
  EXPECT_EQ(ReductionSignature(Op("aten::max", {0, 1}), "u"), "");  // binary max: elementwise
  EXPECT_EQ(ReductionSignature(Op("aten::max", {0}), "u"), "dims:all");
  EXPECT_EQ(ReductionSignature(Op("aten::instance_norm", {0}), "u"), "u");
  EXPECT_EQ(ReductionSignature(Op("aten::exp", {0}), "u"), "");
}

TEST(FusionPolicyTest, GroupFormedEarlierKeepsItsReductionsAndGrows) {
  // A dice::FusionGroup holding amax(dim 1) absorbs a later mul, but not a
  // sum over dim 0.
  PolicyNode earlier = Op("dice::FusionGroup", {0});
  earlier.inner = {Reduce("aten::amax", 0, {1})};
  std::vector<PolicyNode> g = {Input(), earlier, Op("aten::mul", {1}), Reduce("aten::sum", 2, {0})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2}, {3}}));
  // A group formed earlier of casts alone is dissolved like any other.
  PolicyNode casts = Op("dice::FusionGroup", {0});
  casts.inner = {Op("aten::to", {}), Op("aten::to", {})};
  EXPECT_EQ(Propose({Input(), casts}), Groups{});
}

TEST(FusionPolicyTest, RejectsAnInputThatDoesNotComeBefore) {
  std::vector<PolicyNode> g = {Input(), Op("aten::exp", {2}), Op("aten::neg", {1})};
  auto groups = ProposeFusionGroups(g, 1);
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("node 1 (aten::exp) reads node 2"), std::string::npos)
      << groups.status().message();
}

TEST(FusionPolicyTest, ParsesTheJsonFormThePythonFrontendSends) {
  auto nodes = ParsePolicyNodes(R"([
    {"kind": "placeholder"},
    {"kind": "aten::sum", "fusible": true, "inputs": [0], "operands": 2, "tensor_operands": 1, "rank": 3, "dim": -1},
    {"kind": "aten::mean", "fusible": true, "inputs": [1], "operands": 1, "dim": null},
    {"kind": "aten::amax", "fusible": true, "inputs": [1], "operands": 2, "dim": "?"},
    {"kind": "aten::layer_norm", "fusible": true, "operands": 2, "rank": 2, "normalized_dims": 1},
    {"kind": "dice::FusionGroup", "fusible": true, "inner": [{"kind": "aten::exp"}]}
  ])");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 6u);
  const auto& n = *nodes;
  EXPECT_FALSE(n[0].fusible);
  EXPECT_EQ(n[0].dim, DimArg::kAbsent);
  EXPECT_EQ(n[1].inputs, std::vector<int>{0});
  EXPECT_EQ(n[1].dim, DimArg::kList);
  EXPECT_EQ(n[1].dims, std::vector<int64_t>{-1});
  EXPECT_EQ(ReductionSignature(n[1], "u"), "dims:2");
  EXPECT_EQ(n[2].dim, DimArg::kNone);
  EXPECT_EQ(n[3].dim, DimArg::kUnknown);
  EXPECT_EQ(ReductionSignature(n[4], "u"), "dims:1");
  ASSERT_EQ(n[5].inner.size(), 1u);
  EXPECT_EQ(n[5].inner[0].kind, "aten::exp");
}

TEST(FusionPolicyTest, ParsesTheGemmRuleFactsAndGroupsALinearWithItsEpilogue) {
  const char* json = R"([
    {"kind": "placeholder"},
    {"kind": "placeholder"},
    {"kind": "aten::linear", "fusible": true, "inputs": [0]},
    {"kind": "aten::add", "fusible": true, "inputs": [2, 1], "epilogue_op": true,
     "epilogue_operands": [{"source": 2, "extent": "full"}, {"source": 1, "extent": "row"}]},
    {"kind": "aten::relu", "fusible": true, "inputs": [3], "epilogue_op": true, "escapes": true,
     "epilogue_operands": [{"source": 3, "extent": "full"}]}
  ])";
  auto nodes = ParsePolicyNodes(json);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  const auto& n = *nodes;
  EXPECT_FALSE(n[2].epilogue_op);
  EXPECT_TRUE(n[3].epilogue_op);
  ASSERT_EQ(n[3].epilogue_operands.size(), 2u);
  EXPECT_EQ(n[3].epilogue_operands[1].source, 1);
  EXPECT_EQ(n[3].epilogue_operands[1].extent, Extent::kRow);
  EXPECT_TRUE(n[4].escapes);
  auto groups = ProposeFusionGroups(n, 1);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  EXPECT_EQ(*groups, (std::vector<std::vector<int>>{{2, 3, 4}}));

  auto bad = ParsePolicyNodes(R"([{"kind": "aten::add", "epilogue_operands": [{"source": 0, "extent": "wide"}]}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("node 0: \"epilogue_operands\""), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParsePolicyNodes(R"([{"kind": "aten::add", "escapes": 1}])").ok());
}

TEST(FusionPolicyTest, MalformedJsonIsRejectedNamingTheNodeAndKey) {
  EXPECT_FALSE(ParsePolicyNodes("[{").ok());
  EXPECT_FALSE(ParsePolicyNodes(R"({"kind": "x"})").ok());
  auto bad = ParsePolicyNodes(R"([{"kind": "aten::exp"}, {"kind": "aten::sum", "dim": "all"}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("node 1: \"dim\""), std::string::npos) << bad.status().message();
  auto no_kind = ParsePolicyNodes(R"([{"fusible": true}])");
  ASSERT_FALSE(no_kind.ok());
  EXPECT_NE(no_kind.status().message().find("node 0: \"kind\""), std::string::npos);
}

}  // namespace
}  // namespace dice::torch_ext
