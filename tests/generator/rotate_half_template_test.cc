// rotate_half (ir.h kRotateHalf) in the template generator (lowering.h):
// the row family pushes the rotation down to its loads — the argument's
// loads read the element d/2 away along the rotated axis and a RotSign leaf
// negates the first half — so a norm + RoPE group (Qwen3's q/k RMSNorm +
// RoPE) is one row kernel. The candidates compile with NVRTC for sm_90 (no
// GPU needed; their values are checked against the reference executor by
// the verifier on the GPU, tests/sdar/sdar_served_groups_gpu_test.cc).
// A RoPE without a norm is an elementwise group whose loads rotate the same
// way. What the lowering cannot rotate is refused with kUnsupported.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// x [R, n, d], w [d], cos, sin [R, 1, d] -> y * cos + rotate_half(y) * sin,
// y = w * cast_T(cast_f32(x) * rsqrt(mean(cast_f32(x)^2, -1) + eps)).
Task NormRopeTask(DType dt, int64_t rows, int64_t heads, int64_t d) {
  GraphBuilder b;
  const int x = b.Input(dt, 3), w = b.Input(dt, 1), cos = b.Input(dt, 3), sin = b.Input(dt, 3);
  const bool f32 = dt == DType::kFloat32;
  const int xf = f32 ? x : b.Op(OpKind::kCast, {x}, {}, false, static_cast<int64_t>(DType::kFloat32));
  const int var = b.Op(OpKind::kMean, {b.Op(OpKind::kPowScalar, {xf}, {}, false, 0, {2.0})}, {2}, true);
  const int r = b.Op(OpKind::kRsqrt, {b.Op(OpKind::kAdd, {var, b.Const(1e-6)})});
  int n = b.Op(OpKind::kMul, {xf, r});
  if (!f32) n = b.Op(OpKind::kCast, {n}, {}, false, static_cast<int64_t>(dt));
  const int y = b.Op(OpKind::kMul, {w, n});
  const int rot = b.Op(OpKind::kMul, {b.Op(OpKind::kRotateHalf, {y}), sin});
  b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kMul, {y, cos}), rot}));
  return MakeTask(b.g, {Spec(dt, {rows, heads, d}), Spec(dt, {d}), Spec(dt, {rows, 1, d}), Spec(dt, {rows, 1, d})});
}

TEST(RotateHalfTemplates, NormRopeIsOneRowGroupWithRotatedLoads) {
  auto lo = tmpl::Lower(NormRopeTask(DType::kBFloat16, 4, 2, 64));
  ASSERT_TRUE(lo.ok()) << lo.status().ToString();
  EXPECT_EQ(lo->num_reduces, 1) << "the rotated clone shares the row statistic";
  int rotated_loads = 0, signs = 0;
  for (const auto& n : lo->nodes) {
    if (n.kind == tmpl::NodeKind::kLoad && n.rot_axis >= 0) {
      ++rotated_loads;
      EXPECT_EQ(n.rot_axis, 2);
      EXPECT_EQ(n.rot_half, 32);
      EXPECT_TRUE(n.input == 0 || n.input == 1) << "x and w are rotated, cos and sin are not";
    }
    if (n.kind == tmpl::NodeKind::kRotSign) {
      ++signs;
      EXPECT_EQ(n.shape, (std::vector<int64_t>{1, 1, 64}));
    }
  }
  EXPECT_EQ(rotated_loads, 2);
  EXPECT_EQ(signs, 1);
}

TEST(RotateHalfTemplates, NormRopeCandidatesCompileForSm90) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    // The tiny decoder's head_dim and SDAR's (128) at a decode step's rows.
    for (int64_t d : {8, 128}) {
      SCOPED_TRACE(std::string(ir::DTypeName(dt)) + " head_dim " + std::to_string(d));
      const Task task = NormRopeTask(dt, 4, 8, d);
      TemplateGenerator gen;
      auto cands = gen.Generate(task, 6);
      ASSERT_TRUE(cands.ok()) << cands.status().ToString();
      ASSERT_FALSE(cands->empty());
      const std::string half = std::to_string(d / 2) + "u";
      for (const auto& c : *cands) {
        EXPECT_EQ(c.origin.rfind("template:row/", 0), 0u) << c.origin;
        EXPECT_NE(c.source.find(" < " + half + " ? -1.0f : 1.0f)"), std::string::npos) << c.origin << "\n" << c.source;
        EXPECT_NE(c.source.find(" < " + half + " ? " + std::to_string(d / 2) + "ll : -" + std::to_string(d / 2) + "ll)"),
                  std::string::npos)
            << c.origin << "\n" << c.source;
      }
      auto built = runtime::CompileAll(*cands, "sm_90", 2);
      ASSERT_EQ(built.size(), cands->size());
      for (size_t i = 0; i < built.size(); ++i) {
        EXPECT_TRUE(built[i].ok()) << (*cands)[i].origin << ": " << built[i].status().ToString() << "\n"
                                   << (*cands)[i].source;
      }
    }
  }
}

