// templates_target_test.cc — the template generator sizes its schedules from
// the task's TargetInfo device facts (SM count, threads per SM, L2 bytes,
// opt-in shared memory per block, cluster launch), not from constants: an
// H100 PCIe (114 SMs) gets smaller grids than an H100/H200 SXM (132 SMs), the
// default TargetInfo reproduces the SXM grids, and the task key ignores the
// device facts. CPU only (no compilation: the launch plans are the subject).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dice/generator/templates.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;
using tmpl_test::GraphBuilder;
using tmpl_test::MakeTask;
using tmpl_test::Spec;

TargetInfo H100Pcie() {
  TargetInfo t;
  t.gpu_name = "NVIDIA H100 PCIe";
  t.sm_count = 114;
  return t;
}

ir::Graph UnaryGraph(OpKind k, int rank, std::vector<int64_t> dims = {}, bool keepdim = false) {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, rank);
  b.Output(b.Op(k, {x}, std::move(dims), keepdim));
  return b.g;
}

std::vector<Candidate> Generate(const ir::Graph& g, std::vector<int64_t> shape, const TargetInfo& target) {
  auto cands = TemplateGenerator().Generate(MakeTask(g, {Spec(DType::kFloat32, std::move(shape))}, target), 64);
  EXPECT_TRUE(cands.ok()) << cands.status().ToString();
  return cands.ok() ? *cands : std::vector<Candidate>{};
}

// The launch plan of the candidate named `origin` ("template:" left off); an
// empty plan when there is none.
LaunchPlan PlanOf(const std::vector<Candidate>& cands, const std::string& origin) {
  for (const auto& c : cands)
    if (c.origin == "template:" + origin) return c.plan;
  ADD_FAILURE() << "no candidate " << origin;
  return {};
}

bool HasOriginContaining(const std::vector<Candidate>& cands, const std::string& part) {
  for (const auto& c : cands)
    if (c.origin.find(part) != std::string::npos) return true;
  return false;
}

TEST(TemplateTarget, DefaultTargetIsTheH100H200Sxm) {
  const TargetInfo t;
  EXPECT_EQ(t.arch, "sm_90");
  EXPECT_EQ(t.sm_count, 132);
  EXPECT_EQ(t.l2_bytes, 50 * 1024 * 1024);
  EXPECT_EQ(t.smem_per_sm_bytes, 228 * 1024);
  EXPECT_EQ(t.smem_per_block_optin_bytes, 227 * 1024);
  EXPECT_EQ(t.max_threads_per_sm, 2048);
  EXPECT_TRUE(t.cluster_launch);
}

TEST(TemplateTarget, ElementwiseGridScalesWithSmCount) {
  // relu over 2^24 f32: 16384 blocks of 256 x 4 wanted, capped at 4 waves.
  const ir::Graph g = UnaryGraph(OpKind::kRelu, 1);
  const auto sxm = Generate(g, {1 << 24}, TargetInfo{});
  const auto pcie = Generate(g, {1 << 24}, H100Pcie());
  EXPECT_EQ(PlanOf(sxm, "elementwise/b256/v4").launches.at(0).grid[0], 132u * 8 * 4);  // today's 4224
  EXPECT_EQ(PlanOf(pcie, "elementwise/b256/v4").launches.at(0).grid[0], 114u * 8 * 4);
  EXPECT_EQ(PlanOf(sxm, "elementwise/b128/v1").launches.at(0).grid[0], 132u * 16 * 4);
  EXPECT_EQ(PlanOf(pcie, "elementwise/b128/v1").launches.at(0).grid[0], 114u * 16 * 4);
  // A small tensor is not capped: the same grid everywhere.
  EXPECT_EQ(PlanOf(Generate(g, {1000}, H100Pcie()), "elementwise/b128/v4").launches.at(0).grid[0], 2u);
  // Fewer resident threads per SM: fewer blocks per wave.
  TargetInfo half = TargetInfo{};
  half.max_threads_per_sm = 1024;
  EXPECT_EQ(PlanOf(Generate(g, {1 << 24}, half), "elementwise/b256/v4").launches.at(0).grid[0], 132u * 4 * 4);
}

TEST(TemplateTarget, WarpPerRowGridScalesWithSmCount) {
  // amax over [2^20, 64]: 131072 warps' blocks wanted, capped at 8 waves.
  const ir::Graph g = UnaryGraph(OpKind::kAmax, 2, {1}, true);
  EXPECT_EQ(PlanOf(Generate(g, {1 << 20, 64}, TargetInfo{}), "row/warp/reg").launches.at(0).grid[0],
            132u * 8 * 8);  // today's 8448
  EXPECT_EQ(PlanOf(Generate(g, {1 << 20, 64}, H100Pcie()), "row/warp/reg").launches.at(0).grid[0], 114u * 8 * 8);
}

