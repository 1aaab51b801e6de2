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
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "emit.h"
#include "families.h"

namespace dice::generator::tmpl {
namespace {

// Per-thread accumulator type: double for sums (see EmitReductions), float otherwise.
std::string AccType(ReduceOp op) { return op == ReduceOp::kSum ? "double" : "float"; }
std::string AccToFloat(ReduceOp op, const std::string& acc) {
  return op == ReduceOp::kSum ? "static_cast<float>(" + acc + ")" : acc;
}


enum class Mode { kColumn, kWarp, kBlock, kSplit, kCluster, kTile, kTileSplit };

struct RowCfg {
  Mode mode;
  int threads;
  int per = 0;     // register-cache slots per thread (0 = re-read global memory)
  int chunks = 1;  // split: chunks per row (one block each); cluster: CTAs per row (cluster size)
  int64_t grid = 0;  // cluster: CTAs launched (rows in flight x chunks), sized for L2 residency
  bool fused = false;  // fused statistics (online softmax, moments); see the header comment
  bool smem = false;   // cluster: the CTA's chunk of every cached load kept in dynamic shared memory
};

struct RowInfo {
  std::vector<int> O, R;
  int64_t rows = 1, L = 1;
  bool inner = false;               // an O axis (extent > 1) lies inside R: reduced axis not innermost
  std::vector<int> level;           // per node: level of a Reduce node (1..), 0 otherwise
  int max_level = 0;
  std::vector<int> reduces;         // reduce node ids
  std::vector<int> cached_loads;    // load nodes with R extent > 1
  std::vector<int> full_outputs, row_outputs;  // output indices
  std::map<int, int> slot;          // reduce node -> workspace slot
  bool wide = false;
  // Fused statistics (only when analysed with fuse = true). A secondary reduce
  // is computed in its primary's pass and shares its level.
  std::map<int, int> online;   // max reduce M -> sum reduce S = Σ exp(t - M), t = M's argument
  std::map<int, int> moment;   // sum reduce S1 = Σ t -> sum reduce V = Σ (t - S1/L)^2
  std::set<int> secondary;     // the S and V above
  bool IsSecondary(int id) const { return secondary.count(id) > 0; }
};

bool HasRExtent(const Lowered& lo, const RowInfo& ri, int id) {
  for (int a : ri.R)
    if (lo.nodes[id].shape[a] > 1) return true;
  return false;
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
    if (n.kind == NodeKind::kLoad && HasRExtent(lo, ri, static_cast<int>(id))) ri.cached_loads.push_back(static_cast<int>(id));
  }
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    if (HasRExtent(lo, ri, lo.outputs[o].node)) ri.full_outputs.push_back(static_cast<int>(o));
    else ri.row_outputs.push_back(static_cast<int>(o));
  }
  ri.wide = NeedsWideIndex(lo);
  return ri;
}

class RowEmitter {
 public:
  RowEmitter(const Lowered& lo, const RowInfo& ri, const RowCfg& cfg, const TargetInfo& target)
      : lo_(lo), ri_(ri), cfg_(cfg), target_(target) {
    idx_ = IdxType(ri.wide);
  }

  Candidate Build();

