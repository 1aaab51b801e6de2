// gemv.cc — the skinny-GEMM family (issue 19 item 2): linear with few rows
// (M <= 16, the decode steps of an LLM or a diffusion LM), which is bound by
// streaming the weight once. Device form, NVRTC-compiled: a warp owns R
// output columns and walks K with 16-byte weight loads, every lane keeping
// M x R float partial sums; a shuffle reduction finishes each column. A
// split-K variant (blockIdx.y = K chunk) adds its partials to a float
// workspace with atomicAdd and a second kernel applies the bias and the cast.
// An elementwise epilogue after the linear (a DAG over its value and scalars,
// no other tensor: fusion_policy.h rule 4) is applied where the value is
// stored, each IR value computed once (emit.h's EmitNodes).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "emit.h"
#include "gemv.h"

namespace dice::generator::tmpl {
namespace {

struct Shape {
  int64_t m = 0, n = 0, k = 0;
  bool bias = false;
  ir::DType dtype = ir::DType::kFloat32;
  Lowered epilogue;  // node 0 = the linear value (Load); empty: no epilogue
  int result = -1;   // epilogue node of the group output
};

struct Variant {
  int cols_per_warp;  // R
  int warps;          // warps per block
  int split;          // K chunks (1 = no workspace)
};

Status Unsupported(const std::string& why) { return Status(StatusCode::kUnsupported, "gemv: " + why); }

// The epilogue's Node DAG over the ops after `linear_op` (AppendEpilogueNodes,
// shared with the gemm family), leaf Load = the linear value, into
// s->epilogue. Errors: kUnsupported for an op that is not elementwise or
// reads a group input (the kernel reads no tensor but x, w and b).
Status BuildEpilogue(const ir::Graph& g, size_t linear_op, Shape* s) {
  Node lin;
  lin.kind = NodeKind::kLoad;
  lin.input = 0;
  s->epilogue.nodes.push_back(lin);
  std::map<int32_t, int> node_of = {{g.op_value(linear_op), 0}};  // value id -> node id
  const Status st = AppendEpilogueNodes(g, linear_op, {}, &node_of, &s->epilogue);
  if (!st.ok()) return Unsupported(st.message());
  s->result = node_of.at(g.outputs[0]);
  return Status::Ok();
}

// The accepted graph: out = epilogue(linear(x, w[, b])) over group inputs,
// the epilogue elementwise over linear's value and scalars (none: out is the
// linear), every tensor contiguous, one dtype, M = prod(x.shape[:-1]) in
// [1, kGemvMaxRows].
Expected<Shape> Match(const Task& task) {
  const ir::Graph& g = task.graph;
  int linear_op = -1;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const auto kind = g.ops[i].kind;
    if (kind == ir::OpKind::kConstant) continue;
    if (ir::GetOpInfo(kind).category == ir::OpCategory::kContraction) {
      if (kind != ir::OpKind::kLinear || linear_op >= 0) return Unsupported("the group is more than one linear");
      linear_op = static_cast<int>(i);
    }
  }
  if (linear_op < 0) return Unsupported("no linear in the group");
  const ir::Op& op = g.ops[static_cast<size_t>(linear_op)];
  const int ninputs = static_cast<int>(g.inputs.size());
  for (int32_t a : op.args) {
    if (a >= ninputs) return Unsupported("linear's operands must be group inputs");
  }
  if (g.outputs.size() != 1 || g.outputs[0] != g.op_value(g.ops.size() - 1)) {
    return Unsupported("the last op's value must be the only output");
  }
  const ir::TensorSpec& x = task.inputs[static_cast<size_t>(op.args[0])];
  if (task.outputs[0].dtype != x.dtype || task.outputs[0].shape.size() != x.shape.size()) {
    return Unsupported("the output is not linear's dtype and rank");
  }
  const ir::TensorSpec& w = task.inputs[static_cast<size_t>(op.args[1])];
  for (const ir::TensorSpec* s : {&x, &w}) {
    if (!s->is_contiguous()) return Unsupported("non-contiguous input " + s->ToString());
  }
  Shape sh;
  sh.dtype = x.dtype;
  sh.n = w.shape[0];
  sh.k = w.shape[1];
  sh.m = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d) sh.m *= x.shape[d];
  sh.bias = op.args.size() > 2;
  if (sh.bias && !task.inputs[static_cast<size_t>(op.args[2])].is_contiguous()) return Unsupported("non-contiguous bias");
  if (sh.m < 1 || sh.m > kGemvMaxRows) {
    return Unsupported(std::to_string(sh.m) + " rows; the family takes 1.." + std::to_string(kGemvMaxRows));
  }
  if (sh.n < 1 || sh.k < 1) return Unsupported("an empty GEMM");
  // The kernel reads inputs in the order x, w[, b] — the task's input order
  // must be exactly that for the calling convention to line up.
  for (size_t a = 0; a < op.args.size(); ++a) {
    if (op.args[a] != static_cast<int32_t>(a)) return Unsupported("inputs must be declared in the order x, weight, bias");
  }
  if (ninputs != static_cast<int>(op.args.size())) return Unsupported("the group has inputs linear does not use");
  if (g.outputs[0] != g.op_value(static_cast<size_t>(linear_op))) {
    DICE_RETURN_IF_ERROR(BuildEpilogue(g, static_cast<size_t>(linear_op), &sh));
  }
  return sh;
}

