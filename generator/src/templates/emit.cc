// emit.cc — see emit.h.
#include "emit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace dice::generator::tmpl {

namespace {
// The prelude (Prelude()) in three parts, concatenated in this order.
// Its includes, float/half/bfloat16 conversions, and scalar and 16-byte
// vector loads and stores.
constexpr char kPreludeLoadStore[] = R"CUDA(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define DICE_INF __int_as_float(0x7f800000)
#define DICE_NAN __int_as_float(0x7fffffff)
__device__ __forceinline__ float dice_ld(const float* p) { return *p; }
__device__ __forceinline__ float dice_ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float dice_ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void dice_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void dice_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void dice_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// 16-byte vector loads/stores: 4 floats or 8 halves per access.
__device__ __forceinline__ void dice_ld16(const float* p, float* o) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}
__device__ __forceinline__ void dice_ld16(const __half* p, float* o) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) { const float2 f = __half22float2(h[k]); o[2 * k] = f.x; o[2 * k + 1] = f.y; }
}
__device__ __forceinline__ void dice_ld16(const __nv_bfloat16* p, float* o) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) { const float2 f = __bfloat1622float2(h[k]); o[2 * k] = f.x; o[2 * k + 1] = f.y; }
}
__device__ __forceinline__ void dice_st16(float* p, const float* o) {
  *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
}
__device__ __forceinline__ void dice_st16(__half* p, const float* o) {
  uint4 v; __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2half2_rn(o[2 * k], o[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = v;
}
__device__ __forceinline__ void dice_st16(__nv_bfloat16* p, const float* o) {
  uint4 v; __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(o[2 * k], o[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = v;
}
template <typename T, int V> __device__ __forceinline__ void dice_ldv(const T* p, float* o) {
  constexpr int kPer = 16 / sizeof(T);
#pragma unroll
  for (int q = 0; q < V / kPer; ++q) dice_ld16(p + q * kPer, o + q * kPer);
}
template <typename T, int V> __device__ __forceinline__ void dice_stv(T* p, const float* o) {
  constexpr int kPer = 16 / sizeof(T);
#pragma unroll
  for (int q = 0; q < V / kPer; ++q) dice_st16(p + q * kPer, o + q * kPer);
}
)CUDA";
// Elementwise math with torch's semantics (NaN propagation, GELU, softplus, ...).
constexpr char kPreludeMath[] = R"CUDA(// torch semantics: max/min propagate NaN.
__device__ __forceinline__ float dice_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float dice_min(float a, float b) { return (a != a || a < b) ? a : b; }
__device__ __forceinline__ float dice_relu(float x) { return (x != x || x > 0.0f) ? x : 0.0f; }
__device__ __forceinline__ float dice_clamp(float x, float lo, float hi) { return dice_min(dice_max(x, lo), hi); }
__device__ __forceinline__ float dice_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
__device__ __forceinline__ float dice_gelu_tanh(float x) {
  const float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float dice_softplus(float x, float beta, float threshold) {
  return (x * beta > threshold) ? x : log1pf(expf(x * beta)) / beta;
}
__device__ __forceinline__ float dice_elu(float x, float alpha, float scale, float input_scale) {
  return x > 0.0f ? x * scale : expm1f(x * input_scale) * alpha * scale;
}
__device__ __forceinline__ float dice_mish(float x) { return x * tanhf(log1pf(expf(x))); }
__device__ __forceinline__ float dice_sum(float a, float b) { return a + b; }
)CUDA";
// Reductions: warp, block and tile reductions, online softmax statistics,
// sm_90 cluster helpers, float64 sums.
constexpr char kPreludeReductions[] = R"CUDA(template <int OP> __device__ __forceinline__ float dice_combine(float a, float b) {
  return OP == 0 ? a + b : (OP == 1 ? dice_max(a, b) : dice_min(a, b));
}
template <int OP> __device__ __forceinline__ float dice_identity() {
  return OP == 0 ? 0.0f : (OP == 1 ? -DICE_INF : DICE_INF);
}
template <int OP> __device__ __forceinline__ float dice_warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = dice_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread of the block gets the result; `sh` holds >= 32 floats and is
// free again on return.
template <int OP, int NT> __device__ __forceinline__ float dice_block_reduce(float v, float* sh) {
  v = dice_warp_reduce<OP>(v);
  if (NT > 32) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = (lane < NT / 32) ? sh[lane] : dice_identity<OP>();
    v = dice_warp_reduce<OP>(v);
    __syncthreads();
  }
  return v;
}
// Whether a * inv (inv = 1/b) equals a / b up to rounding: inv must be a
// normal float (b subnormal overflows it, |b| > 2^126 makes it subnormal).
// The row kernels divide by a row statistic through its reciprocal only
// when this holds for the row (the loop is emitted twice, see row.cc).
__device__ __forceinline__ bool dice_rcp_normal(float inv) {
  const float m = fabsf(inv);
  return m >= 1.17549435e-38f && m <= 3.40282347e+38f;
}
// Reduces v over the TY threads sharing threadIdx.x & 31 (the block is a
// 32 x TY tile: 32 rows side by side, TY threads along each row); every thread
// gets its row's result. `sh` holds >= 33 * TY floats and is free on return.
template <int OP, int TY> __device__ __forceinline__ float dice_tile_reduce(float v, float* sh) {
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  sh[ty * 33 + tx] = v;
  __syncthreads();
  if (ty == 0) {
    for (int i = 1; i < TY; ++i) v = dice_combine<OP>(v, sh[i * 33 + tx]);
    sh[tx] = v;
  }
  __syncthreads();
  v = sh[tx];
  __syncthreads();
  return v;
}
// Online softmax statistics (Milakov & Gimelshein 2018): (m, s) is a running
// max and the sum of exp(x - m); a combine rescales the side whose max is
// smaller. NaN propagates through m and s; two empty sides (-inf, 0) stay empty.
__device__ __forceinline__ void dice_online_combine(float& m, float& s, float m2, float s2) {
  const float mn = dice_max(m, m2);
  s = (m == mn ? s : s * expf(m - mn)) + (m2 == mn ? s2 : s2 * expf(m2 - mn));
  m = mn;
}
__device__ __forceinline__ void dice_warp_reduce_online(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    dice_online_combine(m, s, m2, s2);
  }
}
// Every thread gets the block's (m, s); `sh` holds >= 64 floats.
template <int NT> __device__ __forceinline__ void dice_block_reduce_online(float& m, float& s, float* sh) {
  dice_warp_reduce_online(m, s);
  if (NT > 32) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { sh[wid] = m; sh[32 + wid] = s; }
    __syncthreads();
    m = lane < NT / 32 ? sh[lane] : -DICE_INF;
    s = lane < NT / 32 ? sh[32 + lane] : 0.0f;
    dice_warp_reduce_online(m, s);
    __syncthreads();
  }
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Thread-block clusters (sm_90): a full cluster barrier with release/acquire
// ordering of shared-memory writes, and a read of another CTA's shared
// memory (distributed shared memory; PTX ISA: mapa, ld.shared::cluster).
__device__ __forceinline__ void dice_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ double dice_dsmem_ld(const double* p, unsigned rank) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(r) : "memory");
  return v;
}
#endif
// float64 sums (moments: Σt and Σt² of a row, whose difference cancels).
__device__ __forceinline__ double dice_warp_reduce_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <int NT> __device__ __forceinline__ double dice_block_reduce_sum_d(double v, double* sh) {
  v = dice_warp_reduce_sum_d(v);
  if (NT > 32) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < NT / 32 ? sh[lane] : 0.0;
    v = dice_warp_reduce_sum_d(v);
    __syncthreads();
  }
  return v;
}
)CUDA";
}  // namespace

