// The GEMM rule of the fusion policy (torch_ext/src/fusion_policy.h rule 4)
// on hand-written node lists: a linear starts its own group and absorbs the
// elementwise epilogue the gemm template family takes. No torch.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../torch_ext/src/fusion_policy.h"

namespace dice::torch_ext {
namespace {

using Groups = std::vector<std::vector<int>>;

PolicyNode Input() {
  PolicyNode n;
  n.kind = "input";
  return n;
}

PolicyNode Linear(int x) {
  PolicyNode n;
  n.kind = "aten::linear";
  n.fusible = true;
  n.inputs = {x};
  n.operands = 3;
  n.tensor_operands = 3;
  n.rank = 2;
  return n;
}

// An elementwise node as the TorchScript frontend describes it: its tensor
// operands (source, extent) in order.
PolicyNode Epilogue(std::string kind, std::vector<TensorOperand> operands) {
  PolicyNode n;
  n.kind = std::move(kind);
  n.fusible = true;
  n.epilogue_op = true;
  for (const auto& o : operands)
    if (o.source >= 0) n.inputs.push_back(o.source);
  n.operands = 2;
  n.tensor_operands = static_cast<int>(operands.size());
  n.rank = 2;
  n.epilogue_operands = std::move(operands);
  return n;
}

PolicyNode Sum(int x) {
  PolicyNode n;
  n.kind = "aten::sum";
  n.fusible = true;
  n.inputs = {x};
  n.operands = 3;
  n.tensor_operands = 1;
  n.rank = 2;
  n.dim = DimArg::kList;
  n.dims = {1};
  return n;
}

Groups Propose(const std::vector<PolicyNode>& nodes) {
  auto groups = ProposeFusionGroups(nodes, 1);
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  return groups.ok() ? *groups : Groups{};
}

TEST(GemmGroupPolicyTest, LinearAbsorbsAChainOfUnaryAndScalarOps) {
  // linear -> mul(2.0) -> leaky_relu
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::mul", {{1, Extent::kFull}}),
                               Epilogue("aten::leaky_relu", {{2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3}}));
}

TEST(GemmGroupPolicyTest, LinearNeverJoinsItsProducersGroup) {
  // relu(x) -> linear -> tanh: the relu stays a group of its own.
  std::vector<PolicyNode> g = {Input(), Epilogue("aten::relu", {{-1, Extent::kFull}}), Linear(1),
                               Epilogue("aten::tanh", {{2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3}}));
}

TEST(GemmGroupPolicyTest, ReductionAfterLinearStartsItsOwnGroup) {
  // linear -> sum(1) -> exp: linear alone, sum + exp together.
  std::vector<PolicyNode> g = {Input(), Linear(0), Sum(1), Epilogue("aten::exp", {{2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3}}));
}

TEST(GemmGroupPolicyTest, OneExtraTensorRowVectorOrResidual) {
  // linear + row vector -> relu + residual: the second extra tensor ends the group.
  std::vector<PolicyNode> g = {Input(),
                               Input(),
                               Input(),
                               Linear(0),
                               Epilogue("aten::add", {{3, Extent::kFull}, {1, Extent::kRow}}),
                               Epilogue("aten::relu", {{4, Extent::kFull}}),
                               Epilogue("aten::add", {{5, Extent::kFull}, {2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{3, 4, 5}, {6}}));
  // A full-size residual alone is taken in an add, not in a sub or mul.
  std::vector<PolicyNode> res = {Input(), Input(), Linear(0),
                                 Epilogue("aten::add", {{1, Extent::kFull}, {2, Extent::kFull}})};
  EXPECT_EQ(Propose(res), (Groups{{2, 3}}));
  for (const char* kind : {"aten::sub", "aten::mul"}) {
    std::vector<PolicyNode> other = {Input(), Input(), Linear(0),
                                     Epilogue(kind, {{2, Extent::kFull}, {1, Extent::kFull}})};
    EXPECT_EQ(Propose(other), (Groups{{2}, {3}})) << kind;
  }
}

TEST(GemmGroupPolicyTest, SubTakesARowVectorOnlyAfterTheGemmResult) {
  std::vector<PolicyNode> after = {Input(), Input(), Linear(0),
                                   Epilogue("aten::sub", {{2, Extent::kFull}, {1, Extent::kRow}})};
  EXPECT_EQ(Propose(after), (Groups{{2, 3}}));
  std::vector<PolicyNode> before = {Input(), Input(), Linear(0),
                                    Epilogue("aten::sub", {{1, Extent::kRow}, {2, Extent::kFull}})};
  EXPECT_EQ(Propose(before), (Groups{{2}, {3}}));
}

TEST(GemmGroupPolicyTest, BroadcastOrUnknownExtraTensorIsNotAnEpilogue) {
  for (Extent e : {Extent::kOther, Extent::kUnknown}) {
    std::vector<PolicyNode> g = {Input(), Input(), Linear(0),
                                 Epilogue("aten::add", {{2, Extent::kFull}, {1, e}})};
    EXPECT_EQ(Propose(g), (Groups{{2}, {3}}));
  }
}

TEST(GemmGroupPolicyTest, GroupKeepsOneOutput) {
  // The linear's result is also read by a second op: relu cannot join (two outputs).
  std::vector<PolicyNode> two_readers = {Input(), Linear(0), Epilogue("aten::relu", {{1, Extent::kFull}}),
                                         Epilogue("aten::exp", {{1, Extent::kFull}})};
  EXPECT_EQ(Propose(two_readers), (Groups{{1}, {2}, {3}}));
  // The linear's result is a graph output.
  std::vector<PolicyNode> escapes = {Input(), Linear(0), Epilogue("aten::relu", {{1, Extent::kFull}})};
  escapes[1].escapes = true;
  EXPECT_EQ(Propose(escapes), (Groups{{1}, {2}}));
  // y * y reads the GEMM result twice.
  std::vector<PolicyNode> square = {Input(), Linear(0),
                                    Epilogue("aten::mul", {{1, Extent::kFull}, {1, Extent::kFull}})};
  EXPECT_EQ(Propose(square), (Groups{{1}, {2}}));
}

TEST(GemmGroupPolicyTest, NodeThatIsNoEpilogueOpDoesNotJoin) {
  // A cast (or an add with alpha != 1) is described with epilogue_op = false.
  PolicyNode cast = Epilogue("aten::to", {{1, Extent::kFull}});
  cast.epilogue_op = false;
  std::vector<PolicyNode> g = {Input(), Linear(0), cast, Epilogue("aten::relu", {{2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3}}));
}

TEST(GemmGroupPolicyTest, GroupFormedEarlierWithALinearStaysAsItIs) {
  PolicyNode earlier;
  earlier.kind = "dice::FusionGroup";
  earlier.fusible = true;
  earlier.inputs = {0};
  earlier.inner = {Linear(0), Epilogue("aten::relu", {})};
  std::vector<PolicyNode> g = {Input(), earlier, Epilogue("aten::tanh", {{1, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2}}));
}

TEST(GemmGroupPolicyTest, NonFusibleLinearLeavesTodaysGroups) {
  // DICE_GEMM_GROUPS=0: the frontend marks the linear not fusible.
  PolicyNode lin = Linear(0);
  lin.fusible = false;
  std::vector<PolicyNode> g = {Input(), lin, Epilogue("aten::relu", {{1, Extent::kFull}}),
                               Epilogue("aten::tanh", {{2, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{2, 3}}));
}

// DAG epilogues: a later node may read any member, not only the last one.
constexpr Extent kF = Extent::kFull;

// A node of the graph that no group takes (a graph output's consumer, a
// host op), reading `x`.
PolicyNode Opaque(int x) {
  PolicyNode n;
  n.kind = "aten::opaque";
  n.inputs = {x};
  return n;
}

TEST(GemmGroupPolicyTest, SwishTimesScalarIsOneGroup) {
  // KernelBench 59: y * sigmoid(y) * s.
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                               Epilogue("aten::mul", {{1, kF}, {2, kF}}), Epilogue("aten::mul", {{3, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3, 4}}));
}

TEST(GemmGroupPolicyTest, SigmoidScaledPlusGemmResultIsOneGroup) {
  // KernelBench 70: sigmoid(y) * s + y.
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                               Epilogue("aten::mul", {{2, kF}}), Epilogue("aten::add", {{3, kF}, {1, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3, 4}}));
}

TEST(GemmGroupPolicyTest, ScaledPlusGemmResultIsOneGroupInEitherOperandOrder) {
  // KernelBench 40: y * s + y (and y + y * s).
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::mul", {{1, kF}}),
                               Epilogue("aten::add", {{2, kF}, {1, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3}}));
  g[3] = Epilogue("aten::add", {{1, kF}, {2, kF}});
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3}}));
}

