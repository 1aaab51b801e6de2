// elementwise.cc — the "elementwise" template family (families.h).
//
// One thread handles VEC consecutive elements of the iteration space F per
// grid-stride step. Tensors that match F exactly (same shape, contiguous) are
// indexed linearly and, when VEC > 1, moved with 16-byte vector accesses;
// broadcast inputs are read through their own strides (div/mod by baked
// constants). A broadcast output (smaller than F) is written only by the
// element whose coordinates along its broadcast axes are 0. The grid covers
// the iteration space, capped at 4 full waves of the target's SMs (beyond
// that the grid-stride loop takes over). Groups whose tensors are dense in
// two different axis orders get the tiled transposes of transpose.cc first.
#include <algorithm>
#include <string>
#include <utility>

#include "emit.h"
#include "families.h"
#include "layout.h"

namespace dice::generator::tmpl {
namespace {

struct EwPlan {
  std::vector<int> axes;
  std::vector<bool> load_linear;    // per node (loads only)
  std::vector<bool> output_linear;  // per output
  int vec_width = 1;                // 16-byte width in elements; 1 = not vectorisable
};

EwPlan Analyse(const Lowered& lo) {
  EwPlan p;
  for (size_t a = 0; a < lo.F.size(); ++a) p.axes.push_back(static_cast<int>(a));
  p.load_linear.assign(lo.nodes.size(), false);
  p.output_linear.assign(lo.outputs.size(), false);
  const int64_t n = Numel(lo.F);
  bool any_linear = false, all_aligned = true;
  int min_size = 4;
  for (size_t id = 0; id < lo.nodes.size(); ++id) {
    const Node& node = lo.nodes[id];
    // A rotated load (rotate_half) reads elements d/2 away: never a vector load.
    if (node.kind != NodeKind::kLoad || node.shape != lo.F || node.rot_axis >= 0) continue;
    if (OffsetExpr(p.axes, lo.F, node.strides, "e", false) != "e") continue;
    p.load_linear[id] = true;
    any_linear = true;
    const auto& spec = lo.inputs[node.input];
    all_aligned &= spec.alignment >= 16;
    min_size = std::min<int>(min_size, static_cast<int>(ir::DTypeSize(spec.dtype)));
  }
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    const auto& out = lo.outputs[o];
    if (lo.nodes[out.node].shape != lo.F) continue;
    if (OffsetExpr(p.axes, lo.F, out.strides, "e", false) != "e") continue;
    p.output_linear[o] = true;
    any_linear = true;
    all_aligned &= out.alignment >= 16;
    min_size = std::min<int>(min_size, static_cast<int>(ir::DTypeSize(out.dtype)));
  }
  int v = 16 / min_size;
  if (any_linear && all_aligned && n % v == 0 && n >= v) p.vec_width = v;
  return p;
}

Candidate Make(const Lowered& lo, const EwPlan& p, int block, int vec, bool wide, const TargetInfo& target) {
  const int64_t n = Numel(lo.F);
  const std::string idx = IdxType(wide);
  const std::string name = "dice_ew_b" + std::to_string(block) + "_v" + std::to_string(vec);
  const bool vectorised = vec > 1;
  std::string s = Prelude();
  s += "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(block) + ") " + name + "(" +
       ParamList(lo, false) + ") {\n";
  s += "  for (" + idx + " i = (" + idx + ")blockIdx.x * " + IdxLit(block, wide) + " + threadIdx.x; i < " +
       IdxLit(n / vec, wide) + "; i += (" + idx + ")gridDim.x * " + IdxLit(block, wide) + ") {\n";
  s += "    const " + idx + " base = i * " + IdxLit(vec, wide) + ";\n";
  if (vectorised) {
    for (size_t id = 0; id < lo.nodes.size(); ++id) {
      if (!p.load_linear[id]) continue;
      const auto& spec = lo.inputs[lo.nodes[id].input];
      s += "    float L" + std::to_string(id) + "[" + std::to_string(vec) + "];\n";
      s += "    dice_ldv<" + std::string(CType(spec.dtype)) + ", " + std::to_string(vec) + ">(in" +
           std::to_string(lo.nodes[id].input) + " + base, L" + std::to_string(id) + ");\n";
    }
    for (size_t o = 0; o < lo.outputs.size(); ++o)
      if (p.output_linear[o]) s += "    float O" + std::to_string(o) + "[" + std::to_string(vec) + "];\n";
  }
  s += "#pragma unroll\n";
  s += "    for (int j = 0; j < " + std::to_string(vec) + "; ++j) {\n";
  s += "      const " + idx + " e = base + j;\n";
  std::vector<int> targets;
  for (const auto& o : lo.outputs) targets.push_back(o.node);
  auto load = [&](int id) -> std::string {
    const Node& node = lo.nodes[id];
    if (vectorised && p.load_linear[id]) return "L" + std::to_string(id) + "[j]";
    if (node.kind == NodeKind::kRotSign) return RotateSignExpr(node, p.axes, lo.F, "e", wide);
    return "dice_ld(in" + std::to_string(node.input) + " + " + OffsetExpr(p.axes, lo.F, node.strides, "e", wide) +
           RotateShiftExpr(node, p.axes, lo.F, "e", wide) + ")";
  };
  EmitNodes(lo, targets, load, "      ", &s);
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    const auto& out = lo.outputs[o];
    const std::string v = ValueName(lo, out.node);
    if (vectorised && p.output_linear[o]) {
      s += "      O" + std::to_string(o) + "[j] = " + v + ";\n";
      continue;
    }
    std::string guard = GuardExpr(p.axes, lo.F, lo.nodes[out.node].shape, "e", wide);
    std::string st = "dice_st(out" + std::to_string(o) + " + " + OffsetExpr(p.axes, lo.F, out.strides, "e", wide) +
                     ", " + v + ");";
    s += guard.empty() ? "      " + st + "\n" : "      if (" + guard + ") " + st + "\n";
  }
  s += "    }\n";
  if (vectorised) {
    for (size_t o = 0; o < lo.outputs.size(); ++o)
      if (p.output_linear[o])
        s += "    dice_stv<" + std::string(CType(lo.outputs[o].dtype)) + ", " + std::to_string(vec) + ">(out" +
             std::to_string(o) + " + base, O" + std::to_string(o) + ");\n";
  }
  s += "  }\n}\n";

