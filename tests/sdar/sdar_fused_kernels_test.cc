// The SDAR fused elementwise kernels (sdar_fused_kernels.h) on a machine
// without a GPU: the sources compile with NVRTC for sm_90 in every dtype at
// the tiny test shape and the released shapes, shapes that do not fit are
// refused naming the field, and a model that cannot use them loads on the
// unfused path and says why. The kernels' numerics are checked on the GPU
// (sdar_fused_gpu_test.cc).
#include <gtest/gtest.h>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/core/candidate.h"
#include "dice/generator/sdar_fused_kernels.h"
#include "dice/generator/sdar_model.h"
#include "dice/runtime/compiler.h"

namespace dice::generator {
namespace {

SdarFusedShape Shape(int64_t hidden, int64_t heads, int64_t kv, int64_t hd, int64_t inter, FusedDtype d) {
  SdarFusedShape s;
  s.hidden = hidden, s.heads = heads, s.kv_heads = kv, s.head_dim = hd, s.intermediate = inter, s.dtype = d;
  return s;
}

TEST(SdarFusedKernelsTest, SourcesCompileForSm90InEveryDtypeAndShape) {
  const std::vector<SdarFusedShape> shapes = {
      Shape(32, 4, 2, 8, 64, FusedDtype::kF32),          // the tiny test model
      Shape(2560, 32, 8, 128, 9728, FusedDtype::kBF16),  // SDAR-4B
      Shape(2048, 16, 8, 128, 6144, FusedDtype::kF16),   // the 1.7B-like shape
      Shape(2560, 32, 8, 128, 9728, FusedDtype::kF32),
      Shape(5000, 40, 8, 96, 100, FusedDtype::kBF16),    // hidden not a multiple of the block
  };
  for (const auto& s : shapes) {
    ASSERT_TRUE(CheckFusedShape(s).ok()) << CheckFusedShape(s).ToString();
    Candidate c;
    c.source = SdarFusedSource(s);
    for (const auto& name : SdarFusedKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
    auto r = runtime::CompileCandidate(c, "sm_90");
    ASSERT_TRUE(r.ok()) << "hidden " << s.hidden << ": " << r.status().ToString();
    EXPECT_FALSE(r->cubin.empty());
  }
}

TEST(SdarFusedKernelsTest, SourceBakesTheShapeIn) {
  const std::string src = SdarFusedSource(Shape(2560, 32, 8, 128, 9728, FusedDtype::kBF16));
  EXPECT_NE(src.find("typedef __nv_bfloat16 T;"), std::string::npos);
  EXPECT_NE(src.find("#define HIDDEN 2560"), std::string::npos);
  EXPECT_NE(src.find("#define INTER 9728"), std::string::npos);
  for (const auto& name : SdarFusedKernelNames()) EXPECT_NE(src.find(name), std::string::npos) << name;
}

TEST(SdarFusedKernelsTest, NormsUse16ByteLoadsWhenTheRowFillsThemAndQkNormRopeWritesTheCache) {
  const std::string bf16 = SdarFusedSource(Shape(2560, 32, 8, 128, 9728, FusedDtype::kBF16));
  EXPECT_NE(bf16.find("#define NORM_VEC 8\n"), std::string::npos);
  EXPECT_NE(bf16.find("#define NORM_THREADS 320\n"), std::string::npos);  // one 16-byte load a thread
  EXPECT_NE(SdarFusedSource(Shape(2560, 32, 8, 128, 9728, FusedDtype::kF32)).find("#define NORM_VEC 4\n"),
            std::string::npos);
  EXPECT_NE(SdarFusedSource(Shape(5001, 32, 8, 128, 9728, FusedDtype::kBF16)).find("#define NORM_VEC 1\n"),
            std::string::npos);
  EXPECT_NE(bf16.find("T* k_cache, T* v_cache, const long long* slots"), std::string::npos);
}

// The skinny GEMMs of the step forward: the gemv family's stream form for
// the four projections at 4, 8 and 16 rows, one source per model, compiling
// for sm_90 in bf16 and f16; none for f32 or for rows of K that are no
// multiple of 16 bytes.
TEST(SdarFusedKernelsTest, SkinnyGemmSourceCompilesForSm90AtTheReleasedShapes) {
  for (const auto& s :
       {Shape(2560, 32, 8, 128, 9728, FusedDtype::kBF16), Shape(2048, 16, 8, 128, 6144, FusedDtype::kF16)}) {
    Candidate c;
    c.source = SdarGemvSource(s);
    ASSERT_FALSE(c.source.empty());
    for (const auto& name : SdarGemvKernelNames()) {
      EXPECT_NE(c.source.find("void __launch_bounds__(128) " + name + "("), std::string::npos) << name;
      c.plan.launches.push_back(KernelLaunch{name});
    }
    EXPECT_EQ(SdarGemvKernelNames().size(), 12u);
    // gate/up at 4 rows: N = inter outputs (of a [2 inter, K] weight), one column a warp, 8 loads in flight,
    // the whole K row of x in shared memory.
    const std::string h = std::to_string(s.hidden);
    const std::string gate_up = "dice_gemv_stream<4, " + std::to_string(s.intermediate) + "LL, " + h + "LL, 1, 4, 8, " +
                                h + ", true, false>(x, w, nullptr, out, rows);";
    EXPECT_NE(c.source.find(gate_up), std::string::npos) << gate_up;
    auto r = runtime::CompileCandidate(c, "sm_90");
    ASSERT_TRUE(r.ok()) << "hidden " << s.hidden << ": " << r.status().ToString();
    EXPECT_FALSE(r->cubin.empty());
  }
  EXPECT_TRUE(SdarGemvSource(Shape(2560, 32, 8, 128, 9728, FusedDtype::kF32)).empty());
  EXPECT_TRUE(SdarGemvSource(Shape(36, 4, 2, 8, 64, FusedDtype::kBF16)).empty());  // 72-byte rows
}

// gemv_direct (DICE_SDAR_GEMV_DIRECT=1): every kernel in the direct form
// (x through L1, grid-stride), with the same names, compiling for sm_90.
TEST(SdarFusedKernelsTest, SkinnyGemmDirectFormCompilesForSm90) {
  auto s = Shape(2560, 32, 8, 128, 9728, FusedDtype::kBF16);
  s.gemv_direct = true;
  Candidate c;
  c.source = SdarGemvSource(s);
  ASSERT_FALSE(c.source.empty());
  EXPECT_EQ(c.source.find("  dice_gemv_stream<"), std::string::npos) << "no staged instance";
  EXPECT_NE(c.source.find("  dice_gemv_direct<4, 9728LL, 2560LL, 1, 4, 8, true, false>(x, w, nullptr, out, rows);"),
            std::string::npos);
  for (const auto& name : SdarGemvKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
  auto r = runtime::CompileCandidate(c, "sm_90");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->cubin.empty());
}

TEST(SdarFusedKernelsTest, ShapesThatDoNotFitAreRefusedNamingTheField) {
  auto odd = CheckFusedShape(Shape(32, 4, 2, 7, 64, FusedDtype::kF32));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.message().find("head_dim 7"), std::string::npos) << odd.ToString();
  auto wide = CheckFusedShape(Shape(32, 1, 1, 1026, 64, FusedDtype::kF32));
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.message().find("<= 1024"), std::string::npos) << wide.ToString();
  auto huge = CheckFusedShape(Shape(40000, 4, 2, 8, 64, FusedDtype::kF32));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("hidden_size 40000"), std::string::npos) << huge.ToString();
  auto gqa = CheckFusedShape(Shape(32, 3, 2, 8, 64, FusedDtype::kF32));
  ASSERT_FALSE(gqa.ok());
  EXPECT_NE(gqa.message().find("num_key_value_heads"), std::string::npos) << gqa.ToString();
  EXPECT_FALSE(SdarFusedKernels::Build(Shape(32, 4, 2, 7, 64, FusedDtype::kF32), "sm_90", 0).ok());
}

TEST(SdarFusedKernelsTest, CpuModelUsesTheUnfusedPathAndSaysWhy) {
  auto m = SdarModel::Random(TinySdarConfig(50, 64, false), {}, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->fused_elementwise());
  EXPECT_NE(m->fused_elementwise_note().find("CUDA devices only"), std::string::npos) << m->fused_elementwise_note();
  SdarModelOptions off;
  off.fuse_elementwise = false;
  auto n = SdarModel::Random(TinySdarConfig(50, 64, false), off, 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->fused_elementwise_note(), "fuse_elementwise is off");
  auto logits = m->Forward(torch::arange(0, 8, torch::kLong).view({1, 8}));
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_TRUE(torch::isfinite(*logits).all().item<bool>());
}

}  // namespace
}  // namespace dice::generator