TEST(GemmGroupPolicyTest, TwoBranchesThatMeetAreOneGroup) {
  // relu(y) * tanh(y): both branches are inside once their meeting node joins.
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::relu", {{1, kF}}),
                               Epilogue("aten::tanh", {{1, kF}}), Epilogue("aten::mul", {{2, kF}, {3, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3, 4}}));
}

TEST(GemmGroupPolicyTest, DagWhoseIntermediateEscapesStaysSplit) {
  // y * sigmoid(y) with sigmoid(y) also a graph output: the group would have two outputs.
  std::vector<PolicyNode> out = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                                 Epilogue("aten::mul", {{1, kF}, {2, kF}})};
  out[2].escapes = true;
  EXPECT_EQ(Propose(out), (Groups{{1}, {2, 3}}));
  // ... or read by a node outside the group.
  std::vector<PolicyNode> read = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                                  Epilogue("aten::mul", {{1, kF}, {2, kF}}), Opaque(2)};
  EXPECT_EQ(Propose(read), (Groups{{1}, {2, 3}}));
  // The GEMM result itself read outside.
  std::vector<PolicyNode> gemm = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                                  Epilogue("aten::mul", {{1, kF}, {2, kF}}), Opaque(1)};
  EXPECT_EQ(Propose(gemm), (Groups{{1}, {2, 3}}));
}