// The rotated axis need not be the reduced one: x / mean over rows, rotated
// along the columns (the row index picks the sign and the shift).
TEST(RotateHalfTemplates, RotatesAlongAnAxisTheRowsRunOver) {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, 2);
  const int m = b.Op(OpKind::kMean, {x}, {0}, true);
  b.Output(b.Op(OpKind::kDiv, {b.Op(OpKind::kRotateHalf, {x}), m}));
  const Task task = MakeTask(b.g, {Spec(DType::kFloat32, {16, 6})});
  TemplateGenerator gen;
  auto cands = gen.Generate(task, 4);
  ASSERT_TRUE(cands.ok()) << cands.status().ToString();
  ASSERT_FALSE(cands->empty());
  auto built = runtime::CompileAll(*cands, "sm_90", 2);
  for (size_t i = 0; i < built.size(); ++i) {
    EXPECT_TRUE(built[i].ok()) << (*cands)[i].origin << ": " << built[i].status().ToString();
  }
}

// RoPE without a norm (Llama's apply_rotary_pos_emb): the elementwise
// family rotates its loads the same way; rotated loads are never vector loads.
TEST(RotateHalfTemplates, RopeAloneIsAnElementwiseGroup) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(ir::DTypeName(dt));
    GraphBuilder b;
    const int x = b.Input(dt, 3), cos = b.Input(dt, 2), sin = b.Input(dt, 2);
    const int rot = b.Op(OpKind::kMul, {b.Op(OpKind::kRotateHalf, {x}), sin});
    b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kMul, {x, cos}), rot}));
    const Task task = MakeTask(b.g, {Spec(dt, {2, 4, 64}), Spec(dt, {4, 64}), Spec(dt, {4, 64})});
    TemplateGenerator gen;
    auto cands = gen.Generate(task, 6);
    ASSERT_TRUE(cands.ok()) << cands.status().ToString();
    ASSERT_FALSE(cands->empty());
    for (const auto& c : *cands) {
      EXPECT_EQ(c.origin.rfind("template:elementwise/", 0), 0u) << c.origin;
      EXPECT_NE(c.source.find(" < 32u ? -1.0f : 1.0f)"), std::string::npos) << c.origin << "\n" << c.source;
      EXPECT_NE(c.source.find(" < 32u ? 32ll : -32ll)"), std::string::npos) << c.origin << "\n" << c.source;
    }
    auto built = runtime::CompileAll(*cands, "sm_90", 2);
    for (size_t i = 0; i < built.size(); ++i) {
      EXPECT_TRUE(built[i].ok()) << (*cands)[i].origin << ": " << built[i].status().ToString() << "\n"
                                 << (*cands)[i].source;
    }
  }
}

TEST(RotateHalfTemplates, RefusesWhatItCannotRotate) {
  auto refused = [](const Task& task, const std::string& why) {
    TemplateGenerator gen;
    auto cands = gen.Generate(task, 4);
    ASSERT_FALSE(cands.ok()) << why;
    EXPECT_EQ(cands.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(cands.status().message().find(why), std::string::npos) << cands.status().message();
  };
  {  // A statistic over the rows, varying along the rotated axis.
    GraphBuilder b;
    const int x = b.Input(DType::kFloat32, 2);
    const int s = b.Op(OpKind::kSum, {x}, {0}, true);
    b.Output(b.Op(OpKind::kMul, {x, b.Op(OpKind::kRotateHalf, {s})}));
    refused(MakeTask(b.g, {Spec(DType::kFloat32, {4, 8})}), "rotate_half of a value reduced along other axes");
  }
  {  // Twice.
    GraphBuilder b;
    const int x = b.Input(DType::kFloat32, 2);
    const int m = b.Op(OpKind::kAmax, {x}, {1}, true);
    const int twice = b.Op(OpKind::kRotateHalf, {b.Op(OpKind::kRotateHalf, {x})});
    b.Output(b.Op(OpKind::kSub, {twice, m}));
    refused(MakeTask(b.g, {Spec(DType::kFloat32, {4, 8})}), "rotate_half of a rotated value");
  }
}

}  // namespace
}  // namespace dice::generator