const std::string& Prelude() {
  static const std::string kPrelude = std::string(kPreludeLoadStore) + kPreludeMath + kPreludeReductions;
  return kPrelude;
}

std::string FloatLit(double v) {
  if (std::isnan(v)) return "DICE_NAN";
  if (std::isinf(v)) return v > 0 ? "DICE_INF" : "(-DICE_INF)";
  float f = static_cast<float>(v);
  if (std::isinf(f)) return f > 0 ? "DICE_INF" : "(-DICE_INF)";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(f));
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  s += "f";
  if (s[0] == '-') s = "(" + s + ")";
  return s;
}

const char* CType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32: return "float";
    case ir::DType::kFloat16: return "__half";
    case ir::DType::kBFloat16: return "__nv_bfloat16";
  }
  return "float";
}

const char* IdxType(bool wide) { return wide ? "unsigned long long" : "unsigned"; }
std::string IdxLit(int64_t v, bool wide) { return std::to_string(v) + (wide ? "ull" : "u"); }

std::string OffsetExpr(const std::vector<int>& axes, const std::vector<int64_t>& F,
                       const std::vector<int64_t>& strides, const std::string& var, bool wide) {
  struct Group {
    int64_t extent;
    int64_t stride;  // stride of the innermost axis of the group
    int64_t div;     // product of extents after the group
  };
  std::vector<Group> groups;  // innermost first
  int64_t div = 1;
  for (size_t i = axes.size(); i-- > 0;) {
    int a = axes[i];
    if (F[a] == 1) continue;
    int64_t s = strides[a];
    if (!groups.empty() && s == groups.back().stride * groups.back().extent) {
      groups.back().extent *= F[a];
    } else {
      groups.push_back(Group{F[a], s, div});
    }
    div *= F[a];
  }
  std::string out;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    if (g.stride == 0) continue;
    std::string term = var;
    if (g.div > 1) term = "(" + term + " / " + IdxLit(g.div, wide) + ")";
    if (gi + 1 < groups.size()) term = "(" + term + " % " + IdxLit(g.extent, wide) + ")";
    if (g.stride != 1) term = term + " * " + IdxLit(g.stride, wide);
    out = out.empty() ? term : out + " + " + term;
  }
  if (out.empty()) return "0";
  return out == var ? out : "(" + out + ")";
}