TEST(GemmGroupPolicyTest, GroupEndsAtTheLatestNodeThatKeepsOneOutput) {
  // y * sigmoid(y) -> exp, where the product is also read outside: the group
  // ends at the product (its one output); exp starts its own group.
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                               Epilogue("aten::mul", {{1, kF}, {2, kF}}), Epilogue("aten::exp", {{3, kF}}),
                               Opaque(3)};
  EXPECT_EQ(Propose(g), (Groups{{1, 2, 3}, {4}}));
}

TEST(GemmGroupPolicyTest, ReadingOneMemberTwiceStaysSplitInADagToo) {
  // y * y is kept out (the chain rule's choice, kept): here sigmoid(y) * sigmoid(y).
  std::vector<PolicyNode> g = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                               Epilogue("aten::mul", {{2, kF}, {2, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1, 2}, {3}}));
}

TEST(GemmGroupPolicyTest, DagTakesOneExtraTensor) {
  // (y + row) * sigmoid(y): one group; a second extra tensor ends it.
  std::vector<PolicyNode> g = {Input(),
                               Input(),
                               Input(),
                               Linear(0),
                               Epilogue("aten::add", {{3, kF}, {1, Extent::kRow}}),
                               Epilogue("aten::sigmoid", {{3, kF}}),
                               Epilogue("aten::mul", {{4, kF}, {5, kF}}),
                               Epilogue("aten::add", {{6, kF}, {2, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{3, 4, 5, 6}, {7}}));
  // A broadcast member operand (an unknown extent) in a two-member op stays out.
  std::vector<PolicyNode> unknown = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                                     Epilogue("aten::mul", {{1, kF}, {2, Extent::kUnknown}})};
  EXPECT_EQ(Propose(unknown), (Groups{{1}, {2, 3}}));
}