  Candidate c;
  c.origin = "template:elementwise/b" + std::to_string(block) + "/v" + std::to_string(vec);
  c.form = CandidateForm::kDevice;
  c.source = std::move(s);
  KernelLaunch l;
  l.kernel = name;
  // 4 waves of resident blocks: SMs x blocks per SM by threads (132 x 8 x 4 = 4224
  // blocks of 256 on H100/H200 SXM).
  const int64_t cap = int64_t{target.sm_count} * (target.max_threads_per_sm / block) * 4;
  const int64_t want = (n / vec + block - 1) / block;
  l.grid = {static_cast<uint32_t>(std::max<int64_t>(1, std::min(want, cap))), 1, 1};
  l.block = {static_cast<uint32_t>(block), 1, 1};
  c.plan.launches.push_back(l);
  return c;
}

}  // namespace

Expected<std::vector<Candidate>> ElementwiseCandidates(const Lowered& lo, int max_candidates,
                                                       const TargetInfo& target) {
  if (lo.num_reduces > 0) return Status(StatusCode::kUnsupported, "templates: elementwise family given a reduction");
  EwPlan p = Analyse(lo);
  const bool wide = NeedsWideIndex(lo);
  std::vector<std::pair<int, int>> order;  // (block, vec)
  const int v = p.vec_width;
  if (v > 1) order = {{256, v}, {128, v}, {512, v}, {256, 1}, {512, 1}, {128, 1}};
  else order = {{256, 1}, {128, 1}, {512, 1}};
  std::vector<Candidate> out;
  // Mixed-order groups (channels_last in, contiguous out or the reverse):
  // the tiled transposes first (transpose.cc); the strided walk follows.
  // (Not with rotate_half: the tiles do not rotate their loads.)
  if (auto tp = HasRotation(lo) ? std::nullopt : TransposePlan(lo)) {
    out = TransposeCandidates(lo, *tp, max_candidates, target);
    // The same tiles over merged axes (layout.h MergeAdjacentAxes: H * W of a
    // channels_last epilogue), origin suffix "_flat"; measured beside the others.
    // Only when a merge reached the tile plane (a_in or a_out grew): merging
    // outer axes alone moves the same tiles as the candidates above.
    Lowered flat = lo;
    const int left = max_candidates - static_cast<int>(out.size());
    if (left > 0 && MergeAdjacentAxes(&flat)) {
      auto tpf = TransposePlan(flat);
      if (tpf && (flat.F[tpf->a_in] != lo.F[tp->a_in] || flat.F[tpf->a_out] != lo.F[tp->a_out])) {
        for (Candidate& c : TransposeCandidates(flat, *tpf, left, target)) {
          c.origin += "_flat";
          out.push_back(std::move(c));
        }
      }
    }
  }
  for (auto [b, vec] : order) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    out.push_back(Make(lo, p, b, vec, wide, target));
  }
  return out;
}

}  // namespace dice::generator::tmpl
