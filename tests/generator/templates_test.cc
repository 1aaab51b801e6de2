// templates_test.cc — TemplateGenerator candidates for a broad set of fusion
// groups compile with NVRTC for sm_90 (no GPU needed), carry their kernels,
// and have valid launch configs; unsupported patterns are refused.
// Numerical correctness is checked on the GPU by the verifier.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

bool CubinHas(const std::string& cubin, const std::string& name) {
  return cubin.find(std::string("\0", 1) + name + std::string("\0", 1)) != std::string::npos;
}

// Generates, checks launch configs, compiles up to `compile_n` candidates.
std::vector<Candidate> ExpectCompiles(const Task& task, int compile_n = 8, size_t min_candidates = 2) {
  TemplateGenerator gen;
  auto cands = gen.Generate(task, 8);
  EXPECT_TRUE(cands.ok()) << task.Describe() << ": " << cands.status().ToString();
  if (!cands.ok()) return {};
  EXPECT_GE(cands->size(), min_candidates) << task.Describe();
  std::vector<Candidate> to_compile;
  for (const auto& c : *cands) {
    EXPECT_EQ(c.form, CandidateForm::kDevice);
    EXPECT_EQ(c.origin.rfind("template:", 0), 0u) << c.origin;
    EXPECT_FALSE(c.plan.launches.empty()) << c.origin;
    for (const auto& l : c.plan.launches) {
      uint64_t threads = uint64_t{l.block[0]} * l.block[1] * l.block[2];
      EXPECT_GE(threads, 1u) << c.origin;
      EXPECT_LE(threads, 1024u) << c.origin;
      EXPECT_GT(l.grid[0], 0u) << c.origin;
      EXPECT_GT(l.grid[1], 0u) << c.origin;
      EXPECT_GT(l.grid[2], 0u) << c.origin;
      EXPECT_LE(l.shared_mem_bytes, 227u * 1024u) << c.origin;
      EXPECT_NE(c.source.find("extern \"C\" __global__"), std::string::npos);
      EXPECT_NE(c.source.find(l.kernel), std::string::npos) << c.origin;
    }
    if (static_cast<int>(to_compile.size()) < compile_n) to_compile.push_back(c);
  }
  auto results = runtime::CompileAll(to_compile, "sm_90", 2);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << task.Describe() << " " << to_compile[i].origin << ": "
                                 << results[i].status().ToString() << "\n"
                                 << to_compile[i].source;
    if (!results[i].ok()) continue;
    for (const auto& l : to_compile[i].plan.launches) EXPECT_TRUE(CubinHas(results[i]->cubin, l.kernel));
  }
  return *cands;
}

struct UnaryCase {
  OpKind kind;
  int64_t ivalue;
  std::vector<double> scalars;
};

TEST(TemplateGenerator, EveryUnaryOpCompilesInEachDtype) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<UnaryCase> cases = {
      {OpKind::kNeg, 0, {}},        {OpKind::kAbs, 0, {}},         {OpKind::kExp, 0, {}},
      {OpKind::kLog, 0, {}},        {OpKind::kSqrt, 0, {}},        {OpKind::kRsqrt, 0, {}},
      {OpKind::kReciprocal, 0, {}}, {OpKind::kTanh, 0, {}},        {OpKind::kSigmoid, 0, {}},
      {OpKind::kErf, 0, {}},        {OpKind::kRelu, 0, {}},        {OpKind::kGelu, 0, {}},
      {OpKind::kGelu, 1, {}},       {OpKind::kSilu, 0, {}},        {OpKind::kMish, 0, {}},
      {OpKind::kSoftplus, 0, {1.0, 20.0}}, {OpKind::kSoftsign, 0, {}}, {OpKind::kElu, 0, {1.0, 1.0, 1.0}},
      {OpKind::kSelu, 0, {}},       {OpKind::kLeakyRelu, 0, {0.01}}, {OpKind::kClamp, 0, {-1.0, 1.0}},
      {OpKind::kClamp, 0, {0.0, inf}}, {OpKind::kHardswish, 0, {}}, {OpKind::kHardsigmoid, 0, {}},
      {OpKind::kPowScalar, 0, {2.0}}, {OpKind::kPowScalar, 0, {1.7}},
      {OpKind::kCast, static_cast<int64_t>(DType::kFloat16), {}},
  };
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const auto& uc : cases) {
      GraphBuilder b;
      int x = b.Input(dt, 2);
      b.Output(b.Op(uc.kind, {x}, {}, false, uc.ivalue, uc.scalars));
      Task t = MakeTask(b.g, {Spec(dt, {1024, 4096})});
      SCOPED_TRACE(ir::GetOpInfo(uc.kind).name);
      ExpectCompiles(t, 2);
    }
  }
}

