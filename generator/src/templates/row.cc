// row.cc — the "row" template family (families.h).
//
// The iteration space F splits into the reduced axes R (a row's elements,
// linear index k in [0, L)) and the other axes O (the row index, [0, rows)).
// Reductions are grouped into levels (a reduction whose input needs another
// reduction's result is one level later); each level is one pass over the row
// with a warp/block reduction per Reduce node, and a final pass writes the
// full-shaped outputs; outputs without R extent (per-row statistics) are
// written once per row. Variants:
//   column      one thread per row, sequential loop (coalesced when the
//               reduced axis is not innermost: consecutive threads take
//               consecutive inner indices)
//   tile32x<Y>  a 32 x Y block: 32 adjacent rows (coalesced like column when
//               the reduced axis is not innermost), Y threads along each row,
//               combined through shared memory
//   warp        one warp per row, 8 rows per 256-thread block
//   block<B>    one block of B threads per row
//   .../reg     the row's loads cached in registers across passes
//   split<B>    rows cut into C chunks: one kernel per level writes per-chunk
//               partials to the workspace (float64 slots), a finalize kernel
//               combines them (each block redundantly) and writes the outputs
//   tilesplit32x<Y>/c<C>  the tile schedule (32 adjacent rows, coalesced when
//               the reduced axes are not innermost) with each row cut into C
//               chunks, one block per (tile, chunk), and the split schedule's
//               workspace partials and finalize kernel: a global average pool
//               of a channels_last activation (N*C = 8192 rows of 64516) runs
//               256 tiles, a third of an H100's block slots, without it
//   cluster<B>/q<Q>  a row per thread-block cluster of Q CTAs (sm_90+; Q = 1:
//               one block per row), each CTA a contiguous chunk; a pass's
//               partials are combined through distributed shared memory
//               (cluster barrier + ld.shared::cluster) and the grid is capped
//               so the rows in flight fit in L2: the outputs pass re-reads the
//               row from L2 instead of HBM
//   cluster<B>/q<Q>/smem  the cluster schedule with each CTA's chunk of the
//               row cached in dynamic shared memory (up to 200/227 of the
//               opt-in maximum a CTA: 200 KB on sm_90): the row is read from
//               HBM once, its later passes read shared memory (a 1.5 MB
//               softmax row over a cluster of 8 CTAs)
//   .../online  fused statistics: a pass saved per pair of dependent reductions
//               - online softmax (Milakov & Gimelshein 2018, "Online normalizer
//                 calculation for softmax"): Σ exp(t - max t) accumulates in the
//                 same pass as max t, rescaled whenever the running max grows;
//               - moments: Σ (t - Σt/L)^2 = Σt² - (Σt)²/L, both sums in float64
//                 (layer_norm/group_norm variance in the mean's pass).
//               The two-pass variants stay in the list; the tuner picks.
// Grid caps, split chunk counts, rows in flight and the shared-memory budget
// come from the task's target (TargetInfo device facts: SM count, threads per
// SM, L2 bytes, opt-in shared memory per block, cluster launch); the numbers
// quoted in comments are those of the default H100/H200 SXM target.
//
// This file: the analysis (Analyse) and the choice of schedules
// (RowCandidates); the kernels' source: row_emit.cc (row.h).
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "families.h"
#include "row.h"