TEST(GemmGroupPolicyTest, AnAddOfTwoGemmResultsJoinsTheGroupOfItsFirstOperandAsBefore) {
  // add(l2(x), l1(x)), l1 computed first: a chain the chain rule formed
  // stays as it was, the add in l2's group (its first operand's).
  std::vector<PolicyNode> g = {Input(), Linear(0), Linear(0), Epilogue("aten::add", {{2, kF}, {1, kF}})};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3}}));
  g[3] = Epilogue("aten::add", {{1, kF}, {2, kF}});
  EXPECT_EQ(Propose(g), (Groups{{1, 3}, {2}}));
  // l1's result read twice (a DAG for l1) and added to l2's: the chain of l2
  // still takes the add; l1's DAG ends before it.
  std::vector<PolicyNode> dag = {Input(), Linear(0), Epilogue("aten::sigmoid", {{1, kF}}),
                                 Epilogue("aten::mul", {{1, kF}, {2, kF}}), Linear(0),
                                 Epilogue("aten::add", {{4, kF}, {3, kF}})};
  EXPECT_EQ(Propose(dag), (Groups{{1, 2, 3}, {4, 5}}));
}

TEST(GemmGroupPolicyTest, GemmGroupsSettingFromItsEnvValue) {
  EXPECT_EQ(ParseGemmGroups(nullptr), GemmGroups::kFloat32);
  EXPECT_EQ(ParseGemmGroups(""), GemmGroups::kFloat32);
  EXPECT_EQ(ParseGemmGroups("all"), GemmGroups::kAll);
  EXPECT_EQ(ParseGemmGroups("0"), GemmGroups::kOff);
  EXPECT_EQ(ParseGemmGroups("off"), GemmGroups::kOff);
  EXPECT_EQ(ParseGemmGroups("bogus"), GemmGroups::kFloat32);
  // Conv groups are off unless asked for.
  EXPECT_EQ(ParseConvGroups(nullptr), GemmGroups::kOff);
  EXPECT_EQ(ParseConvGroups("bogus"), GemmGroups::kOff);
  EXPECT_EQ(ParseConvGroups("f32"), GemmGroups::kFloat32);
  EXPECT_EQ(ParseConvGroups("1"), GemmGroups::kFloat32);
  EXPECT_EQ(ParseConvGroups("all"), GemmGroups::kAll);
  EXPECT_EQ(ParseConvGroups("0"), GemmGroups::kOff);
  EXPECT_TRUE(GemmGroupAllowed(GemmGroups::kFloat32, ir::DType::kFloat32));
  EXPECT_FALSE(GemmGroupAllowed(GemmGroups::kFloat32, ir::DType::kBFloat16));
  EXPECT_FALSE(GemmGroupAllowed(GemmGroups::kFloat32, ir::DType::kFloat16));
  EXPECT_TRUE(GemmGroupAllowed(GemmGroups::kAll, ir::DType::kBFloat16));
  EXPECT_FALSE(GemmGroupAllowed(GemmGroups::kOff, ir::DType::kFloat32));
  // "epilogue": every dtype is let in, the 16-bit ones only with an epilogue.
  EXPECT_EQ(ParseGemmGroups("epilogue"), GemmGroups::kEpilogue);
  EXPECT_EQ(ParseGemmGroups("f32"), GemmGroups::kFloat32);
  EXPECT_EQ(ParseGemmGroups("float32", GemmGroups::kEpilogue), GemmGroups::kFloat32);
  EXPECT_EQ(ParseGemmGroups(nullptr, GemmGroups::kEpilogue), GemmGroups::kEpilogue);
  EXPECT_EQ(ParseGemmGroups("bogus", GemmGroups::kEpilogue), GemmGroups::kEpilogue);
  EXPECT_EQ(ParseGemmGroups("all", GemmGroups::kEpilogue), GemmGroups::kAll);
  EXPECT_TRUE(GemmGroupAllowed(GemmGroups::kEpilogue, ir::DType::kBFloat16));
  EXPECT_TRUE(GemmGroupNeedsEpilogue(GemmGroups::kEpilogue, ir::DType::kBFloat16));
  EXPECT_TRUE(GemmGroupNeedsEpilogue(GemmGroups::kEpilogue, ir::DType::kFloat16));
  EXPECT_FALSE(GemmGroupNeedsEpilogue(GemmGroups::kEpilogue, ir::DType::kFloat32));
  EXPECT_FALSE(GemmGroupNeedsEpilogue(GemmGroups::kAll, ir::DType::kBFloat16));
  EXPECT_EQ(kFxGemmGroupsDefault, GemmGroups::kEpilogue);
}