TEST(TemplateGenerator, BroadcastBinaryOpsWithScalarsCompile) {
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                   OpKind::kPow}) {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 2), y = b.Input(DType::kFloat32, 2);
    int z = b.Op(k, {x, y});
    b.Output(b.Op(OpKind::kMul, {z, b.Const(0.5)}));
    Task t = MakeTask(b.g, {Spec(DType::kFloat32, {1024, 1}), Spec(DType::kFloat32, {1, 512})});
    SCOPED_TRACE(ir::GetOpInfo(k).name);
    auto cands = ExpectCompiles(t, 2);
    ASSERT_FALSE(cands.empty());
    // Inputs are broadcast, so they are read through their strides (a div or mod).
    EXPECT_NE(cands[0].source.find(" / 512u"), std::string::npos);
  }
}

TEST(TemplateGenerator, OffersVectorVariantOnlyWhenAligned) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat16, 2), y = b.Input(DType::kFloat16, 1);
  b.Output(b.Op(OpKind::kAdd, {x, y}));
  auto has_vec = [&](int64_t align) {
    auto xs = Spec(DType::kFloat16, {256, 1024});
    xs.alignment = align;
    Task t = MakeTask(b.g, {xs, Spec(DType::kFloat16, {1024})});
    auto cands = ExpectCompiles(t, 3);
    for (const auto& c : cands)
      if (c.origin.find("/v8") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_vec(16));
  EXPECT_FALSE(has_vec(8));
}

TEST(TemplateGenerator, ReductionsCompileOverEachAxisChoice) {
  struct RedCase {
    OpKind kind;
    std::vector<double> scalars;
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<RedCase> reds = {{OpKind::kSum, {}},       {OpKind::kMean, {}},  {OpKind::kAmax, {}},
                               {OpKind::kAmin, {}},      {OpKind::kLogSumExp, {}}, {OpKind::kNorm, {2.0}},
                               {OpKind::kNorm, {1.0}},   {OpKind::kNorm, {inf}}, {OpKind::kNorm, {3.0}}};
  std::vector<std::vector<int64_t>> dim_sets = {{1}, {2}, {}};
  for (const auto& rc : reds) {
    for (const auto& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        GraphBuilder b;
        int x = b.Input(DType::kFloat32, 3);
        b.Output(b.Op(rc.kind, {x}, dims, keepdim, 0, rc.scalars));
        Task t = MakeTask(b.g, {Spec(DType::kFloat32, {16, 256, 64})});
        SCOPED_TRACE(std::string(ir::GetOpInfo(rc.kind).name) + " dims=" + std::to_string(dims.size()) +
                     (dims.empty() ? "" : ":" + std::to_string(dims[0])) + " keepdim=" + std::to_string(keepdim));
        ExpectCompiles(t, 2);
      }
    }
  }
}

TEST(TemplateGenerator, ColumnVariantLeadsForInnerAxisReduction) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 3);
  b.Output(b.Op(OpKind::kSum, {x}, {1}, false));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {16, 256, 64})});
  auto cands = ExpectCompiles(t, 1);
  ASSERT_FALSE(cands.empty());
  EXPECT_NE(cands[0].origin.find("row/column"), std::string::npos) << cands[0].origin;
}

