// transpose_test.cc — mixed-order elementwise groups get tiled-transpose
// candidates (generator/src/templates/layout.h TransposePlan, transpose.cc):
// a channels_last conv output through an epilogue into a contiguous output,
// and a contiguous -> channels_last copy, find their two orders (O of the
// outputs, I of the tiled loads) and innermost axes; single-order groups,
// reductions and three orders are refused; the transpose candidates come
// first and compile with NVRTC for sm_90 (f32, f16, bf16, partial tiles, a
// 64-bit index). Values are checked on the GPU (transpose_gpu_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../generator/src/templates/emit.h"
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

// channels_last strides of [N, C, H, W]: (H*W*C, 1, W*C, C).
ir::TensorSpec ChannelsLast(DType dt, std::vector<int64_t> shape) {
  ir::TensorSpec s = Spec(dt, shape);
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  s.strides = {h * w * c, 1, w * c, c};
  return s;
}

// channels_last_3d of [N, C, D, H, W]: (D*H*W*C, 1, H*W*C, W*C, C).
ir::TensorSpec ChannelsLast3d(DType dt, std::vector<int64_t> shape) {
  ir::TensorSpec s = Spec(dt, shape);
  const int64_t c = shape[1], d = shape[2], h = shape[3], w = shape[4];
  s.strides = {d * h * w * c, 1, h * w * c, w * c, c};
  return s;
}

tmpl::Lowered LowerOk(const Task& t) {
  auto lo = tmpl::Lower(t);
  EXPECT_TRUE(lo.ok()) << lo.status().ToString();
  return lo.ok() ? std::move(lo).value() : tmpl::Lowered{};
}

int LoadNode(const tmpl::Lowered& lo, int input) {
  for (size_t id = 0; id < lo.nodes.size(); ++id)
    if (lo.nodes[id].kind == tmpl::NodeKind::kLoad && lo.nodes[id].input == input) return static_cast<int>(id);
  return -1;
}

// relu(x + b): x channels_last [N,C,H,W], b [C,1,1]; the output is contiguous
// (Task::Make's default: the region's exit copy fused into the epilogue).
Task ConvEpilogueTask(DType dt, std::vector<int64_t> shape) {
  GraphBuilder b;
  int x = b.Input(dt, 4);
  int bias = b.Input(dt, 3);
  b.Output(b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {x, bias})}));
  return MakeTask(b.g, {ChannelsLast(dt, shape), Spec(dt, {shape[1], 1, 1})});
}

// The region's entry copy: a contiguous input, the group output (the input
// value itself, no op) channels_last.
Task CopyToChannelsLastTask(DType dt, std::vector<int64_t> shape) {
  GraphBuilder b;
  int x = b.Input(dt, 4);
  b.Output(x);
  Task t = MakeTask(b.g, {Spec(dt, shape)});
  if (!t.outputs.empty()) t.outputs[0].strides = ChannelsLast(dt, shape).strides;
  return t;
}

std::vector<Candidate> Generate(const Task& task, int max_candidates = 8) {
  TemplateGenerator gen;
  auto cands = gen.Generate(task, max_candidates);
  EXPECT_TRUE(cands.ok()) << task.Describe() << ": " << cands.status().ToString();
  return cands.ok() ? std::move(cands).value() : std::vector<Candidate>{};
}

// The transpose candidates of `task` (asserted to come first), compiled for sm_90.
std::vector<Candidate> TransposeCandidatesCompiled(const Task& task, size_t expect) {
  std::vector<Candidate> all = Generate(task);
  std::vector<Candidate> tr;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].origin.find("/transpose_t") == std::string::npos) continue;
    EXPECT_EQ(i, tr.size()) << "transpose candidates come first: " << all[i].origin;
    tr.push_back(all[i]);
  }
  EXPECT_EQ(tr.size(), expect) << task.Describe();
  auto built = runtime::CompileAll(tr, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_TRUE(built[i].ok()) << tr[i].origin << ": " << built[i].status().ToString() << "\n" << tr[i].source;
  return tr;
}