std::string AxisCoordExpr(const std::vector<int>& axes, const std::vector<int64_t>& F, int axis,
                          const std::string& var, bool wide) {
  auto it = std::find(axes.begin(), axes.end(), axis);
  if (it == axes.end()) return "";
  int64_t inner = 1;
  for (auto jt = it + 1; jt != axes.end(); ++jt) inner *= F[*jt];
  bool outermost = true;
  for (auto jt = axes.begin(); jt != it; ++jt) outermost = outermost && F[*jt] == 1;
  std::string c = var;
  if (inner > 1) c = "(" + c + " / " + IdxLit(inner, wide) + ")";
  if (!outermost) c = "(" + c + " % " + IdxLit(F[axis], wide) + ")";
  return c;
}

std::string RotateShiftExpr(const Node& n, const std::vector<int>& axes, const std::vector<int64_t>& F,
                            const std::string& var, bool wide) {
  if (n.kind != NodeKind::kLoad || n.rot_axis < 0) return "";
  const std::string c = AxisCoordExpr(axes, F, n.rot_axis, var, wide);
  if (c.empty()) return "";
  const std::string step = std::to_string(n.rot_half * n.strides[n.rot_axis]) + "ll";
  return " + (" + c + " < " + IdxLit(n.rot_half, wide) + " ? " + step + " : -" + step + ")";
}

std::string RotateSignExpr(const Node& n, const std::vector<int>& axes, const std::vector<int64_t>& F,
                           const std::string& var, bool wide) {
  if (n.kind != NodeKind::kRotSign) return "";
  const std::string c = AxisCoordExpr(axes, F, n.rot_axis, var, wide);
  if (c.empty()) return "";
  return "(" + c + " < " + IdxLit(n.rot_half, wide) + " ? -1.0f : 1.0f)";
}

bool HasRotation(const Lowered& lo) {
  for (const Node& n : lo.nodes)
    if (n.kind == NodeKind::kRotSign) return true;
  return false;
}

std::string GuardExpr(const std::vector<int>& axes, const std::vector<int64_t>& F,
                      const std::vector<int64_t>& shape, const std::string& var, bool wide) {
  std::string out;
  int64_t div = 1;
  for (size_t i = axes.size(); i-- > 0;) {
    int a = axes[i];
    if (F[a] == 1) continue;
    if (shape[a] == 1) {
      std::string c = div > 1 ? "(" + var + " / " + IdxLit(div, wide) + ")" : var;
      c = "(" + c + " % " + IdxLit(F[a], wide) + ") == 0";
      out = out.empty() ? c : out + " && " + c;
    }
    div *= F[a];
  }
  return out;
}