int ElementBytes(ir::DType d) { return d == ir::DType::kFloat32 ? 4 : 2; }

std::string Source(const Shape& s, const Variant& v, int vec) {
  const char* t = CType(s.dtype);
  const int64_t kchunk = s.k / v.split;
  std::string src;
  src += "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  src += "typedef " + std::string(t) + " T;\n";
  src += "#define GM " + std::to_string(s.m) + "\n#define GN " + std::to_string(s.n) + "LL\n#define GK " +
         std::to_string(s.k) + "LL\n#define GR " + std::to_string(v.cols_per_warp) + "\n#define GW " +
         std::to_string(v.warps) + "\n#define GV " + std::to_string(vec) + "\n#define GKC " +
         std::to_string(kchunk) + "LL\n";
  src += R"(
__device__ __forceinline__ float dice_f(float v) { return v; }
__device__ __forceinline__ float dice_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float dice_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void dice_to(float* p, float v) { *p = v; }
__device__ __forceinline__ void dice_to(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void dice_to(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// GV consecutive elements as floats (one 16-byte load when GV * sizeof(T) == 16).
__device__ __forceinline__ void dice_load(const T* __restrict__ p, float* out) {
#if GV * 2 == 16 || GV * 4 == 16
  union { uint4 u; T h[GV]; } b;
  b.u = __ldg(reinterpret_cast<const uint4*>(p));
#pragma unroll
  for (int i = 0; i < GV; ++i) out[i] = dice_f(b.h[i]);
#else
#pragma unroll
  for (int i = 0; i < GV; ++i) out[i] = dice_f(p[i]);
#endif
}
)";
  // The epilogue, one `const float v<id>` per IR value (none: the identity).
  const bool epi = s.result >= 0;
  if (epi) {
    src += Prelude();
    std::string body;
    EmitNodes(s.epilogue, {s.result}, [](int) { return std::string("acc"); }, "  ", &body);
    src += "__device__ __forceinline__ float dice_epilogue(float acc) {\n" + body + "  return v" +
           std::to_string(s.result) + ";\n}\n";
  }
  const std::string bias_param = s.bias ? ", const T* __restrict__ b" : "";
  const std::string ws_param = v.split > 1 ? ", void* __restrict__ workspace" : "";
  src += "extern \"C\" __global__ void __launch_bounds__(GW * 32) dice_gemv(const T* __restrict__ x, const T* "
         "__restrict__ w" + bias_param + ", T* __restrict__ out" + ws_param + ") {\n";
  src += R"(  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long n0 = ((long long)blockIdx.x * GW + warp) * GR;
  if (n0 >= GN) return;
  const long long kbeg = (long long)blockIdx.y * GKC;
  float acc[GM][GR];
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < GR; ++r) acc[m][r] = 0.f;
#pragma unroll 2
  for (long long k = kbeg + lane * GV; k < kbeg + GKC; k += 32 * GV) {
    float wv[GR][GV];
#pragma unroll
    for (int r = 0; r < GR; ++r) {
      if (n0 + r < GN) dice_load(w + (n0 + r) * GK + k, wv[r]);
      else {
#pragma unroll
        for (int i = 0; i < GV; ++i) wv[r][i] = 0.f;
      }
    }
#pragma unroll
    for (int m = 0; m < GM; ++m) {
      float xv[GV];
      dice_load(x + m * GK + k, xv);
#pragma unroll
      for (int r = 0; r < GR; ++r)
#pragma unroll
        for (int i = 0; i < GV; ++i) acc[m][r] = fmaf(xv[i], wv[r][i], acc[m][r]);
    }
  }
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < GR; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < GR; ++r) {
      if (n0 + r >= GN) continue;
)";
  if (v.split > 1) {
    src += "      atomicAdd(reinterpret_cast<float*>(workspace) + m * GN + n0 + r, acc[m][r]);\n    }\n}\n";
    src += "extern \"C\" __global__ void dice_gemv_finish(const T* __restrict__ x, const T* __restrict__ w" +
           bias_param + ", T* __restrict__ out" + ws_param + ") {\n";
    src += "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
    src += "  if (i >= GM * GN) return;\n";
    src += "  float v = reinterpret_cast<const float*>(workspace)[i];\n";
    if (s.bias) src += "  v += dice_f(b[i % GN]);\n";
    src += epi ? "  dice_to(out + i, dice_epilogue(v));\n}\n" : "  dice_to(out + i, v);\n}\n";
  } else if (epi) {
    src += s.bias ? "      dice_to(out + m * GN + n0 + r, dice_epilogue(acc[m][r] + dice_f(b[n0 + r])));\n"
                  : "      dice_to(out + m * GN + n0 + r, dice_epilogue(acc[m][r]));\n";
    src += "    }\n}\n";
  } else {
    src += s.bias ? "      dice_to(out + m * GN + n0 + r, acc[m][r] + dice_f(b[n0 + r]));\n"
                  : "      dice_to(out + m * GN + n0 + r, acc[m][r]);\n";
    src += "    }\n}\n";
  }
  return src;
}


