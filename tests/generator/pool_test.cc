// pool_test.cc — windowed pools (ir avg_pool / max_pool: stride = window, no
// padding) as row-family reductions (issue 18: the pools after conv
// epilogues). Lower splits each pooled spatial axis into (windows, window)
// and reduces the inner parts; the pooled output is strided along the outer
// parts only; channels_last inputs are walked with C innermost (layout.h);
// the candidates compile with NVRTC for sm_90 (no GPU needed; values are
// checked against ATen's pools by the verifier on the GPU,
// tests/generator/pool_gpu_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../generator/src/templates/layout.h"
#include "../../generator/src/templates/lowering.h"
#include "dice/core/tensor_layout.h"
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

tmpl::Lowered LowerOk(const Task& t) {
  auto lo = tmpl::Lower(t);
  EXPECT_TRUE(lo.ok()) << lo.status().ToString();
  return lo.ok() ? std::move(lo).value() : tmpl::Lowered{};
}

// Generates every candidate, compiles up to `compile_n` of them (NVRTC,
// sm_90) and expects each to build; returns all.
std::vector<Candidate> CompileSome(const Task& task, size_t compile_n = 4) {
  TemplateGenerator gen;
  auto cands = gen.Generate(task, 8);
  EXPECT_TRUE(cands.ok()) << task.Describe() << ": " << cands.status().ToString();
  if (!cands.ok()) return {};
  EXPECT_FALSE(cands->empty());
  std::vector<Candidate> some(cands->begin(), cands->begin() + std::min(compile_n, cands->size()));
  auto built = runtime::CompileAll(some, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_TRUE(built[i].ok()) << some[i].origin << ": " << built[i].status().ToString() << "\n" << some[i].source;
  return *cands;
}

// x [N, C, S...] -> kind(x, window).
Task PoolTask(OpKind kind, const ir::TensorSpec& x, std::vector<int64_t> window) {
  GraphBuilder b;
  int in = b.Input(x.dtype, static_cast<int>(x.shape.size()));
  b.Output(b.Op(kind, {in}, std::move(window)));
  auto t = MakeServedTask(b.g, {x}, TargetInfo{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : Task{};
}

TEST(PoolLowering, EachPooledAxisSplitsIntoWindowsAndTheWindowIsReduced) {
  Task t = PoolTask(OpKind::kAvgPool, Spec(DType::kFloat32, {2, 3, 8, 6}), {2, 3});
  ASSERT_EQ(t.outputs[0].shape, (std::vector<int64_t>{2, 3, 4, 2}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 3, 4, 2, 2, 3}));  // N, C, H/2, 2, W/3, 3
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{3, 5}));
  const tmpl::Node* load = nullptr;
  for (const auto& n : lo.nodes)
    if (n.kind == tmpl::NodeKind::kLoad) load = &n;
  ASSERT_NE(load, nullptr);
  EXPECT_EQ(load->strides, (std::vector<int64_t>{144, 48, 12, 6, 3, 1}));
  // The [2, 3, 4, 2] output: its own contiguous strides on N, C and the windows, 0 inside them.
  ASSERT_EQ(lo.outputs.size(), 1u);
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{24, 8, 2, 0, 1, 0}));
  auto cands = CompileSome(t);
  ASSERT_FALSE(cands.empty());
  EXPECT_EQ(cands[0].origin.rfind("template:row/", 0), 0u) << cands[0].origin;
}

TEST(PoolLowering, AWindowOfOneLeavesItsAxisWhole) {
  Task t = PoolTask(OpKind::kMaxPool, Spec(DType::kFloat32, {2, 4, 5, 8}), {1, 4});
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 4, 5, 2, 4}));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{4}));
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{40, 10, 2, 1, 0}));
  CompileSome(t, 2);
}

TEST(PoolLowering, OneTwoAndThreeSpatialDimsCompileInEveryDtype) {
  struct Case {
    ir::TensorSpec x;
    std::vector<int64_t> window;
  };
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const Case& c : {Case{Spec(dt, {4, 8, 64}), {4}}, Case{Spec(dt, {2, 16, 32, 32}), {2, 2}},
                          Case{Spec(dt, {2, 8, 8, 16, 16}), {2, 2, 2}}}) {
      for (OpKind k : {OpKind::kAvgPool, OpKind::kMaxPool}) {
        SCOPED_TRACE(ir::DTypeName(dt) + std::string(" ") + ir::GetOpInfo(k).name + " rank " +
                     std::to_string(c.x.shape.size()));
        CompileSome(PoolTask(k, c.x, c.window), 2);
      }
    }
  }
}

TEST(PoolLowering, TheEpilogueBeforeAndTheOpsAfterThePoolAreOneKernel) {
  // KernelBench level2/46's tail: conv -> sub -> tanh -> sub -> avg_pool,
  // then a per-channel bias and a scale on the pooled values.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4), bias = b.Input(DType::kFloat32, 3);
  int y = b.Op(OpKind::kSub, {b.Op(OpKind::kTanh, {b.Op(OpKind::kSub, {x, b.Const(0.5)})}), b.Const(0.2)});
  int p = b.Op(OpKind::kAvgPool, {y}, {2, 2});
  b.Output(b.Op(OpKind::kMul, {b.Op(OpKind::kAdd, {p, bias}), b.Const(2.0)}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {8, 16, 30, 30}), Spec(DType::kFloat32, {16, 1, 1})});
  ASSERT_EQ(t.outputs[0].shape, (std::vector<int64_t>{8, 16, 15, 15}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_EQ(lo.F, (std::vector<int64_t>{8, 16, 15, 2, 15, 2}));
  EXPECT_EQ(lo.num_reduces, 1);
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{16 * 225, 225, 15, 0, 1, 0}));
  CompileSome(t);
}