TEST(TemplateGenerator, TilesplitCompilesForSpatialReductionsOfChannelsLast) {
  // Reduced axes not innermost (N, H, W, C stored; H and W reduced) with few
  // tiles of rows for their length: the tilesplit schedule leads and compiles,
  // one level with row outputs only, and two levels with a full-shaped output
  // (x - mean(x), then its max: the finalize writes every chunk).
  {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 4);
    b.Output(b.Op(OpKind::kMean, {x}, {1, 2}, false));
    auto cands = ExpectCompiles(MakeTask(b.g, {Spec(DType::kFloat32, {16, 128, 128, 64})}), 2);
    ASSERT_FALSE(cands.empty());
    EXPECT_EQ(cands[0].origin.rfind("template:row/tilesplit32x8/c", 0), 0u) << cands[0].origin;
  }
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int m = b.Op(OpKind::kMean, {x}, {1, 2}, true);
  int d = b.Op(OpKind::kSub, {x, m});
  b.Output(d);
  b.Output(b.Op(OpKind::kAmax, {d}, {1, 2}, false));
  auto cands = ExpectCompiles(MakeTask(b.g, {Spec(DType::kFloat32, {16, 96, 96, 64})}), 2);
  ASSERT_FALSE(cands.empty());
  ASSERT_EQ(cands[0].origin.rfind("template:row/tilesplit", 0), 0u) << cands[0].origin;
  ASSERT_EQ(cands[0].plan.launches.size(), 3u);  // two levels, then the finalize
  EXPECT_EQ(cands[0].plan.launches[2].grid[0], cands[0].plan.launches[0].grid[0]);  // over every chunk
}

TEST(TemplateGenerator, SoftmaxAndLogSoftmaxCompile) {
  for (OpKind k : {OpKind::kSoftmax, OpKind::kLogSoftmax}) {
    for (int64_t dim : {1, 2}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        GraphBuilder b;
        int x = b.Input(dt, 3);
        b.Output(b.Op(k, {x}, {dim}));
        Task t = MakeTask(b.g, {Spec(dt, {16, 256, 64})});
        SCOPED_TRACE(std::string(ir::GetOpInfo(k).name) + " dim " + std::to_string(dim));
        ExpectCompiles(t, 3);
      }
    }
  }
}

TEST(TemplateGenerator, LayerNormWithAndWithoutAffineCompiles) {
  for (int affine = 0; affine <= 2; ++affine) {
    GraphBuilder b;
    int x = b.Input(DType::kFloat16, 3);
    std::vector<int32_t> args = {x};
    std::vector<ir::TensorSpec> specs = {Spec(DType::kFloat16, {8, 128, 1024})};
    for (int a = 0; a < affine; ++a) {
      args.push_back(b.Input(DType::kFloat16, 1));
      specs.push_back(Spec(DType::kFloat16, {1024}));
    }
    b.Output(b.Op(OpKind::kLayerNorm, args, {}, false, 1, {1e-5}));
    Task t = MakeTask(b.g, specs);
    SCOPED_TRACE("affine args " + std::to_string(affine));
    ExpectCompiles(t, 3);
  }
}

TEST(TemplateGenerator, LongRowLayerNormUsesSplitWorkspace) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kLayerNorm, {x}, {}, false, 1, {1e-5}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {16, 4 * 1024 * 1024})});
  auto cands = ExpectCompiles(t, 2);
  ASSERT_FALSE(cands.empty());
  // The moments variant leads: Σx and Σx² in one pass, then the finalize kernel.
  EXPECT_EQ(cands[0].origin.rfind("template:row/split", 0), 0u) << cands[0].origin;
  EXPECT_NE(cands[0].origin.find("/online"), std::string::npos) << cands[0].origin;
  EXPECT_EQ(cands[0].plan.launches.size(), 2u);
  // Two float64 partial slots (Σx, Σx²) per row and chunk.
  EXPECT_GT(cands[0].plan.workspace_bytes, 0u);
  EXPECT_EQ(cands[0].plan.workspace_bytes % (2 * 16 * sizeof(double)), 0u);
  EXPECT_NE(cands[0].source.find("dice_block_reduce_sum_d<"), std::string::npos);
  // The two-pass split (mean pass, variance pass, finalize) is still offered.
  bool two_pass = false;
  for (const auto& c : cands)
    if (c.origin.rfind("template:row/split", 0) == 0 && c.origin.find("/online") == std::string::npos)
      two_pass = two_pass || c.plan.launches.size() == 3u;
  EXPECT_TRUE(two_pass);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Counts the passes over a row in a fused (single-kernel) candidate: element
