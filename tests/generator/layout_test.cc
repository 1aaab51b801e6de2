// layout_test.cc — channels_last groups are lowered in memory order
// (generator/src/templates/layout.h, issue 18 item 2): the iteration space of
// a task whose full-size tensors are channels_last / channels_last_3d is
// re-indexed so C is the innermost axis, broadcast inputs keep stride 0 on
// the axes they do not span, reductions keep reducing the same (remapped)
// axes, contiguous tasks are untouched, and the candidates compile with
// NVRTC for sm_90 (no GPU needed; values are checked on the GPU by the
// verifier, tests/torch_ext/channels_last_gpu_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../generator/src/templates/layout.h"
#include "../../generator/src/templates/lowering.h"
#include "dice/generator/templates.h"
#include "dice/runtime/compiler.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;
using tmpl_test::GraphBuilder;
using tmpl_test::MakeTask;
using tmpl_test::Spec;

// PyTorch's channels_last strides of [N, C, H, W]: (H*W*C, 1, W*C, C).
ir::TensorSpec ChannelsLast(std::vector<int64_t> shape) {
  ir::TensorSpec s = Spec(DType::kFloat32, shape);
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  s.strides = {h * w * c, 1, w * c, c};
  return s;
}

// channels_last_3d of [N, C, D, H, W]: (D*H*W*C, 1, H*W*C, W*C, C).
ir::TensorSpec ChannelsLast3d(std::vector<int64_t> shape) {
  ir::TensorSpec s = Spec(DType::kFloat32, shape);
  const int64_t c = shape[1], d = shape[2], h = shape[3], w = shape[4];
  s.strides = {d * h * w * c, 1, h * w * c, w * c, c};
  return s;
}

// The task with its output specs in the layout of the first input (what
// serving builds for channels_last calls: dice/core/tensor_layout.h).
Task WithOutputLike(Task t, int input) {
  for (auto& o : t.outputs)
    if (o.shape == t.inputs[input].shape) o.strides = t.inputs[input].strides;
  return t;
}

tmpl::Lowered LowerOk(const Task& t) {
  auto lo = tmpl::Lower(t);
  EXPECT_TRUE(lo.ok()) << lo.status().ToString();
  return lo.ok() ? std::move(lo).value() : tmpl::Lowered{};
}

const tmpl::Node* LoadOf(const tmpl::Lowered& lo, int input) {
  for (const auto& n : lo.nodes)
    if (n.kind == tmpl::NodeKind::kLoad && n.input == input) return &n;
  return nullptr;
}

// Generates and compiles (NVRTC, sm_90) up to 4 candidates; returns them.
std::vector<Candidate> GenerateAndCompile(const Task& task) {
  TemplateGenerator gen;
  auto cands = gen.Generate(task, 8);
  EXPECT_TRUE(cands.ok()) << task.Describe() << ": " << cands.status().ToString();
  if (!cands.ok()) return {};
  EXPECT_FALSE(cands->empty());
  std::vector<Candidate> some(cands->begin(), cands->begin() + std::min<size_t>(4, cands->size()));
  auto built = runtime::CompileAll(some, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_TRUE(built[i].ok()) << some[i].origin << ": " << built[i].status().ToString() << "\n" << some[i].source;
  return *cands;
}

Task AddReluTask(const ir::TensorSpec& x, const ir::TensorSpec& y) {
  GraphBuilder b;
  int a = b.Input(DType::kFloat32, static_cast<int>(x.shape.size()));
  int c = b.Input(DType::kFloat32, static_cast<int>(y.shape.size()));
  b.Output(b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {a, c})}));
  return WithOutputLike(MakeTask(b.g, {x, y}), 0);
}

