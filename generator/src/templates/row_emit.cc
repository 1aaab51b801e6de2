// row_emit.cc — the row family's kernel source (row.h's RowEmitter): every
// schedule's kernels (column, tile, warp, block, split, tilesplit, cluster,
// their fused-statistics forms), launch plan and origin tag. The schedules
// themselves: row.cc's header.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "row.h"

namespace dice::generator::tmpl::row {
namespace {

// Per-thread accumulator type: double for sums (see EmitReductions), float otherwise.
std::string AccType(ReduceOp op) { return op == ReduceOp::kSum ? "double" : "float"; }
std::string AccToFloat(ReduceOp op, const std::string& acc) {
  return op == ReduceOp::kSum ? "static_cast<float>(" + acc + ")" : acc;
}

}  // namespace

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
        auto load = [&](int id) { return ElementLoad(id, use_cache); };
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
        auto load = [&](int id) { return ElementLoad(id, use_cache); };
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

namespace {
bool IsMomentReduce(const RowInfo& ri, int id) {
  if (ri.moment.count(id)) return true;
  for (const auto& kv : ri.moment)
    if (kv.second == id) return true;
  return false;
}
}  // namespace

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
    if (cfg_.chunks > 8) c.plan.launches.back().cluster_ctas = static_cast<uint32_t>(cfg_.chunks);
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

}  // namespace dice::generator::tmpl::row
