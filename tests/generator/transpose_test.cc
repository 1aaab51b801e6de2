// transpose_test.cc — mixed-order elementwise groups get tiled-transpose
// candidates (generator/src/templates/layout.h TransposePlan, transpose.cc):
// a channels_last conv output through an epilogue into a contiguous output,
// and a contiguous -> channels_last copy, find their two orders (O of the
// outputs, I of the tiled loads) and innermost axes; single-order groups,
// reductions and three orders are refused; the transpose candidates come
// first and compile with NVRTC for sm_90 (f32, f16, bf16, partial tiles, a
// 64-bit index). The vectorised variants (t32v*, t64v*, t64v*_b128) are
// emitted exactly when a side's vector width is provable from the baked
// strides, extents and pointer alignments (odd extents, 4-byte aligned
// pointers and non-unit strides give none), with the widths each dtype
// allows, mixed dtypes included, and compile too. There is no CPU evaluation
// of generated kernels: values are checked on the GPU (transpose_gpu_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../generator/src/templates/emit.h"
#include "../../generator/src/templates/families.h"
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
using tmpl_test::IsFlatOrigin;
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

// The transpose candidates of `task` over its unmerged axes (asserted to
// come first), compiled for sm_90. The tiles over merged axes (IsFlatOrigin)
// are tested on their own (TransposeCandidates.MergedAxesCandidatesFollowAndCompile).
std::vector<Candidate> TransposeCandidatesCompiled(const Task& task, size_t expect) {
  std::vector<Candidate> all = Generate(task);
  std::vector<Candidate> tr;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].origin.find("/transpose_t") == std::string::npos || IsFlatOrigin(all[i].origin)) continue;
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
  TransposeCandidatesCompiled(t, 5);  // C = 32, W = 8: float4 both ways
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
      auto tr = TransposeCandidatesCompiled(ConvEpilogueTask(dt, shape), 5);
      ASSERT_EQ(tr.size(), 5u);
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
      // Vectorised: C = 3 loads one element at a time, W = 126 stores 2 (126 % 4 != 0);
      // C = 64, W = 56: 16 bytes where the thread's share allows (t32: 4 elements).
      const bool small = shape[1] == 3;
      const bool f32 = dt == DType::kFloat32;
      const std::string t32 = small ? "v1x2" : "v4x4", t64 = small ? "v1x2" : (f32 ? "v4x4" : "v8x8");
      EXPECT_EQ(tr[2].origin, "template:elementwise/transpose_t32" + t32);
      EXPECT_EQ(tr[3].origin, "template:elementwise/transpose_t64" + t64);
      EXPECT_EQ(tr[4].origin, "template:elementwise/transpose_t64" + t64 + "_b128");
      EXPECT_EQ(tr[2].plan.launches[0].block, (std::array<uint32_t, 3>{256, 1, 1}));
      EXPECT_EQ(tr[3].plan.launches[0].block, (std::array<uint32_t, 3>{256, 1, 1}));
      EXPECT_EQ(tr[4].plan.launches[0].block, (std::array<uint32_t, 3>{128, 1, 1}));
      EXPECT_EQ(tr[2].plan.launches[0].grid[0], tr[0].plan.launches[0].grid[0]);
      EXPECT_NE(tr[2].source.find("__shared__ float T0[32][33];"), std::string::npos);
      EXPECT_NE(tr[4].source.find("__shared__ float T0[64][65];"), std::string::npos);
      const std::string ct = tmpl::CType(dt);
      if (small) {
        EXPECT_EQ(tr[3].source.find("dice_ldw<"), std::string::npos) << "C = 3: scalar tile loads";
        EXPECT_NE(tr[3].source.find("dice_stw<" + ct + ", 2>(out0 + "), std::string::npos) << tr[3].source;
      } else {
        const std::string v = f32 ? "4" : "8";
        EXPECT_NE(tr[3].source.find("dice_ldw<" + ct + ", " + v + ">(in0 + "), std::string::npos) << tr[3].source;
        EXPECT_NE(tr[3].source.find("dice_stw<" + ct + ", " + v + ">(out0 + "), std::string::npos);
      }
    }
  }
}