 private:
  std::string Lit(int64_t v) const { return IdxLit(v, ri_.wide); }
  int Group() const {
    switch (cfg_.mode) {
      case Mode::kColumn: return 1;
      case Mode::kWarp: return 32;
      case Mode::kTile:
      case Mode::kTileSplit: return cfg_.threads / 32;
      default: return cfg_.threads;
    }
  }
  bool Chunked() const {
    return cfg_.mode == Mode::kSplit || cfg_.mode == Mode::kCluster || cfg_.mode == Mode::kTileSplit;
  }
  bool Tiled() const { return cfg_.mode == Mode::kTile || cfg_.mode == Mode::kTileSplit; }
  // The cached copy of load `id` at this thread's element: register slot
  // (per > 0, loop index it) or the CTA's shared-memory chunk (smem, k - kbeg).
  std::string CachedAt(int id) const {
    return "c" + std::to_string(id) + (cfg_.smem ? "[k - kbeg]" : "[it]");
  }
  std::string Tag() const;
  // A load (or rotate_half's sign, lowering.h) at this row and, with
  // `element`, element k; a rotated one reads rot_half away along its axis.
  std::string LoadAt(int id, bool element) const {
    const Node& n = lo_.nodes[id];
    std::string rot = RotateShiftExpr(n, ri_.O, lo_.F, "row", ri_.wide) + RotateSignExpr(n, ri_.O, lo_.F, "row", ri_.wide);
    if (element && rot.empty())
      rot = RotateShiftExpr(n, ri_.R, lo_.F, "k", ri_.wide) + RotateSignExpr(n, ri_.R, lo_.F, "k", ri_.wide);
    if (n.kind == NodeKind::kRotSign) return rot;
    std::string off = OffsetExpr(ri_.O, lo_.F, n.strides, "row", ri_.wide);
    if (element) {
      std::string k = OffsetExpr(ri_.R, lo_.F, n.strides, "k", ri_.wide);
      if (k != "0") off = off == "0" ? k : off + " + " + k;
    }
    return "dice_ld(in" + std::to_string(n.input) + " + " + off + rot + ")";
  }
  // Opens an element loop over this thread's k; `body` is emitted inside.
  void ElementLoop(const std::string& indent, const std::function<void(const std::string&)>& body, std::string* s,
                   bool use_cache) const;
  std::string GroupReduce(ReduceOp op, const std::string& acc) const;
  // Fused statistics: group-reduces and names the results of a primary reduce
  // and its secondary (online pair: r<M>, r<S>; moments: d/r<S1>, d/r<V>)
  // from the per-thread accumulators acc<id>.
  void EmitFusedFinish(int primary, const std::string& ind, std::string* s, bool group_reduce = true) const;
  // Declares acc<id> for reduce `id` (secondaries included).
  void EmitAccDecl(int id, const std::string& ind, std::string* s) const;
  void EmitLevel(int level, const std::string& indent, std::string* s, bool use_cache) const;
  void EmitFullOutputs(const std::string& indent, std::string* s, bool use_cache) const;
  // The element loop writing the full-shaped outputs; with `reciprocals`,
  // divisions by row-invariant nodes use dice_inv<d> (see EmitFullOutputs).
  void EmitOutputLoop(const std::vector<int>& targets, const std::string& indent, std::string* s, bool use_cache,
                      bool reciprocals) const;
  // Row-invariant divisors d of divisions x / d (x varying along the row) in
  // the cone of `targets`, ascending.
  std::vector<int> InvariantDivisors(const std::vector<int>& targets) const;
  void EmitRowOutputs(const std::string& indent, const std::string& cond, std::string* s) const;
  void EmitCombinePartials(int below_level, const std::string& indent, std::string* s) const;
  // Combines per-chunk partials of the reduces whose level satisfies `pick`:
  // part(id) is the expression of chunk q's partial; `loop` the loop header
  // over q; with group_reduce false every thread combines all chunks itself.
  void EmitCombine(const std::function<bool(int)>& pick, const std::function<std::string(int)>& part,
                   const std::string& loop, bool group_reduce, const std::string& ind, std::string* s) const;
  std::string ClusterKernel(const std::string& name) const;
  // The workspace slot of reduce `id`'s partial for this row and chunk
  // `chunk` (an expression): split and tilesplit share the layout
  // [reduce][row][chunk] of float64.
  std::string PartialAt(int id, const std::string& chunk) const {
    return "ws[" + Lit(ri_.slot.at(id) * ri_.rows * cfg_.chunks) + " + row * " + Lit(cfg_.chunks) + " + " + chunk + "]";
  }
  // Declares kbeg / kend: the k range of `chunk` (declared before) when the
  // row is cut into cfg_.chunks equal chunks (the last one shorter).
  std::string ChunkRange() const {
    const int64_t CL = (ri_.L + cfg_.chunks - 1) / cfg_.chunks;
    return "  const " + idx_ + " kbeg = chunk * " + Lit(CL) + ";\n  const " + idx_ + " kend = kbeg + " + Lit(CL) +
           " < " + Lit(ri_.L) + " ? kbeg + " + Lit(CL) + " : " + Lit(ri_.L) + ";\n";
  }
  std::string SplitKernel(const std::string& name, int level) const;  // level 0 = finalize
  // tilesplit: level l's partials of (tile, chunk), or (level 0) the finalize;
  // `whole_tiles`: the finalize runs one block per tile (no full outputs).
  std::string TileSplitKernel(const std::string& name, int level, bool whole_tiles) const;
  std::string FusedKernel(const std::string& name) const;

  const Lowered& lo_;
  const RowInfo& ri_;
  const RowCfg& cfg_;
  const TargetInfo& target_;
  std::string idx_;
};

std::string RowEmitter::Tag() const {
  const std::string reg = cfg_.per > 0 ? "/reg" : "";
  const std::string fused = cfg_.fused ? "/online" : "";
  switch (cfg_.mode) {
    case Mode::kColumn: return "column" + std::to_string(cfg_.threads) + reg + fused;
    case Mode::kWarp: return "warp" + reg + fused;
    case Mode::kBlock: return "block" + std::to_string(cfg_.threads) + reg + fused;
    case Mode::kSplit: return "split" + std::to_string(cfg_.threads) + "/c" + std::to_string(cfg_.chunks) + fused;
    case Mode::kCluster:
      return "cluster" + std::to_string(cfg_.threads) + "/q" + std::to_string(cfg_.chunks) + (cfg_.smem ? "/smem" : "") +
             fused;
    case Mode::kTile: return "tile32x" + std::to_string(cfg_.threads / 32) + reg + fused;
    case Mode::kTileSplit:
      return "tilesplit32x" + std::to_string(cfg_.threads / 32) + "/c" + std::to_string(cfg_.chunks) + fused;
  }
  return "";
}