// The streaming form: a template instantiated once per shape (several in one
// source). Needs T, dice_f, dice_to and dice_epilogue declared before it.
// x tiles of GKT columns are staged in shared memory by the whole block
// (zero rows past `rows`); each warp owns GR output columns (SILU: their
// gate rows n and up rows GN + n of a [2 GN, K] weight), walks the tile in
// 16-byte weight loads, GU of them per column in flight before the FMAs, and
// finishes with a shuffle reduction; lane (m * GR + r) % 32 stores (m, r).
constexpr const char* kStreamBody = R"(
__device__ __forceinline__ void dice_unpack(const uint4& u, float* out) {
  union { uint4 u; T h[16 / sizeof(T)]; } b;
  b.u = u;
#pragma unroll
  for (int i = 0; i < (int)(16 / sizeof(T)); ++i) out[i] = dice_f(b.h[i]);
}
__device__ __forceinline__ float dice_round(float v) { T t; dice_to(&t, v); return dice_f(t); }
// The end of both forms: the shuffle reduction of each (row, column) partial
// sum, then lane (m * GR + r) % 32 applies the bias / epilogue or the SILU
// product and stores (m, r) of the warp's columns n0...
template <int GM, long long GN, int GR, bool SILU, bool BIAS>
__device__ __forceinline__ void dice_gemv_finish(float (&acc)[GM][SILU ? 2 * GR : GR], const T* __restrict__ b,
                                                 T* __restrict__ out, long long n0, int lane, int rows) {
  constexpr int NR = SILU ? 2 * GR : GR;
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < GR; ++r) {
      if (lane != ((m * GR + r) & 31) || m >= rows || n0 + r >= GN) continue;
      float v = acc[m][r];
      if (SILU) {
        // As the unfused path: gate and up stored in T, silu(gate) rounded to T, then the product.
        const float g = dice_round(v), up = dice_round(acc[m][r + (SILU ? GR : 0)]);
        v = dice_round(g / (1.f + expf(-g))) * up;
      } else {
        if (BIAS) v += dice_f(b[n0 + r]);
        v = dice_epilogue(v);
      }
      dice_to(out + (long long)m * GN + n0 + r, v);
    }
}
template <int GM, long long GN, long long GK, int GR, int GW, int GU, int GKT, bool SILU, bool BIAS>
__device__ __forceinline__ void dice_gemv_stream(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ out, int rows) {
  constexpr int V = 16 / sizeof(T);
  constexpr int NR = SILU ? 2 * GR : GR;
  __shared__ __align__(16) T xs[GM * GKT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long n0 = ((long long)blockIdx.x * GW + warp) * GR;
  const bool active = n0 < GN;
  float acc[GM][NR];
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[m][r] = 0.f;
  for (long long kt = 0; kt < GK; kt += GKT) {
    const int kn = (int)(GK - kt < GKT ? GK - kt : GKT);
    __syncthreads();
    for (int i = threadIdx.x * V; i < GM * kn; i += GW * 32 * V) {
      const int m = i / kn, kk = i - m * kn;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (m < rows) v = __ldg(reinterpret_cast<const uint4*>(x + (long long)m * GK + kt + kk));
      *reinterpret_cast<uint4*>(xs + m * GKT + kk) = v;
    }
    __syncthreads();
    if (!active) continue;
    for (int k0 = lane * V; k0 < kn; k0 += 32 * V * GU) {
      uint4 wr[GU][NR];
#pragma unroll
      for (int u = 0; u < GU; ++u)
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const int kk = k0 + u * 32 * V, c = r % GR;
          const long long row = (r < GR ? 0 : GN) + n0 + c;
          wr[u][r] = (kk < kn && n0 + c < GN) ? __ldg(reinterpret_cast<const uint4*>(w + row * GK + kt + kk))
                                              : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
      for (int u = 0; u < GU; ++u) {
        const int kk = k0 + u * 32 * V;
        if (kk >= kn) break;
        float wf[NR][V];
#pragma unroll
        for (int r = 0; r < NR; ++r) dice_unpack(wr[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < GM; ++m) {
          float xf[V];
          dice_unpack(*reinterpret_cast<const uint4*>(xs + m * GKT + kk), xf);
#pragma unroll
          for (int r = 0; r < NR; ++r)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
        }
      }
    }
  }
  if (!active) return;
  dice_gemv_finish<GM, GN, GR, SILU, BIAS>(acc, b, out, n0, lane, rows);
}
// The direct form (StreamGemvSpec::x_direct): no shared memory and no
// barrier. Each warp walks its GR columns' rows of w in 16-byte loads, GU of
// them per column in flight, and reads the matching 16 bytes of each x row
// through L1 (every warp of an SM reads the same x, so it stays cached);
// blocks loop over column groups (grid-stride), so a grid smaller than the
// column groups keeps every SM busy to the end.
template <int GM, long long GN, long long GK, int GR, int GW, int GU, bool SILU, bool BIAS>
__device__ __forceinline__ void dice_gemv_direct(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ out, int rows) {
  constexpr int V = 16 / sizeof(T);
  constexpr int NR = SILU ? 2 * GR : GR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (long long g = blockIdx.x; g * GW * GR < GN; g += gridDim.x) {
    const long long n0 = (g * GW + warp) * GR;
    if (n0 >= GN) return;  // the last group's idle warps: no later group starts lower
    float acc[GM][NR];
#pragma unroll
    for (int m = 0; m < GM; ++m)
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[m][r] = 0.f;
    for (long long k0 = (long long)lane * V; k0 < GK; k0 += 32LL * V * GU) {
      uint4 wr[GU][NR];
#pragma unroll
      for (int u = 0; u < GU; ++u)
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const long long kk = k0 + (long long)u * 32 * V;
          const int c = r % GR;
          const long long row = (r < GR ? 0 : GN) + n0 + c;
          wr[u][r] = (kk < GK && n0 + c < GN) ? __ldg(reinterpret_cast<const uint4*>(w + row * GK + kk))
                                              : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
      for (int u = 0; u < GU; ++u) {
        const long long kk = k0 + (long long)u * 32 * V;
        if (kk >= GK) break;
        float wf[NR][V];
#pragma unroll
        for (int r = 0; r < NR; ++r) dice_unpack(wr[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < GM; ++m) {
          if (m >= rows) break;
          float xf[V];
          dice_unpack(__ldg(reinterpret_cast<const uint4*>(x + (long long)m * GK + kk)), xf);
#pragma unroll
          for (int r = 0; r < NR; ++r)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
        }
      }
    }
    dice_gemv_finish<GM, GN, GR, SILU, BIAS>(acc, b, out, n0, lane, rows);
  }
}
)";

// The element-type helpers every gemv source starts with.
std::string TypeHeader(ir::DType dtype) {
  std::string src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  src += "typedef " + std::string(CType(dtype)) + " T;\n";
  src += R"(__device__ __forceinline__ float dice_f(float v) { return v; }
__device__ __forceinline__ float dice_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float dice_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void dice_to(float* p, float v) { *p = v; }
__device__ __forceinline__ void dice_to(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void dice_to(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
)";
  return src;
}

struct StreamGeometry {
  int cols_per_warp, warps, unroll, k_tile;
};

// Columns per warp (fewer for SILU: two weight rows each), loads in flight
// per column and the x tile (at most 32 KB of shared memory, a multiple of
// one warp's 16-byte sweep) for M rows.
StreamGeometry Geometry(const StreamGemvSpec& s) {
  StreamGeometry g{2, 4, 8, 0};
  if (s.m > 8) {
    g.cols_per_warp = 4, g.unroll = 2;  // x read from shared memory once per 4 columns
  } else if (s.m > 4) {
    g.unroll = 4;
  }
  if (s.silu_mul) g.cols_per_warp /= 2;
  if (s.cols_per_warp > 0) g.cols_per_warp = s.cols_per_warp;
  if (s.warps > 0) g.warps = s.warps;
  if (s.unroll > 0) g.unroll = s.unroll;
  const int ebytes = s.dtype == ir::DType::kFloat32 ? 4 : 2;
  const int64_t sweep = 32 * (16 / ebytes);
  int64_t tile = (32768 / (s.m * ebytes)) / sweep * sweep;
  tile = std::max<int64_t>(sweep, tile);
  const int64_t k_round = (s.k + sweep - 1) / sweep * sweep;
  g.k_tile = static_cast<int>(std::min(tile, k_round));
  return g;
}

}  // namespace

Expected<std::vector<Candidate>> SkinnyGemmCandidates(const Task& task, int max_candidates, const TargetInfo& target) {
  auto shape = Match(task);
  if (!shape.ok()) return shape.status();
  const Shape& s = *shape;
  const int ebytes = ElementBytes(s.dtype);
  const int vec_full = 16 / ebytes;
  // 16-byte loads need every row start 16-byte aligned: K * element size a
  // multiple of 16 (run_group checks the base pointers' alignment).
  const int vec = (s.k * ebytes) % 16 == 0 ? vec_full : 1;
  // Column-parallel variants first; split-K ones when the columns alone give
  // fewer than two blocks per SM.
  const std::vector<Variant> variants = {{2, 4, 1}, {1, 4, 1}, {4, 4, 1}, {2, 8, 1},
                                         {1, 4, 2}, {2, 4, 2}, {1, 4, 4}, {1, 8, 8}};
  std::vector<Candidate> out;
  // The streaming form first (x staged in shared memory, 16-byte weight
  // loads several deep, no workspace): it needs the aligned rows.
  if (vec == vec_full && max_candidates > 0) {
    StreamGemvSpec spec;
    spec.m = s.m, spec.n = s.n, spec.k = s.k, spec.dtype = s.dtype, spec.bias = s.bias;
    if (CheckStreamGemv(spec).ok()) {
      Candidate c;
      c.origin = StreamGemvOrigin(spec);
      c.form = CandidateForm::kDevice;
      std::string epilogue = "__device__ __forceinline__ float dice_epilogue(float acc) { return acc; }\n";
      if (s.result >= 0) {
        std::string body;
        EmitNodes(s.epilogue, {s.result}, [](int) { return std::string("acc"); }, "  ", &body);
        epilogue = Prelude() + "__device__ __forceinline__ float dice_epilogue(float acc) {\n" + body + "  return v" +
                   std::to_string(s.result) + ";\n}\n";
      }
      c.source = StreamGemvPrelude(s.dtype, /*identity_epilogue=*/false, epilogue) +
                 StreamGemvInstance(spec, "dice_gemv", /*rows_argument=*/false);
      c.plan.launches.push_back(StreamGemvLaunch(spec, "dice_gemv"));
      out.push_back(std::move(c));
    }
  }
  for (const Variant& v : variants) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    if (s.m * v.cols_per_warp > 64) continue;  // the partial sums must stay in registers
    const int64_t cols_per_block = static_cast<int64_t>(v.cols_per_warp) * v.warps;
    const int64_t blocks = (s.n + cols_per_block - 1) / cols_per_block;
    if (v.split > 1) {
      if (blocks >= 2 * target.sm_count) continue;
      if (s.k % (static_cast<int64_t>(v.split) * 32 * vec) != 0) continue;
    }
    Candidate c;
    c.origin = "template:gemv/r" + std::to_string(v.cols_per_warp) + "/w" + std::to_string(v.warps) + "/s" +
               std::to_string(v.split) + "/v" + std::to_string(vec);
    c.form = CandidateForm::kDevice;
    c.source = Source(s, v, vec);
    KernelLaunch main;
    main.kernel = "dice_gemv";
    main.grid = {static_cast<uint32_t>(blocks), static_cast<uint32_t>(v.split), 1};
    main.block = {static_cast<uint32_t>(32 * v.warps), 1, 1};
    c.plan.launches.push_back(main);
    if (v.split > 1) {
      KernelLaunch fin;
      fin.kernel = "dice_gemv_finish";
      fin.block = {256, 1, 1};
      fin.grid = {static_cast<uint32_t>((s.m * s.n + 255) / 256), 1, 1};
      c.plan.launches.push_back(fin);
      c.plan.workspace_bytes = static_cast<uint64_t>(s.m * s.n) * sizeof(float);
    }
    out.push_back(std::move(c));
  }
  if (out.empty()) return Unsupported("no variant fits M=" + std::to_string(s.m));
  return out;
}

Status CheckStreamGemv(const StreamGemvSpec& s) {
  if (s.m < 1 || s.m > kGemvMaxRows) {
    return Unsupported("stream: " + std::to_string(s.m) + " rows; 1.." + std::to_string(kGemvMaxRows));
  }
  if (s.n < 1 || s.k < 1) return Unsupported("stream: an empty GEMM");
  if (s.silu_mul && s.bias) return Unsupported("stream: silu_mul takes no bias");
  const int ebytes = ElementBytes(s.dtype);
  if ((s.k * ebytes) % 16 != 0) return Unsupported("stream: K * element size must be a multiple of 16 bytes");
  if (s.cols_per_warp < 0 || s.cols_per_warp > 4) return Unsupported("stream: cols_per_warp outside 1..4");
  if (s.warps < 0 || s.warps > 8) return Unsupported("stream: warps outside 1..8");
  if (s.unroll < 0 || s.unroll > 16) return Unsupported("stream: unroll outside 1..16");
  if (s.grid_blocks < 0 || (s.grid_blocks > 0 && !s.x_direct)) {
    return Unsupported("stream: grid_blocks needs the direct form (x_direct) and must be positive");
  }
  return Status::Ok();
}

std::string StreamGemvPrelude(ir::DType dtype, bool identity_epilogue, const std::string& epilogue) {
  std::string src = TypeHeader(dtype);
  src += identity_epilogue ? "__device__ __forceinline__ float dice_epilogue(float v) { return v; }\n" : epilogue;
  return src + kStreamBody;
}

std::string StreamGemvInstance(const StreamGemvSpec& s, const std::string& name, bool rows_argument) {
  const StreamGeometry g = Geometry(s);
  std::string src = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(g.warps * 32) + ") " + name +
                    "(const T* __restrict__ x, const T* __restrict__ w" +
                    (s.bias ? ", const T* __restrict__ b" : "") + ", T* __restrict__ out" +
                    (rows_argument ? ", int rows" : "") + ") {\n";
  src += std::string(s.x_direct ? "  dice_gemv_direct<" : "  dice_gemv_stream<") + std::to_string(s.m) + ", " +
         std::to_string(s.n) + "LL, " + std::to_string(s.k) + "LL, " + std::to_string(g.cols_per_warp) + ", " +
         std::to_string(g.warps) + ", " + std::to_string(g.unroll) + ", " +
         (s.x_direct ? "" : std::to_string(g.k_tile) + ", ") + (s.silu_mul ? "true" : "false") + ", " +
         (s.bias ? "true" : "false") + ">(x, w, " + (s.bias ? "b" : "nullptr") + ", out, " +
         (rows_argument ? "rows" : std::to_string(s.m)) + ");\n}\n";
  return src;
}

KernelLaunch StreamGemvLaunch(const StreamGemvSpec& s, const std::string& name) {
  const StreamGeometry g = Geometry(s);
  const int64_t cols = static_cast<int64_t>(g.cols_per_warp) * g.warps;
  KernelLaunch l;
  l.kernel = name;
  int64_t blocks = (s.n + cols - 1) / cols;
  if (s.x_direct && s.grid_blocks > 0) blocks = std::min<int64_t>(blocks, s.grid_blocks);
  l.grid = {static_cast<uint32_t>(blocks), 1, 1};
  l.block = {static_cast<uint32_t>(32 * g.warps), 1, 1};
  return l;
}

std::string StreamGemvOrigin(const StreamGemvSpec& s) {
  const StreamGeometry g = Geometry(s);
  const int vec = 16 / ElementBytes(s.dtype);
  if (s.x_direct) {
    return "template:gemv/direct/r" + std::to_string(g.cols_per_warp) + "/w" + std::to_string(g.warps) + "/u" +
           std::to_string(g.unroll) + "/g" + std::to_string(s.grid_blocks) + "/v" + std::to_string(vec) +
           (s.silu_mul ? "/silu_mul" : "");
  }
  return "template:gemv/stream/r" + std::to_string(g.cols_per_warp) + "/w" + std::to_string(g.warps) + "/s1/u" +
         std::to_string(g.unroll) + "/t" + std::to_string(g.k_tile) + "/v" + std::to_string(vec) +
         (s.silu_mul ? "/silu_mul" : "");
}

}  // namespace dice::generator::tmpl