TEST(TransposeCandidates, CopyIntoChannelsLastCompiles) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    auto tr = TransposeCandidatesCompiled(CopyToChannelsLastTask(dt, {2, 3, 5, 126}), 5);
    TransposeCandidatesCompiled(CopyToChannelsLastTask(dt, {8, 64, 56, 56}), 5);
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
  auto tr = TransposeCandidatesCompiled(t, 5);
  ASSERT_EQ(tr.size(), 5u);
  const std::string guarded = "if ((tb % 6u) == 0 && ((tb / 6u) % 2u) == 0 && xo == 0) dice_st(out1 + bo1 + xi, ";
  EXPECT_NE(tr[0].source.find(guarded), std::string::npos) << tr[0].source;
  // The vectorised variant (float4 loads: C = 40; float2 stores: W = 70) stores
  // the broadcast output element by element, once, at xk (element k of the run).
  EXPECT_EQ(tr[2].origin, "template:elementwise/transpose_t32v4x2");
  const std::string guarded_k = "if ((tb % 6u) == 0 && ((tb / 6u) % 2u) == 0 && xk == 0) dice_st(out1 + bo1 + xi, ";
  EXPECT_NE(tr[2].source.find(guarded_k), std::string::npos) << tr[2].source;
  EXPECT_NE(tr[2].source.find("dice_stw<float, 2>(out0 + "), std::string::npos);
}

TEST(TransposeCandidates, WideIndexCompiles) {
  // 2 x 64 x 4096 x 4096 = 2^31 elements: 64-bit indices.
  Task t = ConvEpilogueTask(DType::kBFloat16, {2, 64, 4096, 4096});
  ASSERT_TRUE(tmpl::NeedsWideIndex(LowerOk(t)));
  auto tr = TransposeCandidatesCompiled(t, 5);
  ASSERT_EQ(tr.size(), 5u);
  EXPECT_NE(tr[0].source.find("unsigned long long t = blockIdx.x"), std::string::npos) << tr[0].source;
  EXPECT_EQ(tr[3].origin, "template:elementwise/transpose_t64v8x8");
  EXPECT_NE(tr[3].source.find("unsigned long long t = blockIdx.x"), std::string::npos) << tr[3].source;
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
  auto tr3 = TransposeCandidatesCompiled(task_with(3), 2);  // 3 x 16.3 KB > 48 KB: no t64, t64v*
  ASSERT_EQ(tr3.size(), 2u);
  EXPECT_EQ(tr3[0].origin, "template:elementwise/transpose_t32");
  EXPECT_EQ(tr3[1].origin, "template:elementwise/transpose_t32v4x2");
  EXPECT_NE(tr3[0].source.find("__shared__ float T2[32][33];"), std::string::npos);
  EXPECT_NE(tr3[1].source.find("__shared__ float T2[32][33];"), std::string::npos);
  TransposeCandidatesCompiled(task_with(4), 2);
  TransposeCandidatesCompiled(task_with(5), 0);  // more than 4 tiles: the strided walk only
}

TEST(TransposeCandidates, MaxCandidatesCapsTheTotal) {
  Task t = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  auto one = Generate(t, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].origin, "template:elementwise/transpose_t32");
  auto all = Generate(t, 8);
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(all[1].origin, "template:elementwise/transpose_t64");
  EXPECT_EQ(all[4].origin, "template:elementwise/transpose_t64v4x4_b128");
  EXPECT_EQ(all[5].origin, "template:elementwise/transpose_t32_flat");  // the tiles over H * W follow
  auto more = Generate(t, 16);
  ASSERT_EQ(more.size(), 16u);
  EXPECT_EQ(more[9].origin, "template:elementwise/transpose_t64v4x4_b128_flat");
  EXPECT_EQ(more[10].origin.find("template:elementwise/b"), 0u) << more[10].origin;  // then the strided walk
}

std::vector<std::string> Origins(const std::vector<Candidate>& cands) {
  std::vector<std::string> out;
  for (const auto& c : cands) out.push_back(c.origin.substr(c.origin.rfind('/') + 1));
  return out;
}

