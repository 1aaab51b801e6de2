// The reference executor's rotate_half (ir.h kRotateHalf): torch's
// rotate-half formula cat(-x[..., d/2:], x[..., :d/2], -1), bit for bit, in
// every dtype, inside a RoPE chain; an odd last dim is an error.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "dice/core/ir.h"
#include "dice/reference/reference_executor.h"

namespace dice::reference {
namespace {

using ir::DType;
using ir::OpKind;

// x -> rotate_half(x) (rope = false) or x * cos + rotate_half(x) * sin.
ir::Graph RotateGraph(DType dt, int rank, bool rope) {
  ir::Graph g;
  g.inputs.push_back({dt, rank});
  if (rope) g.inputs.insert(g.inputs.end(), {{dt, rank}, {dt, rank}});
  auto op = [&](OpKind k, std::vector<int32_t> args) {
    ir::Op o;
    o.kind = k;
    o.args = std::move(args);
    g.ops.push_back(o);
    return g.op_value(g.ops.size() - 1);
  };
  const int rot = op(OpKind::kRotateHalf, {0});
  g.outputs = {rope ? op(OpKind::kAdd, {op(OpKind::kMul, {0, 1}), op(OpKind::kMul, {rot, 2})}) : rot};
  return g;
}

torch::Tensor TorchRotateHalf(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

TEST(RotateHalfReference, EqualsTorchsRotateHalf) {
  // [[0, 1, 2, 3, 4, 5]] -> [[-3, -4, -5, 0, 1, 2]]: the halves swapped, the new first half negated.
  auto small = torch::arange(6, torch::kFloat32).view({1, 6});
  auto out = reference::Run(RotateGraph(DType::kFloat32, 2, false), {small});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(torch::equal((*out)[0], torch::tensor({-3.f, -4.f, -5.f, 0.f, 1.f, 2.f}).view({1, 6})));

  torch::manual_seed(5);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    const DType dt = dtype == torch::kFloat32 ? DType::kFloat32
                     : dtype == torch::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
    SCOPED_TRACE(ir::DTypeName(dt));
    auto x = torch::randn({3, 2, 8}).to(dtype);
    auto rot = reference::Run(RotateGraph(dt, 3, false), {x});
    ASSERT_TRUE(rot.ok()) << rot.status().ToString();
    EXPECT_EQ((*rot)[0].scalar_type(), dtype);
    EXPECT_TRUE(torch::equal((*rot)[0], TorchRotateHalf(x)));
    auto cos = torch::randn({3, 1, 8}).to(dtype), sin = torch::randn({3, 1, 8}).to(dtype);
    auto rope = reference::Run(RotateGraph(dt, 3, true), {x, cos, sin});
    ASSERT_TRUE(rope.ok()) << rope.status().ToString();
    EXPECT_TRUE(torch::equal((*rope)[0], x * cos + TorchRotateHalf(x) * sin)) << "op by op as eager";
  }
}

TEST(RotateHalfReference, RefusesAnOddLastDim) {
  auto out = reference::Run(RotateGraph(DType::kFloat32, 2, false), {torch::randn({2, 5})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("even"), std::string::npos) << out.status().message();
}

}  // namespace
}  // namespace dice::reference