// loops, less the fallback copy of an outputs loop that divides by row
// statistics (emitted twice: with reciprocals, and with divisions).
int RowPasses(const Candidate& c) {
  return Count(c.source, " k = tid;") - Count(c.source, "if (dice_inv_ok) {");
}

std::vector<Candidate> GenerateAll(const Task& t) {
  TemplateGenerator gen;
  auto cands = gen.Generate(t, 16);
  EXPECT_TRUE(cands.ok()) << cands.status().ToString();
  if (!cands.ok()) return {};
  auto results = runtime::CompileAll(*cands, "sm_90", 2);
  for (size_t i = 0; i < results.size(); ++i)
    EXPECT_TRUE(results[i].ok()) << (*cands)[i].origin << ": " << results[i].status().ToString() << "\n"
                                 << (*cands)[i].source;
  return *cands;
}

TEST(TemplateGenerator, OnlineSoftmaxSavesOnePassOverLongRows) {
  for (OpKind k : {OpKind::kSoftmax, OpKind::kLogSoftmax}) {
    GraphBuilder b;
    int x = b.Input(DType::kFloat32, 2);
    b.Output(b.Op(k, {x}, {1}));
    Task t = MakeTask(b.g, {Spec(DType::kFloat32, {64, 393216})});
    SCOPED_TRACE(ir::GetOpInfo(k).name);
    auto cands = GenerateAll(t);
    ASSERT_FALSE(cands.empty());
    EXPECT_NE(cands[0].origin.find("/online"), std::string::npos) << cands[0].origin;
    int online = 0, two_pass = 0;
    for (const auto& c : cands) {
      if (c.origin.find("row/block") == std::string::npos) continue;
      const bool is_online = c.origin.find("/online") != std::string::npos;
      EXPECT_EQ(c.source.find("dice_block_reduce_online<") != std::string::npos, is_online) << c.origin;
      // Two-pass: max, Σexp, write. Online: (max, Σexp) together, write.
      EXPECT_EQ(RowPasses(c), is_online ? 2 : 3) << c.origin;
      ++(is_online ? online : two_pass);
    }
    EXPECT_GE(online, 1);
    EXPECT_GE(two_pass, 1);
  }
}

TEST(TemplateGenerator, LongRowsGetAClusterPerRowOnSm90Only) {
  // softmax over [4096, 393216] f32: 1.5 MB rows; 16 rows in flight (24 MB)
  // stay in L2 when each row is shared by a cluster of 8 CTAs.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kSoftmax, {x}, {1}));
  const std::vector<ir::TensorSpec> specs = {Spec(DType::kFloat32, {4096, 393216})};
  auto all = GenerateAll(MakeTask(b.g, specs));
  std::vector<Candidate> cands;
  for (auto& c : all)
    if (c.origin == "template:row/cluster1024/q8/online") cands.push_back(c);
  ASSERT_EQ(cands.size(), 1u);
  ASSERT_EQ(cands[0].plan.launches.size(), 1u);
  EXPECT_EQ(cands[0].plan.launches[0].grid[0], 128u);  // 16 rows x 8 CTAs
  EXPECT_NE(cands[0].source.find("__cluster_dims__(8, 1, 1)"), std::string::npos);
  EXPECT_NE(cands[0].source.find("dice_dsmem_ld(&dice_cl["), std::string::npos);
  // Two passes over HBM-or-L2: statistics, then outputs.
  EXPECT_EQ(Count(cands[0].source, " k = tid;"), 0);  // chunked loops start at kbeg, not tid
  EXPECT_EQ(Count(cands[0].source, "k = kbeg + tid;") - Count(cands[0].source, "if (dice_inv_ok) {"), 2);
  // softmax's division by the row sum is a multiply by its reciprocal.
  EXPECT_NE(cands[0].source.find("dice_inv4 = 1.0f / r4;"), std::string::npos);
  EXPECT_NE(cands[0].source.find("(v3 * dice_inv4)"), std::string::npos);
  EXPECT_NE(cands[0].source.find("(v3 / r4)"), std::string::npos);  // the fallback loop
  // An sm_80 target gets no cluster variants (clusters need sm_90).
  TargetInfo ampere;
  ampere.arch = "sm_80";
  auto t80 = Task::Make(b.g, specs, ampere);
  ASSERT_TRUE(t80.ok());
  auto c80 = TemplateGenerator().Generate(*t80, 16);
  ASSERT_TRUE(c80.ok());
  ASSERT_FALSE(c80->empty());
  for (const auto& c : *c80) EXPECT_EQ(c.origin.find("cluster"), std::string::npos) << c.origin;
}

