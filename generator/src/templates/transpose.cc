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
//
// The vectorised variants (MakeTransposeVec) run the same two phases on a
// 1-D block of NT threads, each thread moving VI consecutive a_in elements of
// a tile row per access in the load phase and VO consecutive a_out elements
// in the store phase (dice_ldw / dice_stw: 4-, 8- or 16-byte accesses). A
// side is vectorised only when that is provable from the baked strides,
// extents and pointer alignments (VecOk), so that every run a thread touches
// is inside the tensor and aligned; a run never straddles a partial tile's
// end because the extent along it is a multiple of the width. On the H200
// (transpose_gpu_test, 2026-12-03, all verified) the 260 MB channels_last ->
// NCHW epilogue went from 171.8 us (t64, 3.03 TB/s) to 161.1 us
// (t64v4x2_b128, 3.23 TB/s; W = 126 allows float2 stores only), the 134 MB
// NCHW -> channels_last copy from 70.3 to 69.5 us (t64v4x4, 3.86 TB/s), and
// the 8x64x56x56 groups by 5-14% (t64v4x4 / t64v8x4 / t32v4x4).
#include <algorithm>
#include <array>
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
constexpr int64_t kMaxVecBytes = 16;          // widest vector access

// Vector accesses for the vectorised variants, emitted after Prelude() in
// their sources only (the other templates' sources stay as pinned).
constexpr const char* kVecHelpers = R"CUDA(// V elements of T per access (V * sizeof(T) = 4, 8 or 16 bytes; the
// pointer aligned to it), as floats: one 4-, 8- or 16-byte access of 32-bit
// words, each one float or two 16-bit values.
__device__ __forceinline__ void dice_unpack(unsigned w, const float*, float* o) { o[0] = __uint_as_float(w); }
__device__ __forceinline__ void dice_unpack(unsigned w, const __half*, float* o) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w)); o[0] = f.x; o[1] = f.y;
}
__device__ __forceinline__ void dice_unpack(unsigned w, const __nv_bfloat16*, float* o) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w)); o[0] = f.x; o[1] = f.y;
}
__device__ __forceinline__ unsigned dice_pack(const float* o, float*) { return __float_as_uint(o[0]); }
__device__ __forceinline__ unsigned dice_pack(const float* o, __half*) {
  const __half2 h = __floats2half2_rn(o[0], o[1]); return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned dice_pack(const float* o, __nv_bfloat16*) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(o[0], o[1]); return *reinterpret_cast<const unsigned*>(&h);
}
template <typename T, int V> __device__ __forceinline__ void dice_ldw(const T* p, float* o) {
  constexpr int E = 4 / sizeof(T), NW = V / E;  // elements per word, words
  unsigned w[NW];
  if constexpr (NW == 1) {
    w[0] = *reinterpret_cast<const unsigned*>(p);
  } else if constexpr (NW == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p); w[0] = v.x; w[1] = v.y;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(p); w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  }
#pragma unroll
  for (int q = 0; q < NW; ++q) dice_unpack(w[q], p, o + q * E);
}
template <typename T, int V> __device__ __forceinline__ void dice_stw(T* p, const float* o) {
  constexpr int E = 4 / sizeof(T), NW = V / E;
  unsigned w[NW];
#pragma unroll
  for (int q = 0; q < NW; ++q) w[q] = dice_pack(o + q * E, p);
  // PTX stores: a C++ uint4 store is split into 4-byte ones in some kernels.
  if constexpr (NW == 1) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
  } else if constexpr (NW == 2) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  } else {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  }
}
)CUDA";

// "x * 7u" / "x" / "" (stride 0) for one term of an offset.
std::string Term(const std::string& var, int64_t stride, bool wide) {
  if (stride == 0) return "";
  return stride == 1 ? var : var + " * " + IdxLit(stride, wide);
}

// base + xi * s[a_in] + xo * s[a_out] (the coordinates named xi_var, xo_var).
std::string ElemOffset(const std::string& base, const std::vector<int64_t>& strides, const TransposeOrders& p,
                       const std::vector<int64_t>& F, bool wide, const char* xi_var = "xi",
                       const char* xo_var = "xo") {
  std::string s = base;
  for (auto [var, axis] : {std::pair<const char*, int>{xi_var, p.a_in}, {xo_var, p.a_out}}) {
    if (F[axis] <= 1) continue;
    std::string t = Term(var, strides[axis], wide);
    if (!t.empty()) s += " + " + t;
  }
  return s;
}