TEST(TemplateTarget, SplitRowChunksScaleWithSmCount) {
  // mean over [8, 2^22]: ~4 blocks per SM in all, ceil(4 x SMs / rows) chunks a row.
  const ir::Graph g = UnaryGraph(OpKind::kMean, 2, {1}, true);
  const auto sxm = Generate(g, {8, 1 << 22}, TargetInfo{});
  const auto pcie = Generate(g, {8, 1 << 22}, H100Pcie());
  EXPECT_EQ(PlanOf(sxm, "row/split512/c66").launches.at(0).grid[0], 8u * 66);
  EXPECT_EQ(PlanOf(pcie, "row/split512/c57").launches.at(0).grid[0], 8u * 57);
  EXPECT_FALSE(HasOriginContaining(pcie, "/c66"));
}

TEST(TemplateTarget, TilesplitChunksScaleWithSmCount) {
  // A global average pool of a channels_last activation (level2/67's
  // [128, 64, 254, 254] conv output, stored N, H, W, C): 8192 rows of 64516,
  // 256 tiles of 32 rows. Chunks fill about two waves of blocks: 132 SMs x
  // 8 blocks of 256 x 2 = 2112 blocks -> 9 chunks a tile (114 SMs: 8).
  const ir::Graph g = UnaryGraph(OpKind::kMean, 4, {1, 2});
  const auto sxm = Generate(g, {128, 254, 254, 64}, TargetInfo{});
  const auto pcie = Generate(g, {128, 254, 254, 64}, H100Pcie());
  const LaunchPlan p = PlanOf(sxm, "row/tilesplit32x8/c9");
  ASSERT_EQ(p.launches.size(), 2u);  // the partials, then the finalize
  EXPECT_EQ(p.launches[0].grid[0], 256u * 9);
  EXPECT_EQ(p.launches[0].block[0], 256u);
  EXPECT_EQ(p.launches[1].grid[0], 256u);  // only row outputs: a block per tile
  EXPECT_EQ(p.workspace_bytes, 8192u * 9 * sizeof(double));
  EXPECT_EQ(PlanOf(sxm, "row/tilesplit32x16/c5").launches.at(0).grid[0], 256u * 5);
  EXPECT_EQ(PlanOf(pcie, "row/tilesplit32x8/c8").launches.at(0).grid[0], 256u * 8);
  EXPECT_EQ(sxm.at(0).origin, "template:row/tilesplit32x8/c9");
  // Rows enough for the SMs (1024 tiles), or rows too short: no tilesplit.
  EXPECT_FALSE(HasOriginContaining(Generate(g, {128, 64, 64, 256}, TargetInfo{}), "tilesplit"));
  EXPECT_FALSE(HasOriginContaining(Generate(g, {8, 16, 16, 64}, TargetInfo{}), "tilesplit"));
}

TEST(TemplateTarget, ClusterRowsInFlightFollowSmCountAndL2) {
  const ir::Graph g = UnaryGraph(OpKind::kSoftmax, 2, {1});
  // softmax over [4096, 8192] (32 KB rows): at most 2 rows per SM in flight.
  EXPECT_EQ(PlanOf(Generate(g, {4096, 8192}, TargetInfo{}), "row/cluster1024/q1").launches.at(0).grid[0], 264u);
  EXPECT_EQ(PlanOf(Generate(g, {4096, 8192}, H100Pcie()), "row/cluster1024/q1").launches.at(0).grid[0], 228u);
  // softmax over [1024, 65536] (256 KB rows): 24 MB of a 50 MB L2 holds 96
  // rows (2 CTAs each); half the L2 holds 48 (4 CTAs each to fill the SMs).
  EXPECT_EQ(PlanOf(Generate(g, {1024, 65536}, TargetInfo{}), "row/cluster1024/q2").launches.at(0).grid[0], 96u * 2);
  TargetInfo small_l2;
  small_l2.l2_bytes = 25 * 1024 * 1024;
  EXPECT_EQ(PlanOf(Generate(g, {1024, 65536}, small_l2), "row/cluster1024/q4").launches.at(0).grid[0], 48u * 4);
}