TEST(TransposePlan, ConvEpilogueChannelsLastIntoContiguous) {
  Task t = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_FALSE(tmpl::MemoryOrder(lo).has_value());
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->out_order, (std::vector<int>{0, 1, 2, 3}));  // contiguous NCHW
  EXPECT_EQ(p->in_order, (std::vector<int>{0, 2, 3, 1}));   // N, H, W, C
  EXPECT_EQ(p->a_out, 3);                                   // W
  EXPECT_EQ(p->a_in, 1);                                    // C
  EXPECT_EQ(p->tiled_loads, (std::vector<int>{LoadNode(lo, 0)}));
  EXPECT_EQ(p->direct_loads, (std::vector<int>{LoadNode(lo, 1)}));  // the bias, broadcast
}

TEST(TransposePlan, CopyContiguousIntoChannelsLast) {
  Task t = CopyToChannelsLastTask(DType::kFloat32, {8, 64, 56, 56});
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_EQ(lo.outputs.size(), 1u);
  EXPECT_EQ(lo.nodes[lo.outputs[0].node].kind, tmpl::NodeKind::kLoad);
  EXPECT_FALSE(tmpl::MemoryOrder(lo).has_value());
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->out_order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(p->in_order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p->a_out, 1);
  EXPECT_EQ(p->a_in, 3);
  EXPECT_EQ(p->tiled_loads.size(), 1u);
  EXPECT_TRUE(p->direct_loads.empty());
}

TEST(TransposePlan, ChannelsLast3dIntoContiguous) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 5);
  int y = b.Input(DType::kFloat32, 5);
  b.Output(b.Op(OpKind::kSigmoid, {b.Op(OpKind::kMul, {x, y})}));
  ir::TensorSpec s = ChannelsLast3d(DType::kFloat32, {2, 32, 4, 8, 8});
  Task t = MakeTask(b.g, {s, s});
  tmpl::Lowered lo = LowerOk(t);
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->in_order, (std::vector<int>{0, 2, 3, 4, 1}));
  EXPECT_EQ(p->a_out, 4);
  EXPECT_EQ(p->a_in, 1);
  EXPECT_EQ(p->tiled_loads.size(), 2u);
  TransposeCandidatesCompiled(t, 2);
}

TEST(TransposePlan, OutputOrderInputsAreReadDirectly) {
  // x channels_last, y contiguous like the output: only x goes through the tile.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int y = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kAdd, {x, y}));
  Task t = MakeTask(b.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 4}), Spec(DType::kFloat32, {2, 16, 4, 4})});
  tmpl::Lowered lo = LowerOk(t);
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tiled_loads, (std::vector<int>{LoadNode(lo, 0)}));
  EXPECT_EQ(p->direct_loads, (std::vector<int>{LoadNode(lo, 1)}));
}