// The candidate of `all` whose origin is `origin`, or nullptr.
const Candidate* WithOrigin(const std::vector<Candidate>& all, const std::string& origin) {
  for (const auto& c : all)
    if (c.origin == origin) return &c;
  return nullptr;
}

TEST(TemplateGenerator, LongRowsCachedInClusterSharedMemoryAreReadOnce) {
  // softmax over [4096, 393216] f32: each 1.5 MB row split over a cluster of
  // 8 CTAs, 192 KB of it in each CTA's dynamic shared memory.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kSoftmax, {x}, {1}));
  auto all = GenerateAll(MakeTask(b.g, {Spec(DType::kFloat32, {4096, 393216})}));
  const Candidate* smem = WithOrigin(all, "template:row/cluster1024/q8/smem/online");
  ASSERT_NE(smem, nullptr);
  ASSERT_EQ(smem->plan.launches.size(), 1u);
  EXPECT_EQ(smem->plan.launches[0].shared_mem_bytes, 49152u * 4u);
  EXPECT_EQ(smem->plan.launches[0].grid[0], 4096u * 8u);
  EXPECT_NE(smem->source.find("__cluster_dims__(8, 1, 1)"), std::string::npos);
  EXPECT_NE(smem->source.find("extern __shared__ float dice_rowc[];"), std::string::npos);
  // One global load of the input (the fill loop); the statistics pass and
  // both output loops (reciprocal and division) read the shared-memory copy.
  EXPECT_EQ(Count(smem->source, "dice_ld(in0"), 1);
  EXPECT_EQ(Count(smem->source, "c0[k - kbeg]"), 4);
  // (GenerateAll compiled every candidate, this one included, with NVRTC for sm_90.)
  // A row too long for 8 CTAs' shared memory gets no smem schedule.
  auto huge = GenerateAll(MakeTask(b.g, {Spec(DType::kFloat32, {64, 1 << 20})}));
  for (const auto& c : huge) EXPECT_EQ(c.origin.find("/smem"), std::string::npos) << c.origin;
}

TEST(TemplateGenerator, PerChannelLoadsAreReadThroughL1NotCachedBesideTheRow) {
  // Level-2 task 21's epilogue: sigmoid((x + bias) * scale) then group_norm
  // (8 groups, weight, bias) over f32[128, 32, 254, 254]. A row is a group:
  // 4 channels x 64516 = 258064 elements (1 MB). The four per-channel loads
  // have 4 distinct elements a row; only x is cached, so the row fits a
  // cluster of 8 CTAs' shared memory (32258 floats each) and the smem
  // schedule exists. The per-channel loads are read where they are used.
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, 4), bias = b.Input(DType::kFloat32, 3), scale = b.Input(DType::kFloat32, 3);
  const int w = b.Input(DType::kFloat32, 1), gb = b.Input(DType::kFloat32, 1);
  const int t = b.Op(OpKind::kSigmoid, {b.Op(OpKind::kMul, {b.Op(OpKind::kAdd, {x, bias}), scale})});
  b.Output(b.Op(OpKind::kGroupNorm, {t, w, gb}, {}, false, 8, {1e-5}));
  const auto all = GenerateAll(MakeTask(b.g, {Spec(DType::kFloat32, {128, 32, 254, 254}),
                                             Spec(DType::kFloat32, {32, 1, 1}), Spec(DType::kFloat32, {32, 1, 1}),
                                             Spec(DType::kFloat32, {32}), Spec(DType::kFloat32, {32})}));
  const Candidate* smem = WithOrigin(all, "template:row/cluster1024/q8/smem/online");
  ASSERT_NE(smem, nullptr);
  ASSERT_EQ(smem->plan.launches.size(), 1u);
  EXPECT_EQ(smem->plan.launches[0].shared_mem_bytes, 32258u * 4u);
  EXPECT_EQ(Count(smem->source, "dice_ld(in0"), 1);  // x: the fill loop only
  EXPECT_EQ(Count(smem->source, "float* const c"), 1);  // one cached chunk
  EXPECT_GE(Count(smem->source, "dice_ld(in1"), 2);  // the bias: statistics and output loops
}

