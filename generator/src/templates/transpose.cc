// transpose.cc — the tiled-transpose variants of the elementwise family
// (families.h: TransposeCandidates; issue 18, conv networks).
//
// A mixed-order group (layout.h: TransposePlan) has its outputs dense in one
// axis order O (innermost axis a_out) and some full-size loads dense in
// another order I (innermost a_in): a channels_last conv output through an
// epilogue into a contiguous tensor, or the copy of a contiguous tensor into
// channels_last. One linear walk cannot coalesce both sides, so each CTA
// takes a TW x TW tile of the plane (a_in, a_out) at one combination `tb` of
// the other axes (row-major over them, in F order), grid-stride over tiles:
//   load phase:  threadIdx.x runs along a_in; every I-order load is read
//                coalesced into a float tile T<k>[x_out][x_in] (smem,
//                [TW][TW + 1]: the pad makes the transposed reads of the
//                store phase hit 32 distinct banks);
//   __syncthreads();
//   store phase: threadIdx.x runs along a_out; the I-order values come
//                transposed from the tiles, the O-order and broadcast loads
//                are read directly through their strides, the DAG is
//                evaluated in float (EmitNodes) and every output is stored
//                coalesced (a broadcast output: only by the element at
//                coordinate 0 of its broadcast axes).
// Offsets: each tensor's offset is base(tb) + x_in * stride[a_in] + x_out *
// stride[a_out], with base(tb) the OffsetExpr of `tb` over the other axes
// (baked constants, computed once per tile). Partial tiles (extents not
// multiples of TW) are guarded on both phases.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "emit.h"
#include "families.h"
#include "layout.h"

namespace dice::generator::tmpl {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTiles = 4;                  // tiled (I-order) inputs per kernel
constexpr int64_t kMaxStaticSmem = 48 << 10;  // static __shared__ limit per block

// "x * 7u" / "x" / "" (stride 0) for one term of an offset.
std::string Term(const std::string& var, int64_t stride, bool wide) {
  if (stride == 0) return "";
  return stride == 1 ? var : var + " * " + IdxLit(stride, wide);
}

// base + xi * s[a_in] + xo * s[a_out].
std::string ElemOffset(const std::string& base, const std::vector<int64_t>& strides, const TransposeOrders& p,
                       const std::vector<int64_t>& F, bool wide) {
  std::string s = base;
  for (auto [var, axis] : {std::pair<const char*, int>{"xi", p.a_in}, {"xo", p.a_out}}) {
    if (F[axis] <= 1) continue;
    std::string t = Term(var, strides[axis], wide);
    if (!t.empty()) s += " + " + t;
  }
  return s;
}

Candidate MakeTranspose(const Lowered& lo, const TransposeOrders& p, const std::vector<int>& slot_of, int n_tiles,
                        int tw, bool wide, const TargetInfo& target) {
  const auto& F = lo.F;
  const std::string idx = IdxType(wide);
  auto lit = [&](int64_t v) { return IdxLit(v, wide); };
  const int rows = kThreads / tw;  // threadIdx.y extent
  const int per = tw / rows;       // rows per thread per phase
  std::vector<int> other;
  for (size_t a = 0; a < F.size(); ++a)
    if (static_cast<int>(a) != p.a_in && static_cast<int>(a) != p.a_out) other.push_back(static_cast<int>(a));
  int64_t batch = 1;
  for (int a : other) batch *= F[a];
  const int64_t f_in = F[p.a_in], f_out = F[p.a_out];
  const int64_t t_in = (f_in + tw - 1) / tw, t_out = (f_out + tw - 1) / tw;
  const int64_t tiles = batch * t_in * t_out;

  const std::string name = "dice_ew_tr_t" + std::to_string(tw);
  std::string s = Prelude();
  s += "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(kThreads) + ") " + name + "(" +
       ParamList(lo, false) + ") {\n";
  for (int k = 0; k < n_tiles; ++k)
    s += "  __shared__ float T" + std::to_string(k) + "[" + std::to_string(tw) + "][" + std::to_string(tw + 1) +
         "];\n";
  s += "  for (" + idx + " t = blockIdx.x; t < " + lit(tiles) + "; t += gridDim.x) {\n";
  s += "    const " + idx + " xi0 = (t % " + lit(t_in) + ") * " + lit(tw) + ";\n";
  s += "    const " + idx + " xo0 = ((t / " + lit(t_in) + ") % " + lit(t_out) + ") * " + lit(tw) + ";\n";
  s += "    const " + idx + " tb = t / " + lit(t_in * t_out) + ";\n";
  // Per-tile base offsets of every tensor along the other axes.
  std::vector<int> loads = p.tiled_loads;
  loads.insert(loads.end(), p.direct_loads.begin(), p.direct_loads.end());
  auto base = [&](const std::string& var, const std::vector<int64_t>& strides) {
    return "    const " + idx + " " + var + " = " + OffsetExpr(other, F, strides, "tb", wide) + ";\n";
  };
  for (int id : loads) s += base("bi" + std::to_string(id), lo.nodes[id].strides);
  for (size_t o = 0; o < lo.outputs.size(); ++o) s += base("bo" + std::to_string(o), lo.outputs[o].strides);

  // Load phase: threads consecutive along a_in.
  s += "    {\n      const " + idx + " xi = xi0 + threadIdx.x;\n";
  s += "      if (xi < " + lit(f_in) + ") {\n#pragma unroll\n";
  s += "        for (int j = 0; j < " + std::to_string(per) + "; ++j) {\n";
  s += "          const unsigned r = threadIdx.y + " + std::to_string(rows) + "u * j;\n";
  s += "          const " + idx + " xo = xo0 + r;\n";
  s += "          if (xo < " + lit(f_out) + ") {\n";
  std::vector<bool> filled(n_tiles, false);
  for (int id : p.tiled_loads) {
    const int k = slot_of[id];
    if (filled[k]) continue;
    filled[k] = true;
    s += "            T" + std::to_string(k) + "[r][threadIdx.x] = dice_ld(in" + std::to_string(lo.nodes[id].input) +
         " + " + ElemOffset("bi" + std::to_string(id), lo.nodes[id].strides, p, F, wide) + ");\n";
  }
  s += "          }\n        }\n      }\n    }\n    __syncthreads();\n";

  // Store phase: threads consecutive along a_out.
  s += "    {\n      const " + idx + " xo = xo0 + threadIdx.x;\n";
  s += "      if (xo < " + lit(f_out) + ") {\n#pragma unroll\n";
  s += "        for (int j = 0; j < " + std::to_string(per) + "; ++j) {\n";
  s += "          const unsigned r = threadIdx.y + " + std::to_string(rows) + "u * j;\n";
  s += "          const " + idx + " xi = xi0 + r;\n";
  s += "          if (xi < " + lit(f_in) + ") {\n";
  std::vector<int> targets;
  for (const auto& o : lo.outputs) targets.push_back(o.node);
  auto load = [&](int id) -> std::string {
    if (slot_of[id] >= 0) return "T" + std::to_string(slot_of[id]) + "[threadIdx.x][r]";
    return "dice_ld(in" + std::to_string(lo.nodes[id].input) + " + " +
           ElemOffset("bi" + std::to_string(id), lo.nodes[id].strides, p, F, wide) + ")";
  };
  const std::string ind = "            ";
  EmitNodes(lo, targets, load, ind, &s);
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    const auto& out = lo.outputs[o];
    const auto& shape = lo.nodes[out.node].shape;
    // A broadcast output is written by the element at coordinate 0 of its broadcast axes.
    std::string guard = GuardExpr(other, F, shape, "tb", wide);
    for (auto [var, axis] : {std::pair<const char*, int>{"xi", p.a_in}, {"xo", p.a_out}})
      if (F[axis] > 1 && shape[axis] == 1) guard += std::string(guard.empty() ? "" : " && ") + var + " == 0";
    const std::string st = "dice_st(out" + std::to_string(o) + " + " +
                           ElemOffset("bo" + std::to_string(o), out.strides, p, F, wide) + ", " +
                           ValueName(lo, out.node) + ");";
    s += guard.empty() ? ind + st + "\n" : ind + "if (" + guard + ") " + st + "\n";
  }
  s += "          }\n        }\n      }\n    }\n    __syncthreads();\n  }\n}\n";