TEST(TransposePlan, RefusesOneOrderReductionsAndThreeOrders) {
  // Every tensor contiguous, or every full-size tensor channels_last: one order.
  {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 4);
    b.Output(b.Op(OpKind::kRelu, {x}));
    EXPECT_FALSE(tmpl::TransposePlan(LowerOk(MakeTask(b.g, {Spec(DType::kFloat32, {2, 16, 4, 4})}))));
    Task cl = MakeTask(b.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 4})});
    cl.outputs[0].strides = cl.inputs[0].strides;
    tmpl::Lowered lo = LowerOk(cl);
    EXPECT_FALSE(tmpl::TransposePlan(lo));
    EXPECT_TRUE(tmpl::MemoryOrder(lo).has_value());
  }
  // A reduction (sum over C of a channels_last tensor, contiguous output).
  {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 4);
    b.Output(b.Op(OpKind::kSum, {b.Op(OpKind::kRelu, {x})}, {1}, /*keepdim=*/true));
    EXPECT_FALSE(tmpl::TransposePlan(LowerOk(MakeTask(b.g, {ChannelsLast(DType::kFloat32, {4, 64, 8, 8})}))));
  }
  // Three orders: x channels_last, y dense as (N, C, W, H), the output contiguous.
  {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 4);
    int y = b.Input(DType::kFloat32, 4);
    b.Output(b.Op(OpKind::kAdd, {x, y}));
    ir::TensorSpec nchw_t = Spec(DType::kFloat32, {2, 16, 4, 8});
    nchw_t.strides = {16 * 4 * 8, 4 * 8, 1, 4};
    EXPECT_FALSE(tmpl::TransposePlan(LowerOk(MakeTask(b.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 8}), nchw_t}))));
    // Two outputs in two orders.
    GraphBuilder b2;
    int x2 = b2.Input(DType::kFloat32, 4);
    b2.Output(b2.Op(OpKind::kRelu, {x2}));
    b2.Output(b2.Op(OpKind::kNeg, {x2}));
    Task t2 = MakeTask(b2.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 8})});
    t2.outputs[1].strides = t2.inputs[0].strides;
    EXPECT_FALSE(tmpl::TransposePlan(LowerOk(t2)));
  }
  // A full-size input that is not dense (expanded, stride 0).
  {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 4);
    int y = b.Input(DType::kFloat32, 4);
    b.Output(b.Op(OpKind::kAdd, {x, y}));
    ir::TensorSpec expanded = Spec(DType::kFloat32, {2, 16, 4, 4});
    expanded.strides = {0, 1, 0, 0};
    EXPECT_FALSE(tmpl::TransposePlan(LowerOk(MakeTask(b.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 4}), expanded}))));
  }
}

TEST(TransposePlan, SameInnermostAxisIsRefused) {
  // x dense as (N, H, C, W), the output contiguous: both innermost along W.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kRelu, {x}));
  ir::TensorSpec s = Spec(DType::kFloat32, {2, 16, 4, 8});
  s.strides = {16 * 4 * 8, 8, 16 * 8, 1};
  EXPECT_FALSE(tmpl::TransposePlan(LowerOk(MakeTask(b.g, {s}))));
}

TEST(TransposeCandidates, ConvEpilogueCompilesForEveryDtypeAndPartialTiles) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{2, 3, 5, 126}, std::vector<int64_t>{8, 64, 56, 56}}) {
      SCOPED_TRACE(std::string(ir::DTypeName(dt)) + " " + std::to_string(shape[1]) + "x" + std::to_string(shape[3]));
      auto tr = TransposeCandidatesCompiled(ConvEpilogueTask(dt, shape), 2);
      ASSERT_EQ(tr.size(), 2u);
      EXPECT_EQ(tr[0].origin, "template:elementwise/transpose_t32");
      EXPECT_EQ(tr[1].origin, "template:elementwise/transpose_t64");
      EXPECT_NE(tr[0].source.find("__shared__ float T0[32][33];"), std::string::npos) << tr[0].source;
      EXPECT_NE(tr[1].source.find("__shared__ float T0[64][65];"), std::string::npos);
      EXPECT_EQ(tr[0].source.find("__shared__ float T1"), std::string::npos) << "the bias is read directly";
      ASSERT_EQ(tr[0].plan.launches.size(), 1u);
      EXPECT_EQ(tr[0].plan.launches[0].block, (std::array<uint32_t, 3>{32, 8, 1}));
      EXPECT_EQ(tr[1].plan.launches[0].block, (std::array<uint32_t, 3>{64, 4, 1}));
      EXPECT_EQ(tr[0].plan.launches[0].shared_mem_bytes, 0u);
      // Tiles: N*H * ceil(C/TW) * ceil(W/TW).
      const int64_t tiles = shape[0] * shape[2] * ((shape[1] + 31) / 32) * ((shape[3] + 31) / 32);
      EXPECT_EQ(tr[0].plan.launches[0].grid[0], static_cast<uint32_t>(std::min<int64_t>(tiles, 132 * 8 * 4)));
      EXPECT_NE(tr[0].source.find("unsigned t = blockIdx.x"), std::string::npos);
    }
  }
}