std::string ParamList(const Lowered& lo, bool workspace) {
  std::string s;
  for (size_t i = 0; i < lo.inputs.size(); ++i) {
    if (!s.empty()) s += ", ";
    s += std::string("const ") + CType(lo.inputs[i].dtype) + "* __restrict__ in" + std::to_string(i);
  }
  for (size_t o = 0; o < lo.outputs.size(); ++o) {
    if (!s.empty()) s += ", ";
    s += std::string(CType(lo.outputs[o].dtype)) + "* __restrict__ out" + std::to_string(o);
  }
  if (workspace) s += ", void* __restrict__ workspace";
  return s;
}

std::string ValueName(const Lowered& lo, int id) {
  return (lo.nodes[id].kind == NodeKind::kReduce ? "r" : "v") + std::to_string(id);
}

namespace {

std::string UnaryExpr(const Node& n, const std::string& a) {
  using ir::OpKind;
  if (n.inf_to_zero) return "(fabsf(" + a + ") == DICE_INF ? 0.0f : " + a + ")";
  auto sc = [&](size_t i) { return FloatLit(n.scalars.at(i)); };
  switch (n.op) {
    case OpKind::kNeg: return "(-" + a + ")";
    case OpKind::kAbs: return "fabsf(" + a + ")";
    case OpKind::kExp: return "expf(" + a + ")";
    case OpKind::kLog: return "logf(" + a + ")";
    case OpKind::kSqrt: return "sqrtf(" + a + ")";
    case OpKind::kRsqrt: return "(1.0f / sqrtf(" + a + "))";
    case OpKind::kReciprocal: return "(1.0f / " + a + ")";
    case OpKind::kTanh: return "tanhf(" + a + ")";
    case OpKind::kSigmoid: return "(1.0f / (1.0f + expf(-" + a + ")))";
    case OpKind::kErf: return "erff(" + a + ")";
    case OpKind::kRelu: return "dice_relu(" + a + ")";
    case OpKind::kGelu: return (n.ivalue == 0 ? "dice_gelu_erf(" : "dice_gelu_tanh(") + a + ")";
    case OpKind::kSilu: return "(" + a + " / (1.0f + expf(-" + a + ")))";
    case OpKind::kMish: return "dice_mish(" + a + ")";
    case OpKind::kSoftplus: return "dice_softplus(" + a + ", " + sc(0) + ", " + sc(1) + ")";
    case OpKind::kSoftsign: return "(" + a + " / (1.0f + fabsf(" + a + ")))";
    case OpKind::kElu: return "dice_elu(" + a + ", " + sc(0) + ", " + sc(1) + ", " + sc(2) + ")";
    case OpKind::kSelu: return "dice_elu(" + a + ", 1.67326319217681884765625f, 1.05070102214813232421875f, 1.0f)";
    case OpKind::kLeakyRelu: return "(" + a + " > 0.0f ? " + a + " : " + a + " * " + sc(0) + ")";
    case OpKind::kClamp: {
      std::string x = a;
      double lo = n.scalars.at(0), hi = n.scalars.at(1);
      if (!(std::isinf(lo) && lo < 0)) x = "dice_max(" + x + ", " + FloatLit(lo) + ")";
      if (!(std::isinf(hi) && hi > 0)) x = "dice_min(" + x + ", " + FloatLit(hi) + ")";
      return x;
    }
    case OpKind::kHardswish: return "(" + a + " * dice_min(dice_max(" + a + " + 3.0f, 0.0f), 6.0f) / 6.0f)";
    case OpKind::kHardsigmoid: return "(dice_min(dice_max(" + a + " + 3.0f, 0.0f), 6.0f) / 6.0f)";
    case OpKind::kPowScalar: {
      double p = n.scalars.at(0);
      if (p == 1) return a;
      if (p == 2) return "(" + a + " * " + a + ")";
      if (p == 3) return "(" + a + " * " + a + " * " + a + ")";
      if (p == 0.5) return "sqrtf(" + a + ")";
      if (p == -1) return "(1.0f / " + a + ")";
      if (p == -0.5) return "(1.0f / sqrtf(" + a + "))";
      if (p == -2) return "(1.0f / (" + a + " * " + a + "))";
      if (p == 0) return "1.0f";
      return "powf(" + a + ", " + FloatLit(p) + ")";
    }
    case OpKind::kContiguous: return a;  // values unchanged; the output's strides carry the layout
    case OpKind::kCast:
      switch (static_cast<ir::DType>(n.ivalue)) {
        case ir::DType::kFloat16: return "__half2float(__float2half_rn(" + a + "))";
        case ir::DType::kBFloat16: return "__bfloat162float(__float2bfloat16_rn(" + a + "))";
        default: return a;
      }
    default: return "/*unsupported unary*/ " + a;
  }
}

std::string BinaryExpr(ir::OpKind op, const std::string& a, const std::string& b) {
  using ir::OpKind;
  switch (op) {
    case OpKind::kAdd: return "(" + a + " + " + b + ")";
    case OpKind::kSub: return "(" + a + " - " + b + ")";
    case OpKind::kMul: return "(" + a + " * " + b + ")";
    case OpKind::kDiv: return "(" + a + " / " + b + ")";
    case OpKind::kMaximum: return "dice_max(" + a + ", " + b + ")";
    case OpKind::kMinimum: return "dice_min(" + a + ", " + b + ")";
    case OpKind::kPow: return "powf(" + a + ", " + b + ")";
    default: return "/*unsupported binary*/ " + a;
  }
}

}  // namespace