// The tile grid over F: the other axes (batch, row-major in F order), the
// plane extents and tile counts for a tile edge.
struct TileGrid {
  std::vector<int> other;
  int64_t f_in = 0, f_out = 0, t_in = 0, t_out = 0, tiles = 0;
};

TileGrid MakeGrid(const std::vector<int64_t>& F, const TransposeOrders& p, int tw) {
  TileGrid g;
  for (size_t a = 0; a < F.size(); ++a)
    if (static_cast<int>(a) != p.a_in && static_cast<int>(a) != p.a_out) g.other.push_back(static_cast<int>(a));
  int64_t batch = 1;
  for (int a : g.other) batch *= F[a];
  g.f_in = F[p.a_in];
  g.f_out = F[p.a_out];
  g.t_in = (g.f_in + tw - 1) / tw;
  g.t_out = (g.f_out + tw - 1) / tw;
  g.tiles = batch * g.t_in * g.t_out;
  return g;
}

// The kernel's signature, its shared tiles, the grid-stride loop over tiles
// (xi0, xo0: the tile's origin in the plane; tb: its batch coordinate) and
// every tensor's per-tile base offset (bi<id>, bo<o>), ending inside the loop.
std::string KernelHead(const Lowered& lo, const TransposeOrders& p, const TileGrid& g, const std::string& name,
                       int threads, int n_tiles, int tw, bool wide) {
  const std::string idx = IdxType(wide);
  auto lit = [&](int64_t v) { return IdxLit(v, wide); };
  std::string s = "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(threads) + ") " + name + "(" +
                  ParamList(lo, false) + ") {\n";
  for (int k = 0; k < n_tiles; ++k)
    s += "  __shared__ float T" + std::to_string(k) + "[" + std::to_string(tw) + "][" + std::to_string(tw + 1) +
         "];\n";
  s += "  for (" + idx + " t = blockIdx.x; t < " + lit(g.tiles) + "; t += gridDim.x) {\n";
  s += "    const " + idx + " xi0 = (t % " + lit(g.t_in) + ") * " + lit(tw) + ";\n";
  s += "    const " + idx + " xo0 = ((t / " + lit(g.t_in) + ") % " + lit(g.t_out) + ") * " + lit(tw) + ";\n";
  s += "    const " + idx + " tb = t / " + lit(g.t_in * g.t_out) + ";\n";
  // Per-tile base offsets of every tensor along the other axes.
  std::vector<int> loads = p.tiled_loads;
  loads.insert(loads.end(), p.direct_loads.begin(), p.direct_loads.end());
  auto base = [&](const std::string& var, const std::vector<int64_t>& strides) {
    return "    const " + idx + " " + var + " = " + OffsetExpr(g.other, lo.F, strides, "tb", wide) + ";\n";
  };
  for (int id : loads) s += base("bi" + std::to_string(id), lo.nodes[id].strides);
  for (size_t o = 0; o < lo.outputs.size(); ++o) s += base("bo" + std::to_string(o), lo.outputs[o].strides);
  return s;
}

// The condition under which output `o` is stored ("" = always): a broadcast
// output only at coordinate 0 of its broadcast axes.
std::string OutputGuard(const Lowered& lo, size_t o, const TransposeOrders& p, const TileGrid& g, bool wide,
                        const char* xi_var, const char* xo_var) {
  const auto& shape = lo.nodes[lo.outputs[o].node].shape;
  std::string guard = GuardExpr(g.other, lo.F, shape, "tb", wide);
  for (auto [var, axis] : {std::pair<const char*, int>{xi_var, p.a_in}, {xo_var, p.a_out}})
    if (lo.F[axis] > 1 && shape[axis] == 1) guard += std::string(guard.empty() ? "" : " && ") + var + " == 0";
  return guard;
}

Candidate Finish(const std::string& origin, const std::string& kernel, std::string source, int64_t tiles,
                 std::array<uint32_t, 3> block, const TargetInfo& target) {
  Candidate c;
  c.origin = origin;
  c.form = CandidateForm::kDevice;
  c.source = std::move(source);
  KernelLaunch l;
  l.kernel = kernel;
  // As the strided variants: at most 4 waves of resident blocks, then the grid-stride loop.
  const int threads = static_cast<int>(block[0] * block[1] * block[2]);
  const int64_t cap = int64_t{target.sm_count} * std::max(1, target.max_threads_per_sm / threads) * 4;
  l.grid = {static_cast<uint32_t>(std::max<int64_t>(1, std::min(tiles, cap))), 1, 1};
  l.block = block;
  l.shared_mem_bytes = 0;  // static __shared__ tiles
  c.plan.launches.push_back(l);
  return c;
}