TEST(MergeAdjacentAxes, ChannelsLastEpilogueMergesHAndWOnly) {
  // x channels_last [2, 64, 5, 65] (strides 20800, 1, 4160, 64) + b [64, 1, 1]
  // into NCHW: (H, W) is one walk in both layouts and in the bias's
  // broadcast; (N, C) and (C, H) are not (x's C is its innermost axis).
  tmpl::Lowered lo = LowerOk(ConvEpilogueTask(DType::kFloat32, {2, 64, 5, 65}));
  ASSERT_TRUE(tmpl::MergeAdjacentAxes(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 64, 325}));
  const int x = LoadNode(lo, 0), b = LoadNode(lo, 1);
  ASSERT_GE(x, 0);
  ASSERT_GE(b, 0);
  EXPECT_EQ(lo.nodes[x].strides, (std::vector<int64_t>{20800, 1, 64}));
  EXPECT_EQ(lo.nodes[b].shape, (std::vector<int64_t>{1, 64, 1}));
  ASSERT_EQ(lo.outputs.size(), 1u);
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{20800, 325, 1}));
  EXPECT_FALSE(tmpl::MergeAdjacentAxes(&lo));  // nothing left to merge
  // A reduction is left as it is.
  GraphBuilder g;
  int in = g.Input(DType::kFloat32, 4);
  g.Output(g.Op(OpKind::kSum, {in}, {1}, true));
  tmpl::Lowered red = LowerOk(MakeTask(g.g, {ChannelsLast(DType::kFloat32, {2, 64, 5, 65})}));
  const auto f = red.F;
  EXPECT_FALSE(tmpl::MergeAdjacentAxes(&red));
  EXPECT_EQ(red.F, f);
}

TEST(TransposeCandidates, MergedAxesCandidatesFollowAndCompile) {
  // W = 65: a 64-wide tile leaves a tile of width 1 on each of the N * H rows;
  // over H * W = 325 the partial tile comes once per (n, channel tile).
  Task t = ConvEpilogueTask(DType::kFloat32, {2, 64, 5, 65});
  std::vector<Candidate> all = Generate(t, 16);
  std::vector<Candidate> flat;
  size_t first_flat = all.size(), last_plain = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& o = all[i].origin;
    if (IsFlatOrigin(o)) {
      flat.push_back(all[i]);
      first_flat = std::min(first_flat, i);
    } else if (o.find("/transpose_t") != std::string::npos) {
      last_plain = i;
    }
  }
  EXPECT_EQ(Origins(flat), (std::vector<std::string>{"transpose_t32_flat", "transpose_t64_flat",
                                                     "transpose_t32v4x1_flat", "transpose_t64v4x1_flat",
                                                     "transpose_t64v4x1_b128_flat"}));
  EXPECT_GT(first_flat, last_plain);  // after the unmerged transposes, before the strided walk
  ASSERT_EQ(flat.size(), 5u);
  // Tiles: N * ceil(C / TW) * ceil(H * W / TW) = 2 * 1 * 6, against N * H * 1 * 2 = 20 unmerged.
  EXPECT_EQ(flat[1].plan.launches[0].grid[0], 12u);
  auto built = runtime::CompileAll(flat, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_TRUE(built[i].ok()) << flat[i].origin << ": " << built[i].status().ToString() << "\n" << flat[i].source;
}

TEST(TransposeCandidates, AMergeOutsideTheTilePlaneAddsNoFlatCandidates) {
  // relu(x) with x [4, 8, 48, 40] W-major in each (n, c) plane (strides
  // 8*48*40, 48*40, 1, 48: a transposed view), written contiguous. The tile
  // plane is (H, W); only N and C merge, so the merged tiles would move
  // exactly what the unmerged ones do.
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kRelu, {x}));
  ir::TensorSpec in = Spec(DType::kFloat32, {4, 8, 48, 40});
  in.strides = {8 * 48 * 40, 48 * 40, 1, 48};
  const Task t = MakeTask(b.g, {in});
  tmpl::Lowered lo = LowerOk(t);
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->a_out, 3);
  EXPECT_EQ(p->a_in, 2);
  tmpl::Lowered flat = lo;
  ASSERT_TRUE(tmpl::MergeAdjacentAxes(&flat));  // N and C do merge
  EXPECT_EQ(flat.F, (std::vector<int64_t>{32, 48, 40}));
  int plain = 0;
  for (const Candidate& c : Generate(t, 16)) {
    EXPECT_FALSE(IsFlatOrigin(c.origin)) << c.origin;
    plain += c.origin.find("/transpose_t") != std::string::npos;
  }
  EXPECT_GE(plain, 2);
}

tmpl::TransposeVecWidths Widths(const Task& t) {
  tmpl::Lowered lo = LowerOk(t);
  auto p = tmpl::TransposePlan(lo);
  EXPECT_TRUE(p.has_value()) << t.Describe();
  return p ? tmpl::TransposeVectorWidths(lo, *p) : tmpl::TransposeVecWidths{};
}