TEST(GemmGroupPolicyTest, AGemmThatNeedsAnEpilogueIsLeftOutAlone) {
  // l1 alone, l2 -> relu: with needs_epilogue only l2's group is formed, and
  // the nodes after l1 (a tanh reading it, also a graph output's reader) are
  // unaffected.
  PolicyNode l1 = Linear(0), l2 = Linear(0);
  l1.needs_epilogue = l2.needs_epilogue = true;
  l1.escapes = true;  // read outside too: the tanh cannot join it
  std::vector<PolicyNode> g = {Input(), l1, l2, Epilogue("aten::relu", {{2, Extent::kFull}}),
                               Epilogue("aten::tanh", {{1, Extent::kFull}})};
  EXPECT_EQ(Propose(g), (Groups{{2, 3}, {4}}));
  g[1].needs_epilogue = g[2].needs_epilogue = false;  // the same graph without the mark: l1 alone is a group
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3}, {4}}));
}

TEST(GemmGroupPolicyTest, NeedsEpilogueIsReadFromJson) {
  auto nodes = ParsePolicyNodes(R"([{"kind": "input"}, {"kind": "aten::linear", "fusible": true, "inputs": [0],
                                     "needs_epilogue": true}])");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_TRUE((*nodes)[1].needs_epilogue);
  EXPECT_FALSE((*nodes)[0].needs_epilogue);
  EXPECT_EQ(Propose(*nodes), Groups{});
  auto bad = ParsePolicyNodes(R"([{"kind": "aten::linear", "needs_epilogue": 1}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"needs_epilogue\" must be a boolean"), std::string::npos)
      << bad.status().ToString();
}

TEST(GemmGroupPolicyTest, ConvStartsAGroupAndAbsorbsItsEpilogueLikeLinear) {
  // relu(x) -> conv2d -> mish -> mul(2.0); then a reduction: its own group.
  PolicyNode conv = Linear(1);
  conv.kind = "aten::conv2d";
  conv.operands = 7;
  conv.rank = 4;
  std::vector<PolicyNode> g = {Input(), Epilogue("aten::relu", {{-1, Extent::kFull}}), conv,
                               Epilogue("aten::mish", {{2, Extent::kFull}}), Epilogue("aten::mul", {{3, Extent::kFull}}),
                               Sum(4)};
  EXPECT_EQ(Propose(g), (Groups{{1}, {2, 3, 4}, {5}}));
  EXPECT_TRUE(IsGemmKind("aten::_convolution"));
  EXPECT_TRUE(IsConvKind("aten::conv2d"));
  EXPECT_FALSE(IsConvKind("aten::linear"));
}

}  // namespace
}  // namespace dice::torch_ext