  Candidate c;
  c.origin = "template:elementwise/transpose_t" + std::to_string(tw);
  c.form = CandidateForm::kDevice;
  c.source = std::move(s);
  KernelLaunch l;
  l.kernel = name;
  // As the strided variants: at most 4 waves of resident blocks, then the grid-stride loop.
  const int64_t cap = int64_t{target.sm_count} * std::max(1, target.max_threads_per_sm / kThreads) * 4;
  l.grid = {static_cast<uint32_t>(std::max<int64_t>(1, std::min(tiles, cap))), 1, 1};
  l.block = {static_cast<uint32_t>(tw), static_cast<uint32_t>(rows), 1};
  l.shared_mem_bytes = 0;  // static __shared__ tiles
  c.plan.launches.push_back(l);
  return c;
}

}  // namespace

std::vector<Candidate> TransposeCandidates(const Lowered& lo, const TransposeOrders& p, int max_candidates,
                                           const TargetInfo& target) {
  // One tile per distinct (input, strides) among the I-order loads.
  std::vector<int> slot_of(lo.nodes.size(), -1);
  std::vector<int> first_of_slot;
  for (int id : p.tiled_loads) {
    for (size_t k = 0; k < first_of_slot.size(); ++k) {
      const Node& f = lo.nodes[first_of_slot[k]];
      if (f.input == lo.nodes[id].input && f.strides == lo.nodes[id].strides) slot_of[id] = static_cast<int>(k);
    }
    if (slot_of[id] < 0) {
      slot_of[id] = static_cast<int>(first_of_slot.size());
      first_of_slot.push_back(id);
    }
  }
  const int n_tiles = static_cast<int>(first_of_slot.size());
  std::vector<Candidate> out;
  if (n_tiles > kMaxTiles) return out;
  const bool wide = NeedsWideIndex(lo);
  for (int tw : {32, 64}) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    if (int64_t{n_tiles} * tw * (tw + 1) * 4 > kMaxStaticSmem) continue;
    out.push_back(MakeTranspose(lo, p, slot_of, n_tiles, tw, wide, target));
  }
  return out;
}

}  // namespace dice::generator::tmpl