TEST(PoolLowering, APrePoolValueThatIsAlsoAnOutputIsWrittenWhole) {
  // relu(x) is an output and pooled: the kernel writes relu(x) at full size
  // and the pool once per window.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int r = b.Op(OpKind::kRelu, {x});
  b.Output(r);
  b.Output(b.Op(OpKind::kMaxPool, {r}, {2, 2}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {2, 4, 8, 8})});
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_EQ(lo.outputs.size(), 2u);
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{256, 64, 16, 8, 2, 1}));
  EXPECT_EQ(lo.outputs[1].strides, (std::vector<int64_t>{64, 16, 4, 0, 1, 0}));
  CompileSome(t, 2);
}

TEST(PoolLowering, ChannelsLastIsPooledWithChannelsInnermostAndStaysChannelsLast) {
  ir::TensorSpec x = Spec(DType::kFloat32, {4, 32, 8, 8});
  x.strides = {8 * 8 * 32, 1, 8 * 32, 32};
  Task t = PoolTask(OpKind::kAvgPool, x, {2, 2});
  // Eager's pool of a channels_last tensor is channels_last (tensor_layout.h).
  EXPECT_EQ(t.outputs[0].strides, (std::vector<int64_t>{4 * 4 * 32, 1, 4 * 32, 32}));
  tmpl::Lowered lo = LowerOk(t);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{4, 4, 2, 4, 2, 32}));  // N, H/2, 2, W/2, 2, C
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{2, 4}));
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{512, 128, 0, 32, 0, 1}));
  CompileSome(t);
}

TEST(PoolLowering, FloorModeIteratesOverTheCoveredPartOfAnUnevenAxis) {
  // 63 rows in windows of 2: torch's floor mode reads rows 0..61 and drops
  // row 62 (KernelBench's ConvTranspose3d outputs of odd extent).
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 5), bias = b.Input(DType::kFloat32, 4);
  int y = b.Op(OpKind::kMul, {b.Op(OpKind::kAdd, {x, bias}), b.Const(0.5)});
  b.Output(b.Op(OpKind::kAvgPool, {y}, {2, 2, 2}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {2, 4, 7, 63, 10}), Spec(DType::kFloat32, {4, 1, 1, 1})});
  ASSERT_EQ(t.outputs[0].shape, (std::vector<int64_t>{2, 4, 3, 31, 5}));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 4, 3, 2, 31, 2, 5, 2}));
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{3, 5, 7}));
  const tmpl::Node* load = nullptr;
  for (const auto& n : lo.nodes)
    if (n.kind == tmpl::NodeKind::kLoad && n.input == 0) load = &n;
  ASSERT_NE(load, nullptr);
  // The input keeps its own strides over its 7 x 63 x 10 extent.
  EXPECT_EQ(load->strides, (std::vector<int64_t>{4 * 4410, 4410, 1260, 630, 20, 10, 2, 1}));
  EXPECT_EQ(lo.outputs[0].strides, (std::vector<int64_t>{4 * 465, 465, 155, 0, 5, 0, 1, 0}));
  CompileSome(t, 2);
}

TEST(PoolLowering, AnUnevenChannelsLast3dInputIsStillWalkedWithChannelsInnermost) {
  // ConvTranspose3d -> max_pool 2 over [N, C, 63, 63, 63] in channels_last_3d:
  // the input is row-major with gaps in (N, D, H, W, C) order.
  const std::vector<int64_t> shape = {2, 16, 7, 9, 5};
  ir::TensorSpec x = Spec(DType::kFloat32, shape);
  x.strides = LayoutStrides(shape, TensorLayout::kChannelsLast3d);
  Task t = PoolTask(OpKind::kMaxPool, x, {2, 2, 2});
  EXPECT_EQ(t.outputs[0].strides, LayoutStrides({2, 16, 3, 4, 2}, TensorLayout::kChannelsLast3d));
  tmpl::Lowered lo = LowerOk(t);
  EXPECT_TRUE(lo.pool_gaps);
  ASSERT_TRUE(tmpl::ToMemoryOrder(&lo));
  EXPECT_EQ(lo.F, (std::vector<int64_t>{2, 3, 2, 4, 2, 2, 2, 16}));  // N, D/2, 2, H/2, 2, W/2, 2, C
  EXPECT_EQ(lo.reduce_axes, (std::vector<int>{2, 4, 6}));
  CompileSome(t, 2);
}

TEST(PoolLowering, RefusedPatternsNameTheirCause) {
  TemplateGenerator gen;
  // relu(x) is an output at its full 7 rows, but the pool's iteration covers 6.
  GraphBuilder u;
  int ux = u.Input(DType::kFloat32, 4);
  int relu = u.Op(OpKind::kRelu, {ux});
  u.Output(relu);
  u.Output(u.Op(OpKind::kMaxPool, {relu}, {2, 2}));
  auto odd = gen.Generate(MakeTask(u.g, {Spec(DType::kFloat32, {2, 3, 7, 6})}), 4);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(odd.status().message().find("output 0 holds all 7 elements of an axis whose pool reads only the first 6"),
            std::string::npos)
      << odd.status().ToString();
  // A full-size tensor read after the pool lives on the windows' extent, which the split space cannot hold.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4), r = b.Input(DType::kFloat32, 4);
  b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kMaxPool, {x}, {2, 2}), r}));
  auto mixed = gen.Generate(MakeTask(b.g, {Spec(DType::kFloat32, {2, 3, 8, 8}), Spec(DType::kFloat32, {2, 3, 4, 4})}), 4);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kUnsupported) << mixed.status().ToString();
}

}  // namespace
}  // namespace dice::generator