namespace dice::generator::tmpl {
namespace row {

bool HasRExtent(const Lowered& lo, const RowInfo& ri, int id) {
  for (int a : ri.R)
    if (lo.nodes[id].shape[a] > 1) return true;
  return false;
}

bool RowInfo::IsCached(int id) const {
  return std::find(cached_loads.begin(), cached_loads.end(), id) != cached_loads.end();
}

namespace {

// The number of distinct elements of node `id` along a row: the product of
// its extents over the R axes.
int64_t RExtent(const Lowered& lo, const RowInfo& ri, int id) {
  int64_t e = 1;
  for (int a : ri.R) e *= lo.nodes[id].shape[a];
  return e;
}

bool IsReduce(const Lowered& lo, int id, ReduceOp op) {
  return lo.nodes[id].kind == NodeKind::kReduce && lo.nodes[id].rop == op;
}
bool IsBinary(const Lowered& lo, int id, ir::OpKind op) {
  return lo.nodes[id].kind == NodeKind::kBinary && lo.nodes[id].op == op;
}

// S = Σ exp(t - M) with M = max t over the same axes (softmax, log_softmax):
// returns M, or -1. logsumexp's guarded shift (inf_to_zero) does not match.
int OnlineMaxOf(const Lowered& lo, int s) {
  if (!IsReduce(lo, s, ReduceOp::kSum)) return -1;
  const Node& e = lo.nodes[lo.nodes[s].args[0]];
  if (e.kind != NodeKind::kUnary || e.op != ir::OpKind::kExp || e.inf_to_zero) return -1;
  const int d = e.args[0];
  if (!IsBinary(lo, d, ir::OpKind::kSub)) return -1;
  const int t = lo.nodes[d].args[0], m = lo.nodes[d].args[1];
  if (!IsReduce(lo, m, ReduceOp::kMax) || lo.nodes[m].args[0] != t) return -1;
  return m;
}

// V = Σ (t - S1 / L)^2 with S1 = Σ t over the same L elements (layer_norm,
// group_norm variance): returns S1, or -1.
int MomentSumOf(const Lowered& lo, int v, int64_t L) {
  if (!IsReduce(lo, v, ReduceOp::kSum)) return -1;
  const int sq = lo.nodes[v].args[0];
  if (!IsBinary(lo, sq, ir::OpKind::kMul) || lo.nodes[sq].args[0] != lo.nodes[sq].args[1]) return -1;
  const int d = lo.nodes[sq].args[0];
  if (!IsBinary(lo, d, ir::OpKind::kSub)) return -1;
  const int t = lo.nodes[d].args[0], mean = lo.nodes[d].args[1];
  if (!IsBinary(lo, mean, ir::OpKind::kDiv)) return -1;
  const int s1 = lo.nodes[mean].args[0], c = lo.nodes[mean].args[1];
  if (!IsReduce(lo, s1, ReduceOp::kSum) || lo.nodes[s1].args[0] != t) return -1;
  if (lo.nodes[c].kind != NodeKind::kConst || lo.nodes[c].value != static_cast<double>(L)) return -1;
  return s1;
}

}  // namespace

RowInfo Analyse(const Lowered& lo, bool fuse) {
  RowInfo ri;
  std::set<int> rset(lo.reduce_axes.begin(), lo.reduce_axes.end());
  for (size_t a = 0; a < lo.F.size(); ++a) {
    if (rset.count(static_cast<int>(a))) {
      ri.R.push_back(static_cast<int>(a));
      ri.L *= lo.F[a];
    } else {
      ri.O.push_back(static_cast<int>(a));
      ri.rows *= lo.F[a];
      if (lo.F[a] > 1 && !lo.reduce_axes.empty() && static_cast<int>(a) > lo.reduce_axes.front()) ri.inner = true;
    }
  }
  // cone[id]: highest reduce level feeding node id through non-reduce nodes.
  std::vector<int> cone(lo.nodes.size(), 0);
  ri.level.assign(lo.nodes.size(), 0);
  for (size_t id = 0; id < lo.nodes.size(); ++id) {
    const Node& n = lo.nodes[id];
    int c = 0;
    for (int a : n.args) c = std::max(c, lo.nodes[a].kind == NodeKind::kReduce ? ri.level[a] : cone[a]);
    cone[id] = c;
    if (n.kind == NodeKind::kReduce) {
      ri.level[id] = c + 1;
      if (fuse) {
        const int sid = static_cast<int>(id);
        const int m = OnlineMaxOf(lo, sid);
        const int s1 = m < 0 ? MomentSumOf(lo, sid, ri.L) : -1;
        if (m >= 0 && !ri.online.count(m)) {
          ri.online[m] = sid;
          ri.secondary.insert(sid);
          ri.level[id] = ri.level[m];
        } else if (s1 >= 0 && !ri.moment.count(s1)) {
          ri.moment[s1] = sid;
          ri.secondary.insert(sid);
          ri.level[id] = ri.level[s1];
        }
      }
      ri.max_level = std::max(ri.max_level, ri.level[id]);
      ri.slot[static_cast<int>(id)] = static_cast<int>(ri.reduces.size());
      ri.reduces.push_back(static_cast<int>(id));
    }
    if (n.kind == NodeKind::kLoad && HasRExtent(lo, ri, static_cast<int>(id)) &&
        RExtent(lo, ri, static_cast<int>(id)) * kCacheMinShare > ri.L)
      ri.cached_loads.push_back(static_cast<int>(id));
  }
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    if (HasRExtent(lo, ri, lo.outputs[o].node)) ri.full_outputs.push_back(static_cast<int>(o));
    else ri.row_outputs.push_back(static_cast<int>(o));
  }
  ri.wide = NeedsWideIndex(lo);
  return ri;
}

}  // namespace row