void RowEmitter::EmitAccDecl(int id, const std::string& ind, std::string* s) const {
  const ReduceOp op = lo_.nodes[id].rop;
  *s += ind + AccType(op) + " acc" + std::to_string(id) + " = " + ReduceIdentity(op) + ";\n";
}

void RowEmitter::EmitFusedFinish(int primary, const std::string& ind, std::string* s, bool group_reduce) const {
  const std::string p = std::to_string(primary);
  const std::string T = std::to_string(cfg_.threads);
  const bool warp = group_reduce && cfg_.mode == Mode::kWarp;
  const bool block = group_reduce && (cfg_.mode == Mode::kBlock || Chunked());
  if (auto on = ri_.online.find(primary); on != ri_.online.end()) {
    const std::string q = std::to_string(on->second);
    *s += ind + "float r" + p + " = acc" + p + ";\n";
    *s += ind + "float r" + q + " = static_cast<float>(acc" + q + ");\n";
    if (warp) *s += ind + "dice_warp_reduce_online(r" + p + ", r" + q + ");\n";
    if (block) *s += ind + "dice_block_reduce_online<" + T + ">(r" + p + ", r" + q + ", dice_sh);\n";
    return;
  }
  const int v = ri_.moment.at(primary);
  const std::string q = std::to_string(v);
  for (const std::string& id : {p, q}) {
    std::string red = "acc" + id;
    if (warp) red = "dice_warp_reduce_sum_d(" + red + ")";
    if (block) red = "dice_block_reduce_sum_d<" + T + ">(" + red + ", dice_shd)";
    *s += ind + "const double d" + id + " = " + red + ";\n";
  }
  *s += ind + "const float r" + p + " = static_cast<float>(d" + p + ");\n";
  *s += ind + "const float r" + q + " = static_cast<float>(fmax(d" + q + " - d" + p + " * d" + p + " / " +
        std::to_string(ri_.L) + ".0, 0.0));\n";
}

void RowEmitter::ElementLoop(const std::string& ind, const std::function<void(const std::string&)>& body,
                             std::string* s, bool use_cache) const {
  const int G = Group();
  if (use_cache && !cfg_.smem) {
    const bool exact = static_cast<int64_t>(cfg_.per) * G == ri_.L;
    *s += ind + "#pragma unroll\n";
    *s += ind + "for (int it = 0; it < " + std::to_string(cfg_.per) + "; ++it) {\n";
    *s += ind + "  const " + idx_ + " k = tid + (" + idx_ + ")it * " + Lit(G) + ";\n";
    if (!exact) *s += ind + "  if (k < " + Lit(ri_.L) + ") {\n";
    body(ind + (exact ? "  " : "    "));
    if (!exact) *s += ind + "  }\n";
    *s += ind + "}\n";
  } else if (Chunked()) {
    // A tile's warps each stream their own k: unrolled, a thread has four
    // loads in flight instead of one behind its accumulator.
    if (cfg_.mode == Mode::kTileSplit) *s += ind + "#pragma unroll 4\n";
    *s += ind + "for (" + idx_ + " k = kbeg + tid; k < kend; k += " + Lit(G) + ") {\n";
    body(ind + "  ");
    *s += ind + "}\n";
  } else {
    *s += ind + "for (" + idx_ + " k = tid; k < " + Lit(ri_.L) + "; k += " + Lit(G) + ") {\n";
    body(ind + "  ");
    *s += ind + "}\n";
  }
}

std::string RowEmitter::GroupReduce(ReduceOp op, const std::string& acc) const {
  const std::string tag = std::to_string(static_cast<int>(op));
  switch (cfg_.mode) {
    case Mode::kColumn: return acc;
    case Mode::kWarp: return "dice_warp_reduce<" + tag + ">(" + acc + ")";
    case Mode::kTile:
    case Mode::kTileSplit:
      return "dice_tile_reduce<" + tag + ", " + std::to_string(cfg_.threads / 32) + ">(" + acc + ", dice_sh)";
    default: return "dice_block_reduce<" + tag + ", " + std::to_string(cfg_.threads) + ">(" + acc + ", dice_sh)";
  }
}