TEST(TransposeVectorWidths, FollowTheDtypeAndTheExtents) {
  auto w = Widths(ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56}));
  EXPECT_EQ(w.in, 4);  // 16 bytes of f32
  EXPECT_EQ(w.out, 4);
  w = Widths(ConvEpilogueTask(DType::kBFloat16, {8, 64, 56, 56}));
  EXPECT_EQ(w.in, 8);  // 16 bytes of bf16
  EXPECT_EQ(w.out, 8);
  w = Widths(ConvEpilogueTask(DType::kFloat16, {8, 64, 56, 60}));
  EXPECT_EQ(w.in, 8);
  EXPECT_EQ(w.out, 4);  // 60 % 8 != 0
  // The 260 MB epilogue of issue 18: C = 128 loads float4, W = 126 rows start 8-byte aligned.
  w = Widths(ConvEpilogueTask(DType::kFloat32, {32, 128, 126, 126}));
  EXPECT_EQ(w.in, 4);
  EXPECT_EQ(w.out, 2);
  // The copy into channels_last: a_in = W, a_out = C.
  w = Widths(CopyToChannelsLastTask(DType::kBFloat16, {8, 64, 56, 58}));
  EXPECT_EQ(w.in, 2);  // 58 % 4 != 0
  EXPECT_EQ(w.out, 8);
}

TEST(TransposeVectorWidths, OddExtentsGetNoVectorVariants) {
  // C = 3 (a_in) and W = 125 (a_out): neither side provable.
  Task t = ConvEpilogueTask(DType::kFloat32, {2, 3, 5, 125});
  auto w = Widths(t);
  EXPECT_EQ(w.in, 1);
  EXPECT_EQ(w.out, 1);
  auto tr = TransposeCandidatesCompiled(t, 2);
  EXPECT_EQ(Origins(tr), (std::vector<std::string>{"transpose_t32", "transpose_t64"}));
  // One odd side only: the other is still vectorised.
  EXPECT_EQ(Origins(TransposeCandidatesCompiled(ConvEpilogueTask(DType::kFloat32, {2, 64, 5, 125}), 5)),
            (std::vector<std::string>{"transpose_t32", "transpose_t64", "transpose_t32v4x1", "transpose_t64v4x1",
                                      "transpose_t64v4x1_b128"}));
}

TEST(TransposeVectorWidths, PointerAlignmentBoundsTheWidth) {
  Task t = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  t.inputs[0].alignment = 8;  // x at an 8-byte offset: float2 at most
  EXPECT_EQ(Widths(t).in, 2);
  t.inputs[0].alignment = 4;
  EXPECT_EQ(Widths(t).in, 1);
  EXPECT_EQ(Widths(t).out, 4);
  t.outputs[0].alignment = 4;
  EXPECT_EQ(Widths(t).out, 1);
  TransposeCandidatesCompiled(t, 2);  // neither side: no vectorised variant
  // The bias (a direct load) does not bound the widths.
  Task b = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  b.inputs[1].alignment = 4;
  EXPECT_EQ(Widths(b).in, 4);
  EXPECT_EQ(Widths(b).out, 4);
}

TEST(TransposeVectorWidths, NonUnitOrUnalignedStridesAreRefused) {
  // TransposePlan only admits dense tensors, so the strides are edited after it:
  // the predicate itself must refuse what it cannot prove.
  Task t = ConvEpilogueTask(DType::kFloat32, {8, 64, 56, 56});
  tmpl::Lowered lo = LowerOk(t);
  auto p = tmpl::TransposePlan(lo);
  ASSERT_TRUE(p.has_value());
  const int x = p->tiled_loads[0];
  tmpl::Lowered a = lo;
  a.nodes[x].strides[p->a_in] = 2;  // not stride 1 along a_in
  EXPECT_EQ(tmpl::TransposeVectorWidths(a, *p).in, 1);
  tmpl::Lowered b = lo;
  b.nodes[x].strides[p->a_out] = 66;  // rows 2 but not 4 elements apart
  EXPECT_EQ(tmpl::TransposeVectorWidths(b, *p).in, 2);
  tmpl::Lowered c = lo;
  c.outputs[0].strides[p->a_out] = 2;  // the output not stride 1 along a_out
  EXPECT_EQ(tmpl::TransposeVectorWidths(c, *p).out, 1);
  EXPECT_EQ(tmpl::TransposeVectorWidths(c, *p).in, 4);
  c.nodes[x].strides[p->a_in] = 3;
  EXPECT_EQ(Origins(tmpl::TransposeCandidates(c, *p, 8, TargetInfo{})),
            (std::vector<std::string>{"transpose_t32", "transpose_t64"}));
}