TEST(TransposeCandidates, CopyIntoChannelsLastCompiles) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    auto tr = TransposeCandidatesCompiled(CopyToChannelsLastTask(dt, {2, 3, 5, 126}), 2);
    TransposeCandidatesCompiled(CopyToChannelsLastTask(dt, {8, 64, 56, 56}), 2);
  }
}

TEST(TransposeCandidates, BroadcastOutputIsStoredOnceGuarded) {
  // relu(x + b) into a contiguous output, and b * 2 ([C,1,1]) as a second output.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int bias = b.Input(DType::kFloat32, 3);
  b.Output(b.Op(OpKind::kRelu, {b.Op(OpKind::kAdd, {x, bias})}));
  b.Output(b.Op(OpKind::kMul, {bias, b.Const(2.0)}));
  Task t = MakeTask(b.g, {ChannelsLast(DType::kFloat32, {2, 40, 6, 70}), Spec(DType::kFloat32, {40, 1, 1})});
  ASSERT_TRUE(tmpl::TransposePlan(LowerOk(t)).has_value());
  auto tr = TransposeCandidatesCompiled(t, 2);
  ASSERT_FALSE(tr.empty());
  const std::string guarded = "if ((tb % 6u) == 0 && ((tb / 6u) % 2u) == 0 && xo == 0) dice_st(out1 + bo1 + xi, ";
  EXPECT_NE(tr[0].source.find(guarded), std::string::npos) << tr[0].source;
}

TEST(TransposeCandidates, WideIndexCompiles) {
  // 2 x 64 x 4096 x 4096 = 2^31 elements: 64-bit indices.
  Task t = ConvEpilogueTask(DType::kBFloat16, {2, 64, 4096, 4096});
  ASSERT_TRUE(tmpl::NeedsWideIndex(LowerOk(t)));
  auto tr = TransposeCandidatesCompiled(t, 2);
  ASSERT_FALSE(tr.empty());
  EXPECT_NE(tr[0].source.find("unsigned long long t = blockIdx.x"), std::string::npos) << tr[0].source;
}

TEST(TransposeCandidates, TileCountCapsTheVariants) {
  // k channels_last inputs summed into a contiguous output: one tile each.
  auto task_with = [](int k) {
    GraphBuilder b;  // inputs first: op value ids follow the inputs
    for (int i = 0; i < k; ++i) b.Input(DType::kFloat32, 4);
    int acc = 0;
    for (int i = 1; i < k; ++i) acc = b.Op(OpKind::kAdd, {acc, i});
    b.Output(acc);
    return MakeTask(b.g, std::vector<ir::TensorSpec>(k, ChannelsLast(DType::kFloat32, {2, 40, 6, 70})));
  };
  auto tr3 = TransposeCandidatesCompiled(task_with(3), 1);  // 3 x 16.3 KB > 48 KB: no t64
  ASSERT_EQ(tr3.size(), 1u);
  EXPECT_EQ(tr3[0].origin, "template:elementwise/transpose_t32");
  EXPECT_NE(tr3[0].source.find("__shared__ float T2[32][33];"), std::string::npos);
  TransposeCandidatesCompiled(task_with(4), 1);
  TransposeCandidatesCompiled(task_with(5), 0);  // more than 4 tiles: the strided walk only
}

TEST(TransposeCandidates, MaxCandidatesCapsTheTotal) {
  Task t = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  auto one = Generate(t, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].origin, "template:elementwise/transpose_t32");
  auto all = Generate(t, 8);
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(all[2].origin.find("template:elementwise/b"), 0u) << all[2].origin;  // the strided walk follows
}

}  // namespace
}  // namespace dice::generator