TEST(TemplateGenerator, InnerAxisReductionsGetTiles) {
  // max over dim 1 of [16, 4096, 4095]: rows are the 16 x 4095 (b, j) pairs,
  // adjacent in memory; a 32 x Y tile reads 32 of them per load and splits
  // the 4096 reduced elements over Y threads. 4095 is not a multiple of 32:
  // the last tile's spare lanes must not store.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 3);
  b.Output(b.Op(OpKind::kAmax, {x}, {1}));
  auto cands = GenerateAll(MakeTask(b.g, {Spec(DType::kFloat32, {16, 4096, 4095})}));
  int tiles = 0;
  for (const auto& c : cands) {
    if (c.origin.find("row/tile32x") == std::string::npos) continue;
    ++tiles;
    EXPECT_NE(c.source.find("dice_tile_reduce<1, "), std::string::npos) << c.origin;
    EXPECT_NE(c.source.find("if (tid == 0u && live)"), std::string::npos) << c.origin;
    EXPECT_EQ(c.plan.launches[0].grid[0], (16u * 4095u + 31u) / 32u) << c.origin;
  }
  EXPECT_EQ(tiles, 2);
}

TEST(TemplateGenerator, WholeTensorNormOffersNoSingleBlockSchedule) {
  // x / norm(x) over every element of [112, 64, 512, 512]: one row of 1.9e9
  // elements; a single block for it would run for seconds.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int n = b.Op(OpKind::kNorm, {x}, {0, 1, 2, 3}, true, 0, {2.0});
  b.Output(b.Op(OpKind::kDiv, {x, n}));
  TemplateGenerator gen;
  auto cands = gen.Generate(MakeTask(b.g, {Spec(DType::kFloat32, {112, 64, 512, 512})}), 16);
  ASSERT_TRUE(cands.ok()) << cands.status().ToString();
  ASSERT_FALSE(cands->empty());
  for (const auto& c : *cands) {
    EXPECT_EQ(c.origin.find("row/block"), std::string::npos) << c.origin;
    uint64_t blocks = 0;
    for (const auto& l : c.plan.launches) blocks = std::max<uint64_t>(blocks, l.grid[0]);
    EXPECT_GE(blocks, 132u) << c.origin;
  }
}

TEST(TemplateGenerator, LogSumExpKeepsItsGuardedTwoPassForm) {
  // logsumexp shifts by 0 when the max is infinite (PyTorch's guard); the
  // online rescaling does not reproduce that, so no fused variant is offered.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kLogSumExp, {x}, {1}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {512, 2048})});
  auto cands = GenerateAll(t);
  ASSERT_FALSE(cands.empty());
  for (const auto& c : cands) EXPECT_EQ(c.origin.find("/online"), std::string::npos) << c.origin;
}

