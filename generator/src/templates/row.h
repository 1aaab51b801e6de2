// row.h (private) — the row template family's pieces shared by its two
// sources: row.cc analyses a lowered group and picks the schedules
// (RowCandidates, families.h); row_emit.cc emits each schedule's kernels
// (RowEmitter). The family, its schedules and their names: row.cc's header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/task.h"
#include "emit.h"
#include "lowering.h"

namespace dice::generator::tmpl::row {

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
  // Load nodes cached per element (registers or the smem schedule's chunk):
  // those with more than L / kCacheMinShare distinct elements along the row.
  // A load with R extent > 1 but few distinct elements (a group norm's
  // per-channel weight, bias or conv bias: C/G values in a row of C/G*H*W) is
  // re-read through L1 instead, so it takes no register slots or shared
  // memory (session 33: task 21's three per-channel loads sized the smem
  // chunk four times the input's and ruled the smem schedule out).
  std::vector<int> cached_loads;
  bool IsCached(int id) const;
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

// Whether node `id` varies along the row (extent > 1 along some R axis).
bool HasRExtent(const Lowered& lo, const RowInfo& ri, int id);

// A load is cached when its distinct elements along a row exceed L divided by this.
inline constexpr int64_t kCacheMinShare = 64;

// The rows, row length, reduce levels, cached loads and outputs of `lo`; with
// `fuse`, also the fused statistics (online softmax, moments).
RowInfo Analyse(const Lowered& lo, bool fuse);

// Emits one schedule's candidate (kernels, launch plan, origin tag) for a
// group analysed as `ri` (row_emit.cc).
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
  // Element k of load `id` inside an element loop: the cached copy when
  // `use_cache` and the load is one of the cached loads, else LoadAt(id, true).
  std::string ElementLoad(int id, bool use_cache) const {
    if (use_cache && lo_.nodes[id].kind == NodeKind::kLoad && ri_.IsCached(id)) return CachedAt(id);
    return LoadAt(id, true);
  }
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

}  // namespace dice::generator::tmpl::row