void RowEmitter::EmitLevel(int level, const std::string& ind, std::string* s, bool use_cache) const {
  std::vector<int> reds, targets;
  for (int id : ri_.reduces)
    if (ri_.level[id] == level) {
      reds.push_back(id);
      // A secondary's argument needs its primary's result: it is accumulated
      // from the primary's argument t instead (see the header comment).
      if (!ri_.IsSecondary(id)) targets.push_back(lo_.nodes[id].args[0]);
    }
  // Sums accumulate per thread in double: a thread may add thousands of
  // elements, and float accumulation over that many drifts past the float32
  // limit of the verifier (PyTorch's cascade sum is more accurate than a
  // sequential float sum). The memory-bound loop does not notice the FP64 add.
  for (int id : reds) EmitAccDecl(id, ind, s);
  ElementLoop(
      ind,
      [&](const std::string& in2) {
        auto load = [&](int id) {
          if (use_cache && lo_.nodes[id].kind == NodeKind::kLoad && HasRExtent(lo_, ri_, id)) return CachedAt(id);
          return LoadAt(id, true);
        };
        EmitNodes(lo_, targets, load, in2, s);
        for (int id : reds) {
          if (ri_.IsSecondary(id)) continue;
          const std::string acc = "acc" + std::to_string(id);
          const std::string val = ValueName(lo_, lo_.nodes[id].args[0]);
          if (auto on = ri_.online.find(id); on != ri_.online.end()) {
            // Running max and Σ exp(t - max): rescale when the max grows (or turns NaN).
            const std::string sa = "acc" + std::to_string(on->second);
            *s += in2 + "if (" + val + " > " + acc + " || " + val + " != " + val + ") { " + sa +
                  " *= static_cast<double>(expf(" + acc + " - " + val + ")); " + acc + " = " + val + "; }\n";
            // expf unconditionally + select (not a branch around it: branches
            // between elements keep the compiler from batching their loads).
            *s += in2 + "{ const float e = expf(" + val + " - " + acc + "); " + sa + " += static_cast<double>(" + val +
                  " == -DICE_INF ? 0.0f : e); }\n";
            continue;
          }
          *s += in2 + acc + " = " + ReduceCombine(lo_.nodes[id].rop, acc, val) + ";\n";
          if (auto mo = ri_.moment.find(id); mo != ri_.moment.end())
            *s += in2 + "acc" + std::to_string(mo->second) + " += static_cast<double>(" + val +
                  ") * static_cast<double>(" + val + ");\n";
        }
      },
      s, use_cache);
  for (int id : reds) {
    if (ri_.IsSecondary(id)) continue;
    if (ri_.online.count(id) || ri_.moment.count(id)) {
      EmitFusedFinish(id, ind, s);
      continue;
    }
    *s += ind + "const float r" + std::to_string(id) + " = " +
          GroupReduce(lo_.nodes[id].rop, AccToFloat(lo_.nodes[id].rop, "acc" + std::to_string(id))) + ";\n";
  }
}

std::vector<int> RowEmitter::InvariantDivisors(const std::vector<int>& targets) const {
  std::set<int> seen, divs;
  std::vector<int> stack(targets.begin(), targets.end());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (!seen.insert(id).second) continue;
    const Node& n = lo_.nodes[id];
    if (n.kind == NodeKind::kReduce) continue;
    if (n.kind == NodeKind::kBinary && n.op == ir::OpKind::kDiv && HasRExtent(lo_, ri_, id) &&
        !HasRExtent(lo_, ri_, n.args[1]))
      divs.insert(n.args[1]);
    for (int a : n.args) stack.push_back(a);
  }
  return std::vector<int>(divs.begin(), divs.end());
}

void RowEmitter::EmitFullOutputs(const std::string& ind, std::string* s, bool use_cache) const {
  if (ri_.full_outputs.empty()) return;
  std::vector<int> targets;
  for (int o : ri_.full_outputs) targets.push_back(lo_.outputs[o].node);
  // x / (row statistic): the reciprocal is computed once per row and the
  // loop multiplies (IEEE division costs ~10 instructions and, behind a
  // per-element check, keeps loads from being batched). The loop is emitted
  // twice: with the reciprocals when all are normal floats for this row, with
  // the divisions otherwise (a * (1/b) is then not a / b up to rounding).
  const std::vector<int> divs = InvariantDivisors(targets);
  if (divs.empty()) {
    EmitOutputLoop(targets, ind, s, use_cache, false);
    return;
  }
  for (int d : divs) *s += ind + "float dice_inv" + std::to_string(d) + ";\n";
  *s += ind + "bool dice_inv_ok = true;\n";
  *s += ind + "{\n";
  EmitNodes(lo_, divs, [&](int id) { return LoadAt(id, false); }, ind + "  ", s);
  for (int d : divs) {
    const std::string inv = "dice_inv" + std::to_string(d);
    *s += ind + "  " + inv + " = 1.0f / " + ValueName(lo_, d) + ";\n";
    *s += ind + "  dice_inv_ok = dice_inv_ok && dice_rcp_normal(" + inv + ");\n";
  }
  *s += ind + "}\n";
  *s += ind + "if (dice_inv_ok) {\n";
  EmitOutputLoop(targets, ind + "  ", s, use_cache, true);
  *s += ind + "} else {\n";
  EmitOutputLoop(targets, ind + "  ", s, use_cache, false);
  *s += ind + "}\n";
}