TEST(TemplateGenerator, RmsNormOverChannelsCachesTheColumnInRegisters) {
  // x / sqrt(mean(x^2, dim=1, keepdim) + eps) over [b, 64, h, w]: one thread
  // per (b, h, w) reads its 64 channels once and keeps them for the division.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4);
  int sq = b.Op(OpKind::kPowScalar, {x}, {}, false, 0, {2.0});
  int m = b.Op(OpKind::kMean, {sq}, {1}, true);
  int r = b.Op(OpKind::kSqrt, {b.Op(OpKind::kAdd, {m, b.Const(1e-5)})});
  b.Output(b.Op(OpKind::kDiv, {x, r}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {4, 64, 32, 32})});
  auto cands = GenerateAll(t);
  ASSERT_FALSE(cands.empty());
  EXPECT_EQ(cands[0].origin.rfind("template:row/column", 0), 0u) << cands[0].origin;
  EXPECT_NE(cands[0].origin.find("/reg"), std::string::npos) << cands[0].origin;
  EXPECT_NE(cands[0].source.find("[64]"), std::string::npos);
}

TEST(TemplateGenerator, GroupNormCompiles) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 4), w = b.Input(DType::kFloat32, 1), bias = b.Input(DType::kFloat32, 1);
  b.Output(b.Op(OpKind::kGroupNorm, {x, w, bias}, {}, false, 8, {1e-5}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {4, 64, 16, 16}), Spec(DType::kFloat32, {64}),
                          Spec(DType::kFloat32, {64})});
  auto cands = ExpectCompiles(t, 3);
  ASSERT_FALSE(cands.empty());
  // The weight is indexed per channel: channel = group * 8 + (k / 256).
  EXPECT_NE(cands[0].source.find("/ 256u"), std::string::npos);
}

TEST(TemplateGenerator, RmsNormChainCompiles) {
  GraphBuilder b;
  int x = b.Input(DType::kBFloat16, 2), w = b.Input(DType::kBFloat16, 1);
  int sq = b.Op(OpKind::kMul, {x, x});
  int ms = b.Op(OpKind::kMean, {sq}, {1}, true);
  int den = b.Op(OpKind::kSqrt, {b.Op(OpKind::kAdd, {ms, b.Const(1e-6)})});
  b.Output(b.Op(OpKind::kMul, {b.Op(OpKind::kDiv, {x, den}), w}));
  Task t = MakeTask(b.g, {Spec(DType::kBFloat16, {4096, 4096}), Spec(DType::kBFloat16, {4096})});
  auto cands = ExpectCompiles(t, 4);
  ASSERT_FALSE(cands.empty());
  EXPECT_NE(cands[0].origin.find("/reg"), std::string::npos) << "row should be cached: " << cands[0].origin;
}

TEST(TemplateGenerator, NonKeepdimStatisticMeetsBiasOnRowAxis) {
  // y = sum(x, 1) + b with b [N]: the bias runs along the kept axis.
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2), bias = b.Input(DType::kFloat32, 1);
  b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kSum, {x}, {1}, false), bias}));
  b.Output(b.Op(OpKind::kExp, {x}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {128, 777}), Spec(DType::kFloat32, {128})});
  ExpectCompiles(t, 4);
}

TEST(TemplateGenerator, GemmEpilogueChainCompiles) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat16, 2), bias = b.Input(DType::kFloat16, 1);
  int y = b.Op(OpKind::kGelu, {b.Op(OpKind::kAdd, {x, bias})}, {}, false, 0);
  b.Output(b.Op(OpKind::kMul, {y, b.Const(1.702)}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat16, {2048, 8192}), Spec(DType::kFloat16, {8192})});
  ExpectCompiles(t, 6);
}

TEST(TemplateGenerator, UsesWideIndicesBeyondTwoGigaElements) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat16, 2);
  b.Output(b.Op(OpKind::kRelu, {x}));
  Task big = MakeTask(b.g, {Spec(DType::kFloat16, {65536, 32768})});
  Task small = MakeTask(b.g, {Spec(DType::kFloat16, {1024, 32768})});
  TemplateGenerator gen;
  auto cb = gen.Generate(big, 2);
  auto cs = gen.Generate(small, 2);
  ASSERT_TRUE(cb.ok() && cs.ok());
  EXPECT_NE((*cb)[0].source.find("unsigned long long i"), std::string::npos);
  EXPECT_EQ((*cs)[0].source.find("unsigned long long i"), std::string::npos);
}