TEST(LayoutMemoryOrder, ChannelsLastAddReluIteratesWithChannelsInnermost) {
  Task t = AddReluTask(ChannelsLast({8, 64, 56, 56}), ChannelsLast({8, 64, 56, 56}));
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{8, 56, 56, 64}));  // N, H, W, C
  for (int i = 0; i < 2; ++i) {
    const tmpl::Node* load = LoadOf(lo, i);
    ASSERT_NE(load, nullptr);
    EXPECT_EQ(load->strides, (std::vector<int64_t>{56 * 56 * 64, 56 * 64, 64, 1})) << "input " << i;
  }
  ASSERT_EQ(lo.outputs.size(), 1u);
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{56 * 56 * 64, 56 * 64, 64, 1}));
  // Dense in memory order: the loads index by the flat element and the
  // 16-byte vector variants apply, as for a contiguous tensor.
  auto cands = GenerateAndCompile(t);
  bool vectorised = false;
  for (const auto& c : cands)
    vectorised = vectorised || (c.origin == "template:elementwise/b256/v4" &&
                                c.source.find("dice_ldv<float, 4>(in0 + base") != std::string::npos);
  EXPECT_TRUE(vectorised) << "a dense channels_last group should get the 16-byte vector path";
}

TEST(LayoutMemoryOrder, StridedLoweringIsWhatMemoryOrderFixes) {
  // Without the rewrite, the innermost axis (W) walks memory with stride C.
  Task t = AddReluTask(ChannelsLast({2, 16, 4, 4}), ChannelsLast({2, 16, 4, 4}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_EQ(LoadOf(lo, 0)->strides.back(), 16);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(LoadOf(lo, 0)->strides.back(), 1);
}

TEST(LayoutMemoryOrder, MulSigmoidChannelsLast3dPutsChannelsInnermost) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 5);
  int y = b.Input(DType::kFloat32, 5);
  b.Output(b.Op(OpKind::kSigmoid, {b.Op(OpKind::kMul, {x, y})}));
  ir::TensorSpec s = ChannelsLast3d({2, 32, 4, 8, 8});
  Task t = WithOutputLike(MakeTask(b.g, {s, s}), 0);
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 4, 8, 8, 32}));  // N, D, H, W, C
  EXPECT_EQ(LoadOf(lo, 1)->strides.back(), 1);
  GenerateAndCompile(t);
}

TEST(LayoutMemoryOrder, BiasOfShapeC11BroadcastsAlongTheOuterAxes) {
  for (std::vector<int64_t> bias_shape : {std::vector<int64_t>{64, 1, 1}, std::vector<int64_t>{1, 64, 1, 1}}) {
    Task t = AddReluTask(ChannelsLast({8, 64, 56, 56}), Spec(DType::kFloat32, bias_shape));
    tmpl::Lowered lo = LowerOk(t);
    ASSERT_TRUE(tmpl::ToMemoryOrder(&lo)) << bias_shape.size();
    EXPECT_EQ(lo.F, (std::vector<int64_t>{8, 56, 56, 64}));
    const tmpl::Node* bias = LoadOf(lo, 1);
    ASSERT_NE(bias, nullptr);
    EXPECT_EQ(bias->shape, (std::vector<int64_t>{1, 1, 1, 64})) << "bias rank " << bias_shape.size();
    EXPECT_EQ(bias->strides, (std::vector<int64_t>{0, 0, 0, 1})) << "bias rank " << bias_shape.size();
    // The bias is read at the channel of the flat element: one mod, no divisions.
    auto cands = GenerateAndCompile(t);
    ASSERT_FALSE(cands.empty());
    EXPECT_NE(cands[0].source.find("dice_ld(in1 + ((e % 64"), std::string::npos) << cands[0].source;
  }
}

TEST(LayoutMemoryOrder, ContiguousTasksAreUnchanged) {
  Task t = AddReluTask(Spec(DType::kFloat32, {8, 64, 56, 56}), Spec(DType::kFloat32, {64, 1, 1}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_FALSE(tmpl::MemoryOrder(lo).has_value());
  EXPECT_FALSE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{8, 64, 56, 56}));
}