using row::Analyse;
using row::Mode;
using row::RowCfg;
using row::RowEmitter;
using row::RowInfo;

Expected<std::vector<Candidate>> RowCandidates(const Lowered& lo, int max_candidates, const TargetInfo& target) {
  if (lo.num_reduces == 0 || lo.reduce_axes.empty())
    return Status(StatusCode::kUnsupported, "templates: row family given a group without reductions");
  RowInfo ri = Analyse(lo, false);
  const int64_t sms = target.sm_count;
  // Thread-block clusters (and the L2-sized grids built on them) need sm_90+.
  const bool clusters = ArchNumber(target.arch) >= 90 && target.cluster_launch;
  const RowInfo fused = Analyse(lo, true);
  const bool has_fused = !fused.secondary.empty();
  const int nloads = std::max<int>(1, static_cast<int>(ri.cached_loads.size()));
  auto per_for = [&](int group, int max_per) -> int {
    int64_t per = (ri.L + group - 1) / group;
    if (per > max_per || per * nloads > 64) return 0;
    return static_cast<int>(per);
  };
  auto split_cfg = [&](int T) -> RowCfg {
    int64_t c = (sms * 4 + ri.rows - 1) / ri.rows;  // about 4 blocks per SM in all
    c = std::min<int64_t>(c, 1024);
    c = std::min<int64_t>(c, ri.L / (static_cast<int64_t>(T) * 4));
    return RowCfg{Mode::kSplit, T, 0, static_cast<int>(std::max<int64_t>(c, 0))};
  };
  std::vector<RowCfg> order;
  auto warp = [&]() { order.push_back(RowCfg{Mode::kWarp, 256, per_for(32, 32)}); };
  // A block per row leaves most SMs idle when a few rows carry millions of
  // elements (x / norm(x) over 1.9e9 elements ran one block for > 20 s on
  // the H200); split and cluster schedules cover those. Starved: fewer rows
  // than a quarter of the SMs (33 of 132).
  const bool starved = ri.rows < sms / 4 && ri.L > (int64_t{1} << 20);
  auto block = [&](int B) {
    if (!starved) order.push_back(RowCfg{Mode::kBlock, B, per_for(B, 16)});
  };
  auto tile = [&](int Y) { order.push_back(RowCfg{Mode::kTile, 32 * Y, per_for(Y, 32)}); };
  // A thread per row caches the whole row when it is short (RMSNorm over 64 channels).
  auto column = [&](int T) { order.push_back(RowCfg{Mode::kColumn, T, per_for(1, 64)}); };
  auto split = [&](int T) {
    RowCfg cfg = split_cfg(T);
    if (cfg.chunks >= 2) order.push_back(cfg);
  };
  // Rows long enough that re-reading them from HBM costs: a cluster (or a
  // block) per row with the grid capped so that the rows in flight (48% of
  // L2: 24 MB of the 50 MB on H100/H200) stay in L2 between the statistics
  // pass and the outputs pass; at most 2 rows per SM in flight. Q CTAs share
  // a row so that enough CTAs run: half of every SM's threads.
  auto cluster = [&](int T) {
    if (!clusters || ri.L < 8192 || ri.rows < 16) return;
    const int64_t row_bytes = ri.L * 4 * std::max<int64_t>(1, static_cast<int64_t>(ri.cached_loads.size()));
    const int64_t fit = target.l2_bytes * 12 / 25 / row_bytes;  // rows that fit in the L2 budget
    if (fit < 4) return;  // rows of several MB: the split schedule serves them
    const int64_t live = std::min<int64_t>({fit, 2 * sms, ri.rows});
    int Q = 1;
    while (Q < 8 && live * Q < sms * (target.max_threads_per_sm / 2) / T) Q *= 2;
    if (ri.L / Q < T) return;
    RowCfg cfg{Mode::kCluster, T, 0, Q};
    cfg.grid = live * Q;
    order.push_back(cfg);
  };
  // A row cached in the shared memory of a cluster's CTAs (Q = 1..8, at most
  // 200/227 of the opt-in maximum a CTA, 200 KB on sm_90, leaving room for the
  // static shared memory): read once from HBM whatever the L2 holds. Cluster
  // of the fewest CTAs whose chunk fits. sm_90 also runs clusters of 16 CTAs
  // (the non-portable size, KernelLaunch::cluster_ctas): rows up to 3.2 MB of
  // cached floats, such as a group norm's 8 channels of 258 x 258 (level-2
  // task 19, 2.1 MB a row).
  const int64_t smem_budget = int64_t{target.smem_per_block_optin_bytes} * 200 / 227;
  const int max_q = ArchNumber(target.arch) == 90 ? 16 : 8;
  auto cluster_smem = [&](int T) {
    if (!clusters || ri.L < 16384 || ri.cached_loads.empty()) return;
    const int64_t per_elem = static_cast<int64_t>(ri.cached_loads.size()) * 4;
    int Q = 1;
    while (Q < max_q && ((ri.L + Q - 1) / Q) * per_elem > smem_budget) Q *= 2;
    if (((ri.L + Q - 1) / Q) * per_elem > smem_budget || ri.L / Q < T) return;
    RowCfg cfg{Mode::kCluster, T, 0, Q};
    cfg.smem = true;
    cfg.grid = std::min<int64_t>(ri.rows, 4096) * Q;
    order.push_back(cfg);
  };
  // Reduced axes not innermost with few tiles of 32 rows for the SMs (fewer
  // than 4 blocks each) and long rows: the rows are cut into chunks so that
  // about 2 waves of blocks stream (H100/H200: 2112 blocks of 256 threads),
  // each thread over at least 64 elements of its row.
  auto tilesplit = [&](int Y) {
    const int64_t tiles = (ri.rows + 31) / 32;
    const int T = 32 * Y;
    const int64_t want = int64_t{sms} * (target.max_threads_per_sm / T) * 2;
    int64_t c = std::min<int64_t>((want + tiles - 1) / tiles, 256);
    c = std::min<int64_t>(c, ri.L / (int64_t{Y} * 64));
    if (c >= 2) order.push_back(RowCfg{Mode::kTileSplit, T, 0, static_cast<int>(c)});
  };
  const bool few_long_rows = ri.rows <= 2 * sms && ri.L >= 16384;  // at most 2 rows per SM
  if (ri.inner) {
    if ((ri.rows + 31) / 32 < int64_t{sms} * 4 && ri.L >= 4096) {
      tilesplit(8);
      tilesplit(16);
    }
    column(128); tile(8); tile(16); column(256); block(256); warp(); block(128);
  } else if (few_long_rows) {
    split(512); split(256); cluster(1024); cluster_smem(1024); block(1024); block(512); block(256);
  } else if (ri.L <= 16) {
    column(128); warp(); column(256); block(128);
  } else if (ri.L <= 1024) {
    warp(); block(128); block(256); block(512); column(128);
  } else if (ri.L <= 4096) {
    block(256); block(512); block(128); block(1024); warp(); split(256);
  } else {
    // Measured on H200 (4096 x 393216 log_softmax, 32768 x 65535 L1 norm): a
    // block of 1024 per row beat the L2-sized cluster grids; they stay as options.
    cluster_smem(1024); block(1024); block(512); cluster(1024); cluster_smem(512); block(256); split(512); warp();
    cluster(512);
  }
  // With fused statistics available (softmax, normalisations), each schedule
  // comes first in its one-pass-fewer form, followed by the two-pass forms.
  if (has_fused) {
    std::vector<RowCfg> both;
    for (RowCfg cfg : order) {
      if (cfg.mode == Mode::kTile || cfg.mode == Mode::kTileSplit) continue;  // no tile form of the fused reductions
      cfg.fused = true;
      both.push_back(cfg);
    }
    both.insert(both.end(), order.begin(), order.end());
    order = std::move(both);
  }
  std::vector<Candidate> out;
  std::set<std::string> seen;
  for (const auto& cfg : order) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    RowEmitter e(lo, cfg.fused ? fused : ri, cfg, target);
    Candidate c = e.Build();
    if (!seen.insert(c.origin).second) continue;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dice::generator::tmpl