Candidate MakeTranspose(const Lowered& lo, const TransposeOrders& p, const std::vector<int>& slot_of, int n_tiles,
                        int tw, bool wide, const TargetInfo& target) {
  const auto& F = lo.F;
  const std::string idx = IdxType(wide);
  auto lit = [&](int64_t v) { return IdxLit(v, wide); };
  const int rows = kThreads / tw;  // threadIdx.y extent
  const int per = tw / rows;       // rows per thread per phase
  const TileGrid g = MakeGrid(F, p, tw);
  const std::string name = "dice_ew_tr_t" + std::to_string(tw);
  std::string s = Prelude() + KernelHead(lo, p, g, name, kThreads, n_tiles, tw, wide);

  // Load phase: threads consecutive along a_in.
  s += "    {\n      const " + idx + " xi = xi0 + threadIdx.x;\n";
  s += "      if (xi < " + lit(g.f_in) + ") {\n#pragma unroll\n";
  s += "        for (int j = 0; j < " + std::to_string(per) + "; ++j) {\n";
  s += "          const unsigned r = threadIdx.y + " + std::to_string(rows) + "u * j;\n";
  s += "          const " + idx + " xo = xo0 + r;\n";
  s += "          if (xo < " + lit(g.f_out) + ") {\n";
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
  s += "      if (xo < " + lit(g.f_out) + ") {\n#pragma unroll\n";
  s += "        for (int j = 0; j < " + std::to_string(per) + "; ++j) {\n";
  s += "          const unsigned r = threadIdx.y + " + std::to_string(rows) + "u * j;\n";
  s += "          const " + idx + " xi = xi0 + r;\n";
  s += "          if (xi < " + lit(g.f_in) + ") {\n";
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
    const std::string guard = OutputGuard(lo, o, p, g, wide, "xi", "xo");
    const std::string st = "dice_st(out" + std::to_string(o) + " + " +
                           ElemOffset("bo" + std::to_string(o), lo.outputs[o].strides, p, F, wide) + ", " +
                           ValueName(lo, lo.outputs[o].node) + ");";
    s += guard.empty() ? ind + st + "\n" : ind + "if (" + guard + ") " + st + "\n";
  }
  s += "          }\n        }\n      }\n    }\n    __syncthreads();\n  }\n}\n";

  return Finish("template:elementwise/transpose_t" + std::to_string(tw), name, std::move(s), g.tiles,
                {static_cast<uint32_t>(tw), static_cast<uint32_t>(rows), 1}, target);
}

// Whether a tensor of `shape` / `strides` (per F axis) with `elem_bytes`
// elements and a data pointer aligned to `align_bytes` can be accessed `v`
// elements at a time along `axis` at every run of a tile (run starts are
// multiples of v along `axis`): the access fits 16 bytes and the pointer's
// alignment, the tensor spans `axis` with stride 1, F[axis] is a multiple of
// v (no run crosses the end) and every other stride is a multiple of v (each
// run starts v-aligned in elements).
bool VecOk(const std::vector<int64_t>& F, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
           int axis, int64_t elem_bytes, int64_t align_bytes, int v) {
  if (v * elem_bytes > kMaxVecBytes || align_bytes < v * elem_bytes) return false;
  if (shape[axis] != F[axis] || strides[axis] != 1 || F[axis] % v != 0) return false;
  for (size_t b = 0; b < F.size(); ++b)
    if (static_cast<int>(b) != axis && F[b] > 1 && strides[b] % v != 0) return false;
  return true;
}

// Whether direct load `id` is read vo wide along a_out in the store phase.
bool DirectVec(const Lowered& lo, const TransposeOrders& p, int id, int vo) {
  const Node& n = lo.nodes[id];
  const auto& spec = lo.inputs[n.input];
  return vo > 1 && VecOk(lo.F, n.shape, n.strides, p.a_out, ir::DTypeSize(spec.dtype), spec.alignment, vo);
}

bool OutputVec(const Lowered& lo, const TransposeOrders& p, size_t o, int vo) {
  const OutputRef& out = lo.outputs[o];
  return vo > 1 &&
         VecOk(lo.F, lo.nodes[out.node].shape, out.strides, p.a_out, ir::DTypeSize(out.dtype), out.alignment, vo);
}