TEST(LayoutMemoryOrder, MixedLayoutsKeepTheStridedLowering) {
  // One contiguous and one channels_last full-size input: no common order.
  Task t = AddReluTask(ChannelsLast({2, 16, 4, 4}), Spec(DType::kFloat32, {2, 16, 4, 4}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_FALSE(tmpl::MemoryOrder(lo).has_value());
  // An expanded (stride 0) full-size input is not dense either.
  ir::TensorSpec expanded = Spec(DType::kFloat32, {2, 16, 4, 4});
  expanded.strides = {0, 1, 0, 0};
  tmpl::Lowered lo2 = LowerOk(AddReluTask(ChannelsLast({2, 16, 4, 4}), expanded));
  EXPECT_FALSE(tmpl::MemoryOrder(lo2).has_value());
}

TEST(LayoutMemoryOrder, KeepdimSumOverChannelsReducesTheInnermostAxis) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kSum, {b.Op(OpKind::kRelu, {x})}, {1}, /*keepdim=*/true));
  Task t = MakeTask(b.g, {ChannelsLast({4, 64, 8, 8})});
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_EQ(lo.reduce_axes, (std::vector<int>{1}));
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{4, 8, 8, 64}));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{3}));
  for (const auto& n : lo.nodes)
    if (n.kind == tmpl::NodeKind::kReduce) {
      EXPECT_EQ(n.reduce_axes, (std::vector<int>{3}));
      EXPECT_EQ(n.shape, (std::vector<int64_t>{4, 8, 8, 1}));
    }
  // The [4,1,8,8] output is written at its own (contiguous) strides.
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{64, 8, 1, 0}));
  GenerateAndCompile(t);
}

TEST(LayoutMemoryOrder, SoftmaxOverChannelsBecomesAnInnermostRow) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kSoftmax, {x}, {1}));
  Task t = WithOutputLike(MakeTask(b.g, {ChannelsLast({4, 64, 8, 8})}), 0);
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{3}));
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{64 * 64, 8 * 64, 64, 1}));
  GenerateAndCompile(t);
}

TEST(LayoutMemoryOrder, GroupNormKeepsItsGroupSplitUnderTheRemappedAxes) {
  // group_norm's [N, C, *] semantics are resolved by Lower (C splits into
  // (groups, C/groups) axes); the rewrite only reorders those axes.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kGroupNorm, {x}, {}, false, /*groups=*/8, {1e-5}));
  Task t = WithOutputLike(MakeTask(b.g, {ChannelsLast({2, 64, 8, 8})}), 0);
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_EQ(lo.F, (std::vector<int64_t>{2, 8, 8, 8, 8}));  // N, G, C/G, H, W
  ASSERT_EQ(lo.reduce_axes, (std::vector<int>{2, 3, 4}));
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  // N, H, W, G, C/G: the 8 channels of a group are adjacent in memory.
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 8, 8, 8, 8}));
  EXPECT_EQ(LoadOf(lo, 0)->strides, (std::vector<int64_t>{8 * 8 * 64, 8 * 64, 64, 8, 1}));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{1, 2, 4}));  // H, W, C/G; rows are (N, G)
  EXPECT_EQ(lo.outputs[0].strides, LoadOf(lo, 0)->strides);
  GenerateAndCompile(t);
}

TEST(LayoutMemoryOrder, PermuteAxesReindexesEveryNodeAndOutput) {
  tmpl::Lowered lo;
  lo.F = {2, 3, 5};
  tmpl::Node load;
  load.kind = tmpl::NodeKind::kLoad;
  load.shape = {2, 3, 5};
  load.strides = {15, 1, 3};
  tmpl::Node red;
  red.kind = tmpl::NodeKind::kReduce;
  red.args = {0};
  red.shape = {2, 1, 5};
  red.reduce_axes = {1};
  lo.nodes = {load, red};
  lo.reduce_axes = {1};
  tmpl::OutputRef out;
  out.node = 1;
  out.strides = {5, 0, 1};
  lo.outputs = {out};
  auto order = tmpl::MemoryOrder(lo);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(*order, (std::vector<int>{0, 2, 1}));
  tmpl::PermuteAxes(*order, &lo);
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 5, 3}));
  EXPECT_EQ(lo.nodes[0].strides, (std::vector<int64_t>{15, 3, 1}));
  EXPECT_EQ(lo.nodes[1].shape, (std::vector<int64_t>{2, 5, 1}));
  EXPECT_EQ(lo.nodes[1].reduce_axes, (std::vector<int>{2}));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{2}));
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{5, 1, 0}));
}

}  // namespace
}  // namespace dice::generator