void RowEmitter::EmitOutputLoop(const std::vector<int>& targets, const std::string& ind, std::string* s,
                                bool use_cache, bool reciprocals) const {
  ElementLoop(
      ind,
      [&](const std::string& in2) {
        auto load = [&](int id) {
          if (use_cache && lo_.nodes[id].kind == NodeKind::kLoad && HasRExtent(lo_, ri_, id)) return CachedAt(id);
          return LoadAt(id, true);
        };
        std::function<bool(int)> invariant = nullptr;
        if (reciprocals) invariant = [&](int id) { return !HasRExtent(lo_, ri_, id); };
        EmitNodes(lo_, targets, load, in2, s, invariant);
        for (int o : ri_.full_outputs) {
          const auto& out = lo_.outputs[o];
          const auto& shape = lo_.nodes[out.node].shape;
          std::string off = OffsetExpr(ri_.O, lo_.F, out.strides, "row", ri_.wide);
          std::string k = OffsetExpr(ri_.R, lo_.F, out.strides, "k", ri_.wide);
          if (k != "0") off = off == "0" ? k : off + " + " + k;
          std::string g1 = GuardExpr(ri_.O, lo_.F, shape, "row", ri_.wide);
          std::string g2 = GuardExpr(ri_.R, lo_.F, shape, "k", ri_.wide);
          std::string guard = g1.empty() ? g2 : (g2.empty() ? g1 : g1 + " && " + g2);
          if (Tiled()) guard = guard.empty() ? "live" : "live && " + guard;
          std::string st = "dice_st(out" + std::to_string(o) + " + " + off + ", " + ValueName(lo_, out.node) + ");";
          *s += in2 + (guard.empty() ? st : "if (" + guard + ") " + st) + "\n";
        }
      },
      s, use_cache);
}

void RowEmitter::EmitRowOutputs(const std::string& ind, const std::string& cond, std::string* s) const {
  if (ri_.row_outputs.empty()) return;
  std::vector<int> targets;
  for (int o : ri_.row_outputs) targets.push_back(lo_.outputs[o].node);
  *s += ind + "if (" + cond + ") {\n";
  EmitNodes(lo_, targets, [&](int id) { return LoadAt(id, false); }, ind + "  ", s);
  for (int o : ri_.row_outputs) {
    const auto& out = lo_.outputs[o];
    std::string guard = GuardExpr(ri_.O, lo_.F, lo_.nodes[out.node].shape, "row", ri_.wide);
    std::string st = "dice_st(out" + std::to_string(o) + " + " +
                     OffsetExpr(ri_.O, lo_.F, out.strides, "row", ri_.wide) + ", " + ValueName(lo_, out.node) + ");";
    *s += ind + "  " + (guard.empty() ? st : "if (" + guard + ") " + st) + "\n";
  }
  *s += ind + "}\n";
}