TEST(TemplateGenerator, RefusesReductionsOverDifferentAxes) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  int s0 = b.Op(OpKind::kSum, {x}, {0}, true);
  int s1 = b.Op(OpKind::kSum, {x}, {1}, true);
  b.Output(b.Op(OpKind::kAdd, {s0, s1}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {64, 128})});
  TemplateGenerator gen;
  auto c = gen.Generate(t, 4);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("different axes"), std::string::npos) << c.status().message();
}

TEST(TemplateGenerator, RespectsMaxCandidates) {
  GraphBuilder b;
  int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kSoftmax, {x}, {1}));
  Task t = MakeTask(b.g, {Spec(DType::kFloat32, {512, 2048})});
  TemplateGenerator gen;
  auto c1 = gen.Generate(t, 1);
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->size(), 1u);
  auto c8 = gen.Generate(t, 8);
  ASSERT_TRUE(c8.ok());
  EXPECT_GT(c8->size(), 1u);
  for (size_t i = 0; i < c8->size(); ++i)
    for (size_t j = i + 1; j < c8->size(); ++j) EXPECT_NE((*c8)[i].Hash(), (*c8)[j].Hash());
}

// ---- NVRTC compiler ----

Candidate TinyCandidate(const std::string& body, const std::string& kernel) {
  Candidate c;
  c.origin = "test";
  c.source = body;
  KernelLaunch l;
  l.kernel = kernel;
  c.plan.launches.push_back(l);
  return c;
}

TEST(Compiler, ReportsNvrtcVersion) { EXPECT_GE(runtime::NvrtcVersion(), 11000); }

TEST(Compiler, RejectsMalformedArch) {
  auto c = TinyCandidate("extern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }", "k");
  for (const char* arch : {"90", "sm_", "sm_9x", "compute_90"}) {
    auto r = runtime::CompileCandidate(c, arch);
    ASSERT_FALSE(r.ok()) << arch;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << arch;
  }
}

TEST(Compiler, ReturnsLogOnSyntaxError) {
  auto c = TinyCandidate("extern \"C\" __global__ void k(float* p) { p[0] = undefined_name; }", "k");
  auto r = runtime::CompileCandidate(c, "sm_90");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCompileError);
  EXPECT_NE(r.status().message().find("undefined_name"), std::string::npos) << r.status().message();
}

TEST(Compiler, RejectsPlanNamingAbsentKernel) {
  auto c = TinyCandidate("extern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }", "k2");
  auto r = runtime::CompileCandidate(c, "sm_90");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("k2"), std::string::npos);
}

TEST(Compiler, CompilesHalfHeadersAndExtraFlags) {
  auto c = TinyCandidate(
      "#include <cuda_fp16.h>\nextern \"C\" __global__ void kh(__half* p) { p[0] = __float2half_rn(VALUE); }", "kh");
  c.extra_flags = {"-DVALUE=2.0f"};
  auto r = runtime::CompileCandidate(c, "sm_90");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cubin.rfind("\x7f" "ELF", 0), 0u);
  EXPECT_GT(r->compile_ms, 0.0);
  Candidate ext = c;
  ext.form = CandidateForm::kExtension;
  EXPECT_EQ(runtime::CompileCandidate(ext, "sm_90").status().code(), StatusCode::kInvalidArgument);
}

TEST(Compiler, CompileAllKeepsOrder) {
  std::vector<Candidate> cs = {TinyCandidate("extern \"C\" __global__ void a(float* p) { p[0] = 1.0f; }", "a"),
                               TinyCandidate("extern \"C\" __global__ void b(float* p) { p[0] = oops; }", "b"),
                               TinyCandidate("extern \"C\" __global__ void c(float* p) { p[0] = 3.0f; }", "c")};
  auto rs = runtime::CompileAll(cs, "sm_90", 3);
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_TRUE(rs[0].ok());
  EXPECT_FALSE(rs[1].ok());
  EXPECT_TRUE(rs[2].ok());
  EXPECT_TRUE(CubinHas(rs[2]->cubin, "c"));
}

}  // namespace
}  // namespace dice::generator