TEST(TemplateTarget, StarvedAndFewLongRowThresholdsFollowSmCount) {
  // mean over [30, 2^21]: 30 rows >= 114 / 4 on the PCIe part, so a block
  // per row is offered there; 30 < 132 / 4 starves the SXM part's SMs.
  const ir::Graph mean = UnaryGraph(OpKind::kMean, 2, {1}, true);
  EXPECT_FALSE(HasOriginContaining(Generate(mean, {30, 1 << 21}, TargetInfo{}), "row/block"));
  EXPECT_TRUE(HasOriginContaining(Generate(mean, {30, 1 << 21}, H100Pcie()), "row/block"));
  // softmax over [240, 16384]: "few long rows" (<= 2 per SM) leads with the
  // split schedule on 132 SMs, not on 114.
  const ir::Graph softmax = UnaryGraph(OpKind::kSoftmax, 2, {1});
  EXPECT_EQ(Generate(softmax, {240, 16384}, TargetInfo{}).at(0).origin.rfind("template:row/split", 0), 0u);
  EXPECT_NE(Generate(softmax, {240, 16384}, H100Pcie()).at(0).origin.rfind("template:row/split", 0), 0u);
}

TEST(TemplateTarget, SharedMemoryRowCacheFitsTheOptInMaximum) {
  // softmax over [4096, 393216]: 192 KB of each 1.5 MB row per CTA of 8 fits
  // 200/227 of 227 KB, not of 163 KB (an sm_80-sized opt-in maximum), where
  // the row takes a cluster of 16 (sm_90's non-portable size): 96 KB a CTA.
  const ir::Graph g = UnaryGraph(OpKind::kSoftmax, 2, {1});
  const auto sxm = Generate(g, {4096, 393216}, TargetInfo{});
  const LaunchPlan q8 = PlanOf(sxm, "row/cluster1024/q8/smem");
  EXPECT_EQ(q8.launches.at(0).shared_mem_bytes, 49152u * 4);
  EXPECT_EQ(q8.launches.at(0).cluster_ctas, 0u);  // a portable size: no attribute
  TargetInfo small_smem;
  small_smem.smem_per_block_optin_bytes = 163 * 1024;
  small_smem.smem_per_sm_bytes = 164 * 1024;
  const auto small = Generate(g, {4096, 393216}, small_smem);
  EXPECT_FALSE(small.empty());
  EXPECT_FALSE(HasOriginContaining(small, "/q8/smem"));
  const LaunchPlan q16 = PlanOf(small, "row/cluster1024/q16/smem");
  EXPECT_EQ(q16.launches.at(0).shared_mem_bytes, 24576u * 4);
  EXPECT_EQ(q16.launches.at(0).cluster_ctas, 16u);
  EXPECT_EQ(q16.launches.at(0).grid[0], 4096u * 16);
  for (const auto& c : small)
    for (const auto& l : c.plan.launches) EXPECT_LE(l.shared_mem_bytes, 163u * 1024) << c.origin;
  // Clusters of 16 are sm_90's: another arch with clusters stops at 8 CTAs
  // and, its chunk too large, gets no shared-memory schedule.
  TargetInfo sm100 = small_smem;
  sm100.arch = "sm_100";
  const auto other = Generate(g, {4096, 393216}, sm100);
  EXPECT_FALSE(other.empty());
  EXPECT_FALSE(HasOriginContaining(other, "/smem"));
}

TEST(TemplateTarget, NoClusterVariantsWithoutClusterLaunch) {
  const ir::Graph g = UnaryGraph(OpKind::kSoftmax, 2, {1});
  TargetInfo no_clusters;
  no_clusters.cluster_launch = false;
  EXPECT_TRUE(HasOriginContaining(Generate(g, {4096, 393216}, TargetInfo{}), "cluster"));
  const auto cands = Generate(g, {4096, 393216}, no_clusters);
  EXPECT_FALSE(cands.empty());
  EXPECT_FALSE(HasOriginContaining(cands, "cluster"));
}

TEST(TemplateTarget, TaskKeyIgnoresDeviceFacts) {
  const ir::Graph g = UnaryGraph(OpKind::kSoftmax, 2, {1});
  const std::vector<ir::TensorSpec> in = {Spec(DType::kFloat32, {64, 4096})};
  TargetInfo other;
  other.sm_count = 114;
  other.l2_bytes = 25 << 20;
  other.smem_per_sm_bytes = 100 << 10;
  other.smem_per_block_optin_bytes = 99 << 10;
  other.max_threads_per_sm = 1536;
  other.cluster_launch = false;
  EXPECT_EQ(MakeTask(g, in, other).Key(), MakeTask(g, in, TargetInfo{}).Key());
  TargetInfo renamed;
  renamed.gpu_name = "NVIDIA H100 PCIe";
  EXPECT_NE(MakeTask(g, in, renamed).Key(), MakeTask(g, in, TargetInfo{}).Key());
}

}  // namespace
}  // namespace dice::generator