std::string RowEmitter::FusedKernel(const std::string& name) const {
  const int T = cfg_.threads;
  std::string s = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(T) + ") " + name + "(" +
                  ParamList(lo_, false) + ") {\n";
  std::string row0, step;
  switch (cfg_.mode) {
    case Mode::kColumn:
      s += "  const unsigned tid = 0u;\n";
      row0 = "(" + idx_ + ")blockIdx.x * " + Lit(T) + " + threadIdx.x";
      step = "(" + idx_ + ")gridDim.x * " + Lit(T);
      break;
    case Mode::kWarp:
      s += "  const unsigned tid = threadIdx.x & 31u;\n";
      row0 = "(" + idx_ + ")blockIdx.x * " + Lit(T / 32) + " + (threadIdx.x >> 5)";
      step = "(" + idx_ + ")gridDim.x * " + Lit(T / 32);
      break;
    case Mode::kTile:
      s += "  __shared__ float dice_sh[" + std::to_string(33 * (T / 32)) + "];\n";
      s += "  const unsigned tid = threadIdx.x >> 5;\n";
      break;
    default:
      s += "  __shared__ float dice_sh[64];\n";
      if (!ri_.moment.empty()) s += "  __shared__ double dice_shd[32];\n";
      s += "  const unsigned tid = threadIdx.x;\n";
      row0 = "(" + idx_ + ")blockIdx.x";
      step = "(" + idx_ + ")gridDim.x";
      break;
  }
  if (cfg_.mode == Mode::kTile) {
    // The whole block runs the same iterations (it synchronises in the tile
    // reduction); lanes past the last row compute row rows-1 and store nothing.
    s += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * 32; row0 < " + Lit(ri_.rows) + "; row0 += (" + idx_ +
         ")gridDim.x * 32) {\n";
    s += "    const bool live = row0 + (threadIdx.x & 31u) < " + Lit(ri_.rows) + ";\n";
    s += "    const " + idx_ + " row = live ? row0 + (threadIdx.x & 31u) : " + Lit(ri_.rows - 1) + ";\n";
  } else {
    s += "  for (" + idx_ + " row = " + row0 + "; row < " + Lit(ri_.rows) + "; row += " + step + ") {\n";
  }
  const bool cache = cfg_.per > 0;
  if (cache) {
    for (int id : ri_.cached_loads) s += "    float c" + std::to_string(id) + "[" + std::to_string(cfg_.per) + "];\n";
    ElementLoop(
        "    ",
        [&](const std::string& in2) {
          for (int id : ri_.cached_loads) s += in2 + "c" + std::to_string(id) + "[it] = " + LoadAt(id, true) + ";\n";
        },
        &s, true);
  }
  for (int l = 1; l <= ri_.max_level; ++l) EmitLevel(l, "    ", &s, cache);
  EmitFullOutputs("    ", &s, cache);
  EmitRowOutputs("    ", cfg_.mode == Mode::kTile ? "tid == 0u && live" : "tid == 0u", &s);
  s += "  }\n}\n";
  return s;
}

void RowEmitter::EmitCombine(const std::function<bool(int)>& pick, const std::function<std::string(int)>& part,
                             const std::string& loop, bool group_reduce, const std::string& ind,
                             std::string* s) const {
  for (int id : ri_.reduces) {
    if (!pick(id) || ri_.IsSecondary(id)) continue;
    const std::string acc = "acc" + std::to_string(id);
    const ReduceOp op = lo_.nodes[id].rop;
    EmitAccDecl(id, ind, s);
    if (auto on = ri_.online.find(id); on != ri_.online.end()) {
      // Chunk partials (max, Σ exp(t - chunk max)) combine like two threads' do.
      const int q = on->second;
      *s += ind + "float acc" + std::to_string(q) + "f = 0.0f;\n";
      *s += ind + loop + "dice_online_combine(" + acc + ", acc" + std::to_string(q) + "f, static_cast<float>(" +
            part(id) + "), static_cast<float>(" + part(q) + "));\n";
      *s += ind + "const double acc" + std::to_string(q) + " = acc" + std::to_string(q) + "f;\n";
      EmitFusedFinish(id, ind, s, group_reduce);
      continue;
    }
    if (auto mo = ri_.moment.find(id); mo != ri_.moment.end()) {
      EmitAccDecl(mo->second, ind, s);
      *s += ind + loop + "{ " + acc + " += " + part(id) + "; acc" + std::to_string(mo->second) + " += " +
            part(mo->second) + "; }\n";
      EmitFusedFinish(id, ind, s, group_reduce);
      continue;
    }
    *s += ind + loop + acc + " = " + ReduceCombine(op, acc, part(id)) + ";\n";
    const std::string val = AccToFloat(op, acc);
    *s += ind + "const float r" + std::to_string(id) + " = " + (group_reduce ? GroupReduce(op, val) : val) + ";\n";
  }
}

void RowEmitter::EmitCombinePartials(int below_level, const std::string& ind, std::string* s) const {
  EmitCombine([&](int id) { return ri_.level[id] < below_level; },
              [&](int id) { return PartialAt(id, "q"); },
              "for (unsigned q = tid; q < " + std::to_string(cfg_.chunks) + "u; q += " +
                  std::to_string(cfg_.threads) + "u) ",
              true, ind, s);
}

bool IsMomentReduce(const RowInfo& ri, int id) {
  if (ri.moment.count(id)) return true;
  for (const auto& kv : ri.moment)
    if (kv.second == id) return true;
  return false;
}

std::string RowEmitter::ClusterKernel(const std::string& name) const {
  const int T = cfg_.threads;
  const int Q = cfg_.chunks;
  const int64_t CL = (ri_.L + Q - 1) / Q;
  std::string s = "extern \"C\" __global__ void " +
                  (Q > 1 ? "__cluster_dims__(" + std::to_string(Q) + ", 1, 1) " : std::string()) +
                  "__launch_bounds__(" + std::to_string(T) + ") " + name + "(" + ParamList(lo_, false) + ") {\n";
  s += "  __shared__ float dice_sh[64];\n";
  if (!ri_.moment.empty()) s += "  __shared__ double dice_shd[32];\n";
  if (Q > 1) s += "  __shared__ double dice_cl[" + std::to_string(ri_.reduces.size()) + "];\n";
  s += "  const unsigned tid = threadIdx.x;\n";
  s += "  const " + idx_ + " chunk = (" + idx_ + ")blockIdx.x % " + Lit(Q) + ";  // == %cluster_ctarank\n";
  s += ChunkRange();
  const bool sm = cfg_.smem;
  if (sm) {
    // The chunk of each cached load: CL floats per load, in dynamic shared memory.
    s += "  extern __shared__ float dice_rowc[];\n";
    for (size_t j = 0; j < ri_.cached_loads.size(); ++j)
      s += "  float* const c" + std::to_string(ri_.cached_loads[j]) + " = dice_rowc + " +
           std::to_string(static_cast<int64_t>(j) * CL) + ";\n";
  }
  s += "  for (" + idx_ + " row = (" + idx_ + ")blockIdx.x / " + Lit(Q) + "; row < " + Lit(ri_.rows) +
       "; row += (" + idx_ + ")gridDim.x / " + Lit(Q) + ") {\n";
  if (sm) {
    // One read of the chunk from global memory. Every later loop gives each
    // thread the same k as this one, so a thread reads back only what it
    // wrote: no barrier needed. Unrolled so that eight loads per thread are
    // in flight (one CTA of T threads per SM holds the whole chunk).
    s += "    #pragma unroll 8\n";
    ElementLoop(
        "    ",
        [&](const std::string& in2) {
          for (int id : ri_.cached_loads) s += in2 + CachedAt(id) + " = " + LoadAt(id, true) + ";\n";
        },
        &s, false);
  }
  for (int l = 1; l <= ri_.max_level; ++l) {
    if (Q == 1) {
      EmitLevel(l, "    ", &s, sm);
      continue;
    }
    // This CTA's partials, published in its shared memory ...
    s += "    {\n";
    EmitLevel(l, "      ", &s, sm);
    for (int id : ri_.reduces)
      if (ri_.level[id] == l)
        s += "      if (tid == 0u) dice_cl[" + std::to_string(ri_.slot.at(id)) + "] = " +
             (IsMomentReduce(ri_, id) ? "d" : "r") + std::to_string(id) + ";\n";
    s += "    }\n";
    s += "    dice_cluster_sync();\n";
    // ... combined by every thread of every CTA in rank order (identical results).
    EmitCombine([&](int id) { return ri_.level[id] == l; },
                [&](int id) { return "dice_dsmem_ld(&dice_cl[" + std::to_string(ri_.slot.at(id)) + "], q)"; },
                "for (unsigned q = 0u; q < " + std::to_string(Q) + "u; ++q) ", false, "    ", &s);
    s += "    dice_cluster_sync();  // peers have read dice_cl before the next row overwrites it\n";
  }
  EmitFullOutputs("    ", &s, sm);
  EmitRowOutputs("    ", "chunk == 0u && tid == 0u", &s);
  s += "  }\n}\n";
  return s;
}

std::string RowEmitter::SplitKernel(const std::string& name, int level) const {
  const int T = cfg_.threads;
  const int C = cfg_.chunks;
  std::string s = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(T) + ") " + name + "(" +
                  ParamList(lo_, true) + ") {\n";
  s += "  __shared__ float dice_sh[64];\n";
  if (!ri_.moment.empty()) s += "  __shared__ double dice_shd[32];\n";
  s += "  double* ws = reinterpret_cast<double*>(workspace);\n";
  s += "  const unsigned tid = threadIdx.x;\n";
  s += "  const " + idx_ + " row = (" + idx_ + ")blockIdx.x / " + Lit(C) + ";\n";
  s += "  const " + idx_ + " chunk = (" + idx_ + ")blockIdx.x % " + Lit(C) + ";\n";
  s += ChunkRange();
  if (level > 0) {
    EmitCombinePartials(level, "  ", &s);
    EmitLevel(level, "  ", &s, false);
    // Moment partials travel as raw float64 sums (d<id>): Σt and Σt² add across chunks.
    for (int id : ri_.reduces)
      if (ri_.level[id] == level)
        s += "  if (tid == 0u) " + PartialAt(id, "chunk") + " = " + (IsMomentReduce(ri_, id) ? "d" : "r") +
             std::to_string(id) + ";\n";
  } else {
    EmitCombinePartials(ri_.max_level + 1, "  ", &s);
    EmitFullOutputs("  ", &s, false);
    EmitRowOutputs("  ", "chunk == 0u && tid == 0u", &s);
  }
  s += "}\n";
  return s;
}

std::string RowEmitter::TileSplitKernel(const std::string& name, int level, bool whole_tiles) const {
  const int T = cfg_.threads;
  const int C = cfg_.chunks;
  std::string s = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(T) + ") " + name + "(" +
                  ParamList(lo_, true) + ") {\n";
  s += "  __shared__ float dice_sh[" + std::to_string(33 * (T / 32)) + "];\n";
  s += "  double* ws = reinterpret_cast<double*>(workspace);\n";
  s += "  const unsigned tid = threadIdx.x >> 5;\n";
  if (whole_tiles) {
    s += "  const " + idx_ + " tile = (" + idx_ + ")blockIdx.x;\n";
    s += "  const " + idx_ + " chunk = 0;\n";
  } else {
    s += "  const " + idx_ + " tile = (" + idx_ + ")blockIdx.x / " + Lit(C) + ";\n";
    s += "  const " + idx_ + " chunk = (" + idx_ + ")blockIdx.x % " + Lit(C) + ";\n";
  }
  // Lanes past the last row compute row rows-1 and store nothing (the block
  // synchronises in the tile reduction, so every thread runs every loop).
  s += "  const bool live = tile * 32 + (threadIdx.x & 31u) < " + Lit(ri_.rows) + ";\n";
  s += "  const " + idx_ + " row = live ? tile * 32 + (threadIdx.x & 31u) : " + Lit(ri_.rows - 1) + ";\n";
  s += ChunkRange();
  // Earlier levels' results: every thread combines its row's C partials in
  // chunk order (the same value in every block of the row).
  auto combine = [&](int below) {
    EmitCombine([&](int id) { return ri_.level[id] < below; },
                [&](int id) { return PartialAt(id, "q"); },
                "for (unsigned q = 0u; q < " + std::to_string(C) + "u; ++q) ", false, "  ", &s);
  };
  if (level > 0) {
    combine(level);
    EmitLevel(level, "  ", &s, false);
    for (int id : ri_.reduces)
      if (ri_.level[id] == level)
        s += "  if (tid == 0u && live) " + PartialAt(id, "chunk") + " = r" + std::to_string(id) + ";\n";
  } else {
    combine(ri_.max_level + 1);
    EmitFullOutputs("  ", &s, false);
    EmitRowOutputs("  ", "chunk == 0u && tid == 0u && live", &s);
  }
  s += "}\n";
  return s;
}

Candidate RowEmitter::Build() {
  Candidate c;
  c.origin = "template:row/" + Tag();
  c.form = CandidateForm::kDevice;
  std::string base = "dice_row_" + Tag();
  for (auto& ch : base)
    if (ch == '/') ch = '_';
  std::string s = Prelude() + "\n";
  const uint32_t T = static_cast<uint32_t>(cfg_.threads);
  auto launch = [&](const std::string& kernel, int64_t grid) {
    KernelLaunch l;
    l.kernel = kernel;
    l.grid = {static_cast<uint32_t>(std::max<int64_t>(1, grid)), 1, 1};
    l.block = {T, 1, 1};
    c.plan.launches.push_back(l);
  };
  if (cfg_.mode == Mode::kSplit || cfg_.mode == Mode::kTileSplit) {
    // One kernel per level writing the partials, then the finalize; a block
    // per (row, chunk), or per (tile of 32 rows, chunk).
    const bool tiled = cfg_.mode == Mode::kTileSplit;
    const int64_t units = tiled ? (ri_.rows + 31) / 32 : ri_.rows;
    auto kernel = [&](const std::string& k, int level, bool whole_tiles) {
      return tiled ? TileSplitKernel(k, level, whole_tiles) : SplitKernel(k, level);
    };
    for (int l = 1; l <= ri_.max_level; ++l) {
      const std::string k = base + "_p" + std::to_string(l);
      s += kernel(k, l, false);
      launch(k, units * cfg_.chunks);
    }
    // tilesplit without full-shaped outputs: only chunk 0 writes, one block per tile.
    const bool whole_tiles = tiled && ri_.full_outputs.empty();
    s += kernel(base + "_fin", 0, whole_tiles);
    launch(base + "_fin", whole_tiles ? units : units * cfg_.chunks);
    c.plan.workspace_bytes = static_cast<uint64_t>(ri_.reduces.size()) * ri_.rows * cfg_.chunks * sizeof(double);
  } else if (cfg_.mode == Mode::kCluster) {
    s += ClusterKernel(base);
    launch(base, cfg_.grid);
    if (cfg_.smem)
      c.plan.launches.back().shared_mem_bytes = static_cast<uint32_t>(
          ri_.cached_loads.size() * static_cast<uint64_t>((ri_.L + cfg_.chunks - 1) / cfg_.chunks) * sizeof(float));
  } else {
    s += FusedKernel(base);
    int64_t per_block = cfg_.mode == Mode::kColumn ? cfg_.threads
                        : cfg_.mode == Mode::kWarp ? cfg_.threads / 32
                        : cfg_.mode == Mode::kTile ? 32
                                                   : 1;
    int64_t grid = (ri_.rows + per_block - 1) / per_block;
    // Column and warp schedules stride over rows: 8 waves of resident blocks
    // (132 SMs x 8 blocks of 256 x 8 = 8448 on H100/H200 SXM).
    const int64_t cap = cfg_.mode == Mode::kBlock || cfg_.mode == Mode::kTile
                            ? (int64_t{1} << 20)
                            : int64_t{target_.sm_count} * (target_.max_threads_per_sm / cfg_.threads) * 8;
    launch(base, std::min(grid, cap));
  }
  c.source = std::move(s);
  return c;
}

}  // namespace

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
  // of the fewest CTAs whose chunk fits.
  const int64_t smem_budget = int64_t{target.smem_per_block_optin_bytes} * 200 / 227;
  auto cluster_smem = [&](int T) {
    if (!clusters || ri.L < 16384 || ri.cached_loads.empty()) return;
    const int64_t per_elem = static_cast<int64_t>(ri.cached_loads.size()) * 4;
    int Q = 1;
    while (Q < 8 && ((ri.L + Q - 1) / Q) * per_elem > smem_budget) Q *= 2;
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
