// The IR's rotate_half op (dice/core/ir.h kRotateHalf, issue 19 item 1: the
// q/k RMSNorm + RoPE group): canonical text round trip, hashing, validation
// (an odd last dim is refused by shape inference with a clear message), and
// the torch expression of the reference program.
#include <gtest/gtest.h>

#include <string>

#include "dice/core/ir.h"
#include "dice/core/task.h"

namespace dice::ir {
namespace {

// x [..., d] -> x * cos + rotate_half(x) * sin (RoPE on its own).
Graph Rope(int rank) {
  Graph g;
  g.inputs = {{DType::kBFloat16, rank}, {DType::kBFloat16, rank}, {DType::kBFloat16, rank}};
  auto op = [&](OpKind k, std::vector<int32_t> args) {
    Op o;
    o.kind = k;
    o.args = std::move(args);
    g.ops.push_back(o);
    return g.op_value(g.ops.size() - 1);
  };
  const int rot = op(OpKind::kRotateHalf, {0});
  g.outputs = {op(OpKind::kAdd, {op(OpKind::kMul, {0, 1}), op(OpKind::kMul, {rot, 2})})};
  return g;
}

TEST(RotateHalfIr, RoundTripsThroughTheCanonicalText) {
  const Graph g = Rope(3);
  ASSERT_TRUE(Validate(g).ok()) << Validate(g).ToString();
  const std::string text = Canonical(g);
  EXPECT_NE(text.find("%3 = rotate_half(%0)"), std::string::npos) << text;
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(*parsed == g);
  EXPECT_EQ(Canonical(*parsed), text);
  EXPECT_EQ(GraphHash(*parsed), GraphHash(g));
  EXPECT_EQ(Summary(g), "rotate_half+mul+mul+add");
  EXPECT_EQ(GetOpInfo(OpKind::kRotateHalf).category, OpCategory::kRearrange);
  auto kind = OpKindFromName("rotate_half");
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, OpKind::kRotateHalf);
  // The op is part of the hash: the same graph with neg in its place differs.
  Graph neg = g;
  neg.ops[0].kind = OpKind::kNeg;
  EXPECT_NE(GraphHash(neg), GraphHash(g));
}

TEST(RotateHalfIr, KeepsTheShapeAndRefusesAnOddLastDim) {
  const Graph g = Rope(3);
  auto spec = [](std::vector<int64_t> s) { return TensorSpec::Contiguous(DType::kBFloat16, std::move(s)); };
  auto shapes = InferShapes(g, {spec({4, 2, 8}), spec({4, 1, 8}), spec({4, 1, 8})});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ((*shapes)[3], (std::vector<int64_t>{4, 2, 8}));
  auto types = InferTypes(g);
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)[3].dtype, DType::kBFloat16);
  EXPECT_EQ((*types)[3].rank, 3);

  auto odd = InferShapes(g, {spec({4, 2, 7}), spec({4, 1, 7}), spec({4, 1, 7})});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("op 0 (rotate_half): the last dim must be even to rotate its halves, got 7"),
            std::string::npos)
      << odd.status().message();
  // A Task is refused the same way (its output specs come from the shapes).
  EXPECT_FALSE(Task::Make(g, {spec({4, 2, 7}), spec({4, 1, 7}), spec({4, 1, 7})}, TargetInfo{}).ok());
}

TEST(RotateHalfIr, ValidationRefusesScalarsAndAttributes) {
  Graph scalar;
  scalar.inputs = {{DType::kFloat32, 0}};
  Op r;
  r.kind = OpKind::kRotateHalf;
  r.args = {0};
  scalar.ops = {r};
  scalar.outputs = {1};
  Status st = Validate(scalar);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rotate_half): needs a tensor of rank >= 1"), std::string::npos) << st.message();

  Graph g = Rope(2);
  g.ops[0].ivalue = 1;
  st = Validate(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("takes no integer attribute"), std::string::npos) << st.message();
  g = Rope(2);
  g.ops[0].dims = {1};
  EXPECT_NE(Validate(g).message().find("takes no dims"), std::string::npos) << Validate(g).message();
  g = Rope(2);
  g.ops[0].scalars = {1.0};
  EXPECT_NE(Validate(g).message().find("needs 0 scalars"), std::string::npos) << Validate(g).message();
  // Parsing reports an attribute the op does not take by the same rule.
  auto parsed = Parse("dice-ir v1\ninput %0 f32 rank=2\n%1 = rotate_half(%0) dims=[1]\noutput %1\n");
  EXPECT_FALSE(parsed.ok());
}

TEST(RotateHalfIr, RendersTorchsRotateHalf) {
  const std::string p = RenderReferenceProgram(
      Rope(3), {TensorSpec::Contiguous(DType::kBFloat16, {4, 2, 8}), TensorSpec::Contiguous(DType::kBFloat16, {4, 1, 8}),
                TensorSpec::Contiguous(DType::kBFloat16, {4, 1, 8})});
  EXPECT_NE(p.find("v3 = torch.cat((-x0[..., x0.shape[-1] // 2:], x0[..., :x0.shape[-1] // 2]), dim=-1)"),
            std::string::npos)
      << p;
}

}  // namespace
}  // namespace dice::ir