void EmitNodes(const Lowered& lo, const std::vector<int>& targets, const std::function<std::string(int id)>& load,
               const std::string& indent, std::string* out, const std::function<bool(int id)>& row_invariant) {
  std::set<int> need;
  std::vector<int> stack(targets.begin(), targets.end());
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (!need.insert(id).second) continue;
    const Node& n = lo.nodes[id];
    if (n.kind == NodeKind::kReduce) continue;  // defined by the caller
    for (int a : n.args) stack.push_back(a);
  }
  for (int id : need) {  // std::set iterates ids ascending = topological order
    const Node& n = lo.nodes[id];
    std::string e;
    switch (n.kind) {
      case NodeKind::kReduce: continue;
      case NodeKind::kLoad:
      case NodeKind::kRotSign: e = load(id); break;
      case NodeKind::kConst: e = FloatLit(n.value); break;
      case NodeKind::kUnary: e = UnaryExpr(n, ValueName(lo, n.args[0])); break;
      case NodeKind::kBinary:
        if (n.op == ir::OpKind::kDiv && row_invariant && row_invariant(n.args[1]) && !row_invariant(id)) {
          e = "(" + ValueName(lo, n.args[0]) + " * dice_inv" + std::to_string(n.args[1]) + ")";
        } else {
          e = BinaryExpr(n.op, ValueName(lo, n.args[0]), ValueName(lo, n.args[1]));
        }
        break;
    }
    *out += indent + "const float v" + std::to_string(id) + " = " + e + ";\n";
  }
}

bool NeedsWideIndex(const Lowered& lo) {
  const int64_t limit = (int64_t{1} << 31) - (int64_t{1} << 26);
  if (Numel(lo.F) >= limit) return true;
  for (const auto& in : lo.inputs) {
    int64_t span = 1;
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (in.shape[d] > 0) span += (in.shape[d] - 1) * std::abs(in.strides[d]);
    if (span >= limit || in.numel() >= limit) return true;
  }
  for (const auto& o : lo.outputs)
    if (o.numel >= limit) return true;
  return false;
}

std::string ReduceIdentity(ReduceOp op) {
  return op == ReduceOp::kSum ? "0.0f" : (op == ReduceOp::kMax ? "(-DICE_INF)" : "DICE_INF");
}

std::string ReduceCombine(ReduceOp op, const std::string& a, const std::string& b) {
  switch (op) {
    case ReduceOp::kSum: return "(" + a + " + " + b + ")";
    case ReduceOp::kMax: return "dice_max(" + a + ", " + b + ")";
    case ReduceOp::kMin: return "dice_min(" + a + ", " + b + ")";
  }
  return a;
}

}  // namespace dice::generator::tmpl