// The vectorised variant: a 1-D block of `threads`; vi elements per tiled
// load access along a_in, vo per output access along a_out (1 = scalar).
Candidate MakeTransposeVec(const Lowered& lo, const TransposeOrders& p, const std::vector<int>& slot_of,
                           int n_tiles, int tw, int threads, int vi, int vo, bool wide, const TargetInfo& target) {
  const auto& F = lo.F;
  const std::string idx = IdxType(wide);
  auto lit = [&](int64_t v) { return IdxLit(v, wide); };
  auto num = [](int64_t v) { return std::to_string(v); };
  const int lanes_i = tw / vi, rows_i = threads / lanes_i, per_i = tw / rows_i;  // load phase
  const int lanes_o = tw / vo, rows_o = threads / lanes_o, per_o = tw / rows_o;  // store phase
  const TileGrid g = MakeGrid(F, p, tw);
  const std::string tag =
      "t" + num(tw) + "v" + num(vi) + "x" + num(vo) + (threads == kThreads ? "" : "_b" + num(threads));
  const std::string name = "dice_ew_tr_" + tag;
  std::string s = Prelude() + kVecHelpers + KernelHead(lo, p, g, name, threads, n_tiles, tw, wide);

  // One phase's loop head: `lanes` threads side by side along the `lane`
  // axis (v elements each, from lane + "0"), rows of the tile along `row`
  // (per rows a thread, `rows` apart), each guarded by its extent.
  auto phase_head = [&](int lanes, int v, int rows, int per, const char* lane, int64_t f_lane, const char* row,
                        int64_t f_row) {
    s += "    {\n      const unsigned lx = threadIdx.x % " + num(lanes) + "u, ly = threadIdx.x / " + num(lanes) + "u;\n";
    s += "      const " + idx + " " + lane + " = " + lane + "0 + lx * " + lit(v) + ";\n";
    s += "      if (" + std::string(lane) + " < " + lit(f_lane) + ") {\n#pragma unroll\n";
    s += "        for (int j = 0; j < " + num(per) + "; ++j) {\n";
    s += "          const unsigned r = ly + " + num(rows) + "u * j;\n";
    s += "          const " + idx + " " + row + " = " + row + "0 + r;\n";
    s += "          if (" + std::string(row) + " < " + lit(f_row) + ") {\n";
  };

  // Load phase: lanes_i threads side by side along a_in, vi elements each.
  phase_head(lanes_i, vi, rows_i, per_i, "xi", g.f_in, "xo", g.f_out);
  std::vector<bool> filled(n_tiles, false);
  for (int id : p.tiled_loads) {
    const int k = slot_of[id];
    if (filled[k]) continue;
    filled[k] = true;
    const std::string src = "in" + num(lo.nodes[id].input) + " + " +
                            ElemOffset("bi" + num(id), lo.nodes[id].strides, p, F, wide);
    const std::string tile = "T" + num(k);
    if (vi == 1) {
      s += "            " + tile + "[r][lx] = dice_ld(" + src + ");\n";
      continue;
    }
    s += "            {\n              float w[" + num(vi) + "];\n";
    s += "              dice_ldw<" + std::string(CType(lo.inputs[lo.nodes[id].input].dtype)) + ", " + num(vi) +
         ">(" + src + ", w);\n#pragma unroll\n";
    s += "              for (int k = 0; k < " + num(vi) + "; ++k) " + tile + "[r][lx * " + num(vi) +
         "u + k] = w[k];\n            }\n";
  }
  s += "          }\n        }\n      }\n    }\n    __syncthreads();\n";

  // Store phase: lanes_o threads side by side along a_out, vo elements each
  // (xo: the first of them; xk: element k of the run).
  phase_head(lanes_o, vo, rows_o, per_o, "xo", g.f_out, "xi", g.f_in);
  const std::string ind = "            ";
  for (int id : p.direct_loads) {
    if (!DirectVec(lo, p, id, vo)) continue;
    s += ind + "float D" + num(id) + "[" + num(vo) + "];\n";
    s += ind + "dice_ldw<" + CType(lo.inputs[lo.nodes[id].input].dtype) + ", " + num(vo) + ">(in" +
         num(lo.nodes[id].input) + " + " + ElemOffset("bi" + num(id), lo.nodes[id].strides, p, F, wide) + ", D" +
         num(id) + ");\n";
  }
  for (size_t o = 0; o < lo.outputs.size(); ++o)
    if (OutputVec(lo, p, o, vo)) s += ind + "float O" + num(o) + "[" + num(vo) + "];\n";
  s += "#pragma unroll\n" + ind + "for (int k = 0; k < " + num(vo) + "; ++k) {\n";
  const std::string ink = ind + "  ";
  std::string body;  // element k of the run; xk declared only when a scalar access uses it
  std::vector<int> targets;
  for (const auto& o : lo.outputs) targets.push_back(o.node);
  auto load = [&](int id) -> std::string {
    if (slot_of[id] >= 0) return "T" + num(slot_of[id]) + "[lx * " + num(vo) + "u + k][r]";
    if (DirectVec(lo, p, id, vo)) return "D" + num(id) + "[k]";
    return "dice_ld(in" + num(lo.nodes[id].input) + " + " +
           ElemOffset("bi" + num(id), lo.nodes[id].strides, p, F, wide, "xi", "xk") + ")";
  };
  EmitNodes(lo, targets, load, ink, &body);
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    const std::string v = ValueName(lo, lo.outputs[o].node);
    if (OutputVec(lo, p, o, vo)) {
      body += ink + "O" + num(o) + "[k] = " + v + ";\n";
      continue;
    }
    const std::string guard = OutputGuard(lo, o, p, g, wide, "xi", "xk");
    const std::string st = "dice_st(out" + num(o) + " + " +
                           ElemOffset("bo" + num(o), lo.outputs[o].strides, p, F, wide, "xi", "xk") + ", " + v + ");";
    body += guard.empty() ? ink + st + "\n" : ink + "if (" + guard + ") " + st + "\n";
  }
  if (body.find("xk") != std::string::npos) s += ink + "const " + idx + " xk = xo + k;\n";
  s += body + ind + "}\n";
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    if (!OutputVec(lo, p, o, vo)) continue;
    const std::string guard = OutputGuard(lo, o, p, g, wide, "xi", "xo");  // never along a_out (stride 1 there)
    const std::string st = "dice_stw<" + std::string(CType(lo.outputs[o].dtype)) + ", " + num(vo) + ">(out" +
                           num(o) + " + " + ElemOffset("bo" + num(o), lo.outputs[o].strides, p, F, wide) + ", O" +
                           num(o) + ");";
    s += guard.empty() ? ind + st + "\n" : ind + "if (" + guard + ") " + st + "\n";
  }
  s += "          }\n        }\n      }\n    }\n    __syncthreads();\n  }\n}\n";

  return Finish("template:elementwise/transpose_" + tag, name, std::move(s), g.tiles,
                {static_cast<uint32_t>(threads), 1, 1}, target);
}

