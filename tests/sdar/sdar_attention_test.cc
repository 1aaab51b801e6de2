// The split-KV decode attention (sdar_attention.h) on a machine without a
// GPU: the source compiles with NVRTC for sm_90 in every dtype at the
// released head shapes and the limits, bakes the shape in, sizes its chunks
// to 48 KiB of shared memory, and shapes the kernels cannot take are
// refused naming the field. Numerics and the launch checks run on the GPU
// (sdar_attention_gpu_test.cc).
#include <gtest/gtest.h>

#include "dice/core/candidate.h"
#include "dice/generator/sdar_attention.h"
#include "dice/runtime/compiler.h"

namespace dice::generator {
namespace {

SdarAttentionShape Shape(int64_t heads, int64_t kv, int64_t hd, FusedDtype d) {
  SdarAttentionShape s;
  s.heads = heads, s.kv_heads = kv, s.head_dim = hd, s.dtype = d;
  return s;
}

TEST(SdarAttentionTest, SourceCompilesForSm90InEveryDtype) {
  const std::vector<SdarAttentionShape> shapes = {
      Shape(32, 8, 128, FusedDtype::kBF16),  // SDAR-4B
      Shape(32, 8, 128, FusedDtype::kF32),
      Shape(32, 8, 128, FusedDtype::kF16),
      Shape(16, 8, 128, FusedDtype::kF16),   // the 1.7B-like shape
      Shape(4, 2, 8, FusedDtype::kF32),      // the tiny test model
      Shape(8, 1, 256, FusedDtype::kF32),    // the largest head, smallest chunk
      Shape(12, 4, 96, FusedDtype::kBF16),   // head_dim no multiple of 32
  };
  for (const auto& s : shapes) {
    ASSERT_TRUE(CheckAttentionShape(s).ok()) << CheckAttentionShape(s).ToString();
    Candidate c;
    c.source = SdarAttentionSource(s);
    for (const auto& name : SdarAttentionKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
    auto r = runtime::CompileCandidate(c, "sm_90");
    ASSERT_TRUE(r.ok()) << "heads " << s.heads << " head_dim " << s.head_dim << ": " << r.status().ToString();
    EXPECT_FALSE(r->cubin.empty());
  }
}

TEST(SdarAttentionTest, SourceBakesTheShapeIn) {
  const std::string src = SdarAttentionSource(Shape(32, 8, 128, FusedDtype::kBF16));
  EXPECT_NE(src.find("typedef __nv_bfloat16 T;"), std::string::npos);
  EXPECT_NE(src.find("#define HEADS 32\n"), std::string::npos);
  EXPECT_NE(src.find("#define KV_HEADS 8\n"), std::string::npos);
  EXPECT_NE(src.find("#define HEAD_DIM 128\n"), std::string::npos);
  EXPECT_NE(src.find("#define MAX_CHUNK 64\n"), std::string::npos);
  for (const auto& name : SdarAttentionKernelNames()) EXPECT_NE(src.find(name + "("), std::string::npos) << name;
}

TEST(SdarAttentionTest, ChunksFitInDefaultSharedMemory) {
  EXPECT_EQ(AttentionMaxChunkKeys(Shape(32, 8, 128, FusedDtype::kBF16)), 64);
  EXPECT_EQ(AttentionMaxChunkKeys(Shape(32, 8, 128, FusedDtype::kF16)), 64);
  EXPECT_EQ(AttentionMaxChunkKeys(Shape(32, 8, 128, FusedDtype::kF32)), 32);
  EXPECT_EQ(AttentionMaxChunkKeys(Shape(32, 8, 256, FusedDtype::kBF16)), 24);
  EXPECT_EQ(AttentionMaxChunkKeys(Shape(32, 8, 256, FusedDtype::kF32)), 8);
}

TEST(SdarAttentionTest, ShapesThatDoNotFitAreRefusedNamingTheField) {
  struct Case {
    SdarAttentionShape shape;
    const char* names;
  };
  const Case cases[] = {
      {Shape(32, 8, 264, FusedDtype::kBF16), "head_dim 264"},
      {Shape(32, 8, 100, FusedDtype::kBF16), "head_dim 100"},
      {Shape(30, 8, 128, FusedDtype::kBF16), "num_attention_heads 30"},
      {Shape(32, 0, 128, FusedDtype::kBF16), ">= 1"},
  };
  for (const auto& c : cases) {
    const Status s = CheckAttentionShape(c.shape);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.names;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.ToString();
    // Build refuses the shape before it looks for a device or compiles.
    auto built = SdarAttention::Build(c.shape, "sm_90", 0);
    ASSERT_FALSE(built.ok());
    EXPECT_EQ(built.status().code(), StatusCode::kInvalidArgument) << built.status().ToString();
  }
}

}  // namespace
}  // namespace dice::generator