TEST(TransposeCandidates, MixedDtypesGetWidthsPerSide) {
  // relu(float(x) + b): x bf16 channels_last, b and the output f32.
  GraphBuilder g;
  int x = g.Input(DType::kBFloat16, 4);
  int bias = g.Input(DType::kFloat32, 3);
  int xf = g.Op(OpKind::kCast, {x}, {}, false, static_cast<int64_t>(DType::kFloat32));
  g.Output(g.Op(OpKind::kRelu, {g.Op(OpKind::kAdd, {xf, bias})}));
  Task t = MakeTask(g.g, {ChannelsLast(DType::kBFloat16, {8, 64, 56, 56}), Spec(DType::kFloat32, {64, 1, 1})});
  ASSERT_EQ(t.outputs[0].dtype, DType::kFloat32);
  auto w = Widths(t);
  EXPECT_EQ(w.in, 8);   // 16 bytes of bf16
  EXPECT_EQ(w.out, 4);  // 16 bytes of f32
  auto tr = TransposeCandidatesCompiled(t, 5);
  ASSERT_EQ(Origins(tr), (std::vector<std::string>{"transpose_t32", "transpose_t64", "transpose_t32v4x4",
                                                   "transpose_t64v8x4", "transpose_t64v8x4_b128"}));
  EXPECT_NE(tr[3].source.find("dice_ldw<__nv_bfloat16, 8>(in0 + "), std::string::npos) << tr[3].source;
  EXPECT_NE(tr[3].source.find("dice_stw<float, 4>(out0 + "), std::string::npos);
  EXPECT_NE(tr[2].source.find("dice_ldw<__nv_bfloat16, 4>(in0 + "), std::string::npos) << "t32: 4 per thread";
}

TEST(TransposeCandidates, DirectLoadsAreReadWideWhereProvable) {
  // x channels_last, y contiguous like the output, z [W] broadcast, b [C,1,1] broadcast.
  GraphBuilder g;
  int x = g.Input(DType::kFloat32, 4);
  int y = g.Input(DType::kFloat32, 4);
  int z = g.Input(DType::kFloat32, 1);
  int bias = g.Input(DType::kFloat32, 3);
  g.Output(g.Op(OpKind::kMul, {g.Op(OpKind::kAdd, {g.Op(OpKind::kAdd, {x, y}), z}), bias}));
  Task t = MakeTask(g.g, {ChannelsLast(DType::kFloat32, {2, 16, 4, 8}), Spec(DType::kFloat32, {2, 16, 4, 8}),
                          Spec(DType::kFloat32, {8}), Spec(DType::kFloat32, {16, 1, 1})});
  auto tr = TransposeCandidatesCompiled(t, 5);
  ASSERT_EQ(tr.size(), 5u);
  EXPECT_EQ(tr[2].origin, "template:elementwise/transpose_t32v4x4");
  const std::string& src = tr[2].source;
  EXPECT_NE(src.find("dice_ldw<float, 4>(in1 + "), std::string::npos) << src;  // y
  EXPECT_NE(src.find("dice_ldw<float, 4>(in2 + "), std::string::npos) << src;  // z along W
  EXPECT_NE(src.find("dice_ld(in3 + "), std::string::npos) << src;             // b: one value per row
  EXPECT_EQ(src.find("dice_ldw<float, 4>(in3"), std::string::npos);
  // y 8-byte aligned: read one element at a time, the rest stays wide.
  t.inputs[1].alignment = 8;
  tr = TransposeCandidatesCompiled(t, 5);
  EXPECT_EQ(tr[2].source.find("dice_ldw<float, 4>(in1 + "), std::string::npos) << tr[2].source;
  EXPECT_NE(tr[2].source.find("dice_ld(in1 + "), std::string::npos);
  EXPECT_NE(tr[2].source.find("xk"), std::string::npos) << "the scalar reads walk the run";
}

}  // namespace
}  // namespace dice::generator