// The widest of 8, 4, 2 elements that `ok` accepts; 1 if none.
template <typename Pred>
int Widest(Pred ok) {
  for (int v : {8, 4, 2})
    if (ok(v)) return v;
  return 1;
}

}  // namespace

TransposeVecWidths TransposeVectorWidths(const Lowered& lo, const TransposeOrders& p) {
  TransposeVecWidths w;
  w.in = Widest([&](int v) {
    for (int id : p.tiled_loads) {
      const Node& n = lo.nodes[id];
      const auto& spec = lo.inputs[n.input];
      if (!VecOk(lo.F, n.shape, n.strides, p.a_in, ir::DTypeSize(spec.dtype), spec.alignment, v)) return false;
    }
    return !p.tiled_loads.empty();
  });
  w.out = Widest([&](int v) {
    bool any = false;
    for (size_t o = 0; o < lo.outputs.size(); ++o) {
      const OutputRef& out = lo.outputs[o];
      if (lo.nodes[out.node].shape != lo.F) continue;  // broadcast outputs: stored as they allow
      any = true;
      if (!OutputVec(lo, p, o, v)) return false;
    }
    return any;
  });
  return w;
}

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
  auto fits = [&](int tw) { return int64_t{n_tiles} * tw * (tw + 1) * 4 <= kMaxStaticSmem; };
  for (int tw : {32, 64}) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    if (!fits(tw)) continue;
    out.push_back(MakeTranspose(lo, p, slot_of, n_tiles, tw, wide, target));
  }
  const TransposeVecWidths w = TransposeVectorWidths(lo, p);
  if (w.in == 1 && w.out == 1) return out;
  // (tile edge, threads): a thread moves tw * tw / threads elements per phase (4, 16, 32).
  for (auto [tw, threads] : {std::pair<int, int>{32, kThreads}, {64, kThreads}, {64, kThreads / 2}}) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    if (!fits(tw)) continue;
    const int cap = tw * tw / threads;  // a run never exceeds a thread's share of a tile row
    out.push_back(MakeTransposeVec(lo, p, slot_of, n_tiles, tw, threads, std::min(w.in, cap), std::min(w.out, cap),
                                   wide, target));
  }
  return out;
}

}  // namespace dice::generator::tmpl
