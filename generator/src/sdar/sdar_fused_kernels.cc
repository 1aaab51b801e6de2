// The SDAR decoder's fused elementwise kernels: see
// dice/generator/sdar_fused_kernels.h. Torch-free on purpose (LAYERS.md):
// only the runtime's public compiler and driver headers.
#include "dice/generator/sdar_fused_kernels.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdint>
#include <sstream>

#include "dice/core/candidate.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "../templates/gemv.h"
#include "sdar_fused_qk.h"

namespace dice::generator {
namespace {

using runtime::CudaDriver;

enum Kernel {
  kRmsNorm = 0,
  kAddRmsNorm = 1,
  kQkNormRope = 2,
  kSiluMul = 3,
  kRmsNormScalar = 4,
  kAddRmsNormScalar = 5,
  kAttnPartial = 6,
  kAttnCombine = 7,
  kQkNormRopeWarp = 8,
};

constexpr unsigned kAttnWarps = 16;

constexpr unsigned kSiluThreads = 256;

// Elements of one 16-byte load of the norm kernels: 16 / element size when
// hidden is a multiple of it, else 1 (scalar loads only).
int NormVec(const SdarFusedShape& s) {
  const int v = s.dtype == FusedDtype::kF32 ? 4 : 8;
  return s.hidden % v == 0 ? v : 1;
}

// Threads of a norm block: one 16-byte load a thread (about 8 elements a
// thread without vectors), whole warps, at most 1024.
unsigned NormThreads(const SdarFusedShape& s) {
  const int vec = NormVec(s);
  const int64_t units = vec > 1 ? s.hidden / vec : (s.hidden + 7) / 8;
  return static_cast<unsigned>(std::clamp<int64_t>((units + 31) / 32 * 32, 32, 1024));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned HeadThreads(int64_t head_dim) { return static_cast<unsigned>(std::max<int64_t>(32, (head_dim + 31) / 32 * 32)); }

const char* TypeName(FusedDtype d) {
  switch (d) {
    case FusedDtype::kF32: return "float";
    case FusedDtype::kBF16: return "__nv_bfloat16";
    case FusedDtype::kF16: return "__half";
  }
  return "float";
}

// The fixed part of the source; the shape arrives as the #defines before it.
// R(v): v rounded to the element type (identity for float), where LibTorch
// would store an intermediate in the compute dtype.
constexpr const char* kBody = R"CUDA(
__device__ __forceinline__ float L(const T* p, long i) { return dice_to_float(p[i]); }
__device__ __forceinline__ float R(float v) { return dice_to_float(dice_from_float(v)); }

// Sum of v over the block (NT threads, whole warps); every thread gets it.
template <int NT>
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (NT <= 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = lane < NT / 32 ? scratch[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();
  return s;
}

// V consecutive elements of p as floats: one 16-byte load when V elements
// fill 16 bytes (the caller guarantees the alignment), else V scalar loads.
template <int V>
__device__ __forceinline__ void LoadV(const T* p, float* out) {
  if constexpr (V * sizeof(T) == 16) {
    union { uint4 u; T h[V]; } b;
    b.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = dice_to_float(b.h[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = L(p, i);
  }
}
template <int V>
__device__ __forceinline__ void StoreV(T* p, const float* in) {
  if constexpr (V * sizeof(T) == 16) {
    union { uint4 u; T h[V]; } b;
#pragma unroll
    for (int i = 0; i < V; ++i) b.h[i] = dice_from_float(in[i]);
    *reinterpret_cast<uint4*>(p) = b.u;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = dice_from_float(in[i]);
  }
}

// One block per row; the row's values stay in registers between the passes.
// Every load (x, d, w) is issued before the first store: `sum` may alias x,
// so a store between two loads would serialise them (one memory round trip
// each). V elements a load (16 bytes when V = NORM_VEC > 1).
template <bool ADD, int V>
__device__ __forceinline__ void RowNorm(const T* x, const T* d, const T* w, T* sum, T* norm) {
  constexpr int NV = (HIDDEN / V + NORM_THREADS - 1) / NORM_THREADS;
  __shared__ float scratch[32];
  const long base = (long)blockIdx.x * HIDDEN;
  float v[NV][V], dv[NV][V], wv[NV][V];
#pragma unroll
  for (int e = 0; e < NV; ++e) {
    const int j = (threadIdx.x + e * NORM_THREADS) * V;
    if (j < HIDDEN) {
      LoadV<V>(x + base + j, v[e]);
      if (ADD) LoadV<V>(d + base + j, dv[e]);
      LoadV<V>(w + j, wv[e]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < NV; ++e) {
    const int j = (threadIdx.x + e * NORM_THREADS) * V;
    if (j < HIDDEN) {
      if (ADD) {
#pragma unroll
        for (int i = 0; i < V; ++i) v[e][i] = R(v[e][i] + dv[e][i]);
        StoreV<V>(sum + base + j, v[e]);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) ss += v[e][i] * v[e][i];
    }
  }
  const float r = rsqrtf(BlockSum<NORM_THREADS>(ss, scratch) / (float)HIDDEN + EPS);
#pragma unroll
  for (int e = 0; e < NV; ++e) {
    const int j = (threadIdx.x + e * NORM_THREADS) * V;
    if (j < HIDDEN) {
      float o[V];
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = wv[e][i] * R(v[e][i] * r);
      StoreV<V>(norm + base + j, o);
    }
  }
}

// 16-byte (NORM_VEC elements) loads; the _s forms take any alignment.
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_rmsnorm(const T* x, const T* w, T* norm) { RowNorm<false, NORM_VEC>(x, nullptr, w, nullptr, norm); }

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_add_rmsnorm(const T* x, const T* d, const T* w, T* sum, T* norm) {
  RowNorm<true, NORM_VEC>(x, d, w, sum, norm);
}

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_rmsnorm_s(const T* x, const T* w, T* norm) { RowNorm<false, 1>(x, nullptr, w, nullptr, norm); }

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_add_rmsnorm_s(const T* x, const T* d, const T* w, T* sum, T* norm) { RowNorm<true, 1>(x, d, w, sum, norm); }

// Where row `row` (token row % seq_len of sequence row / seq_len), head
// `kh`, element t of a new key/value goes in a [batch, KV_HEADS, capacity,
// HEAD_DIM] cache: slot slots[token] (null: start + token); -1 outside it.
__device__ __forceinline__ long long CacheAt(long row, int kh, int t, int seq_len, const long long* slots,
                                             long long start, long long capacity) {
  const long b = row / seq_len, tok = row % seq_len;
  const long long slot = slots != nullptr ? slots[tok] : start + tok;
  if (slot < 0 || slot >= capacity) return -1;
  return (((long long)b * KV_HEADS + kh) * capacity + slot) * HEAD_DIM + t;
}

// Where element 0 of query head `head` of row `row` goes in q_out: [rows,
// HEADS, HEAD_DIM], or [batch, HEADS, seq_len, HEAD_DIM] when q_heads_major.
__device__ __forceinline__ long QOutAt(long row, int head, int seq_len, int q_heads_major) {
  return q_heads_major ? (((row / seq_len) * HEADS + head) * (long)seq_len + row % seq_len) * HEAD_DIM
                       : (row * HEADS + head) * (long)HEAD_DIM;
}

// grid (rows, HEADS + KV_HEADS [+ KV_HEADS when v_cache]), HEAD_THREADS
// threads: one head of one row. Blocks y >= HEADS + KV_HEADS copy a value
// head into v_cache unchanged; k_cache (non-null) receives the normed and
// rotated key, k_out (non-null) too.
extern "C" __global__ void __launch_bounds__(HEAD_THREADS)
dice_sdar_qk_norm_rope(const T* qkv, const T* qw, const T* kw, const T* cos_t, const T* sin_t, T* q_out, T* k_out,
                       int seq_len, T* k_cache, T* v_cache, const long long* slots, long long start,
                       long long capacity, int q_heads_major) {
  __shared__ float scratch[32];
  __shared__ float normed[HEAD_DIM];
  const long row = blockIdx.x;
  const int head = blockIdx.y, t = threadIdx.x;
  const long in = row * (long)((HEADS + 2 * KV_HEADS) * HEAD_DIM) + (long)head * HEAD_DIM;
  if (head >= HEADS + KV_HEADS) {  // a value head: a copy (whole block, before any barrier)
    if (t < HEAD_DIM) {
      const long long at = CacheAt(row, head - HEADS - KV_HEADS, t, seq_len, slots, start, capacity);
      if (at >= 0) v_cache[at] = qkv[in + t];
    }
    return;
  }
  const bool is_q = head < HEADS;
  const T* w = is_q ? qw : kw;
  const float v = t < HEAD_DIM ? L(qkv, in + t) : 0.f;
  const float r = rsqrtf(BlockSum<HEAD_THREADS>(v * v, scratch) / (float)HEAD_DIM + EPS);
  if (t < HEAD_DIM) normed[t] = R(L(w, t) * R(v * r));
  __syncthreads();
  if (t >= HEAD_DIM) return;
  constexpr int HALF = HEAD_DIM / 2;
  const float n = normed[t];
  const float rot = t < HALF ? -normed[t + HALF] : normed[t - HALF];
  const long tab = (row % seq_len) * HEAD_DIM + t;
  const float out = R(R(n * L(cos_t, tab)) + R(rot * L(sin_t, tab)));
  if (is_q) {
    q_out[QOutAt(row, head, seq_len, q_heads_major) + t] = dice_from_float(out);
  } else {
    if (k_out != nullptr) k_out[(row * KV_HEADS + (head - HEADS)) * HEAD_DIM + t] = dice_from_float(out);
    if (k_cache != nullptr) {
      const long long at = CacheAt(row, head - HEADS, t, seq_len, slots, start, capacity);
      if (at >= 0) k_cache[at] = dice_from_float(out);
    }
  }
}

// Split-KV decode attention (the CUDA-graph step form). Partial kernel: grid
// (chunks, KV_HEADS, batch), ATTN_WARPS warps; the block's query rows are
// the g = HEADS / KV_HEADS query heads sharing KV head blockIdx.y times the
// seq_len tokens (row r = head i * seq_len + token), one warp a row at a
// time; each lane holds head dims lane + 32 e. Over keys j of the chunk:
// s = scale q.k (masked: skipped), online softmax (running max m, sum l,
// acc = sum p v) in float. Writes (m, l, acc[HEAD_DIM]) per (b, query head,
// token, chunk) to ws.
constexpr int ATTN_DPL = (HEAD_DIM + 31) / 32;
constexpr int ATTN_KB = 4;
extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)
dice_sdar_attn_partial(const T* q, const T* kc, const T* vc, const unsigned char* mask, float* ws, int seq_len,
                       int key_len, long long capacity, int chunk, float scale) {
  const int c = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = gridDim.x;
  constexpr int G = HEADS / KV_HEADS;
  const int j0 = c * chunk, j1 = min(key_len, j0 + chunk);
  const long long kv_base = ((long long)b * KV_HEADS + kvh) * capacity;
  for (int r = warp; r < G * seq_len; r += ATTN_WARPS) {
    const int i = r / seq_len, tok = r % seq_len, hq = kvh * G + i;
    float qv[ATTN_DPL], acc[ATTN_DPL];
    const long long q_at = (((long long)b * seq_len + tok) * HEADS + hq) * HEAD_DIM;
#pragma unroll
    for (int e = 0; e < ATTN_DPL; ++e) {
      const int d = lane + 32 * e;
      qv[e] = d < HEAD_DIM ? L(q, q_at + d) * scale : 0.f;
      acc[e] = 0.f;
    }
    float m = __int_as_float(0xff800000u), l = 0.f;
    // ATTN_KB keys at a time: their K and V loads issued together, then the
    // online-softmax updates (a key's mask bit is the same for the warp).
    for (int jb = j0; jb < j1; jb += ATTN_KB) {
      float kv[ATTN_KB][ATTN_DPL], vv[ATTN_KB][ATTN_DPL];
      bool ok[ATTN_KB];
#pragma unroll
      for (int u = 0; u < ATTN_KB; ++u) {
        const int j = jb + u;
        ok[u] = j < j1 && (mask == nullptr || mask[(long long)tok * key_len + j]);
        const long long k_at = (kv_base + j) * HEAD_DIM;
#pragma unroll
        for (int e = 0; e < ATTN_DPL; ++e) {
          const int d = lane + 32 * e;
          const bool in = ok[u] && d < HEAD_DIM;
          kv[u][e] = in ? L(kc, k_at + d) : 0.f;
          vv[u][e] = in ? L(vc, k_at + d) : 0.f;
        }
      }
#pragma unroll
      for (int u = 0; u < ATTN_KB; ++u) {
        if (!ok[u]) continue;  // uniform across the warp
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < ATTN_DPL; ++e) s = fmaf(qv[e], kv[u][e], s);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int e = 0; e < ATTN_DPL; ++e) acc[e] = fmaf(acc[e], corr, p * vv[u][e]);
        m = m_new;
      }
    }
    float* out = ws + ((((long long)b * HEADS + hq) * seq_len + tok) * chunks + c) * (HEAD_DIM + 2);
    if (lane == 0) out[0] = m, out[1] = l;
#pragma unroll
    for (int e = 0; e < ATTN_DPL; ++e) {
      const int d = lane + 32 * e;
      if (d < HEAD_DIM) out[2 + d] = acc[e];
    }
  }
}

// Combine: grid (batch * seq_len * HEADS), HEAD_THREADS threads (one a head
// dim): o = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c over the chunks
// that attended to a key, into o [batch, seq_len, HEADS, HEAD_DIM] (the
// layout o_proj reads); a row that attended to nothing gets 0.
extern "C" __global__ void __launch_bounds__(HEAD_THREADS)
dice_sdar_attn_combine(const float* ws, T* o, int seq_len, int chunks) {
  const long long row = blockIdx.x;  // (b * seq_len + tok) * HEADS + hq
  const int d = threadIdx.x;
  if (d >= HEAD_DIM) return;
  const long long hq = row % HEADS, bt = row / HEADS, tok = bt % seq_len, b = bt / seq_len;
  const float* base = ws + (((b * HEADS + hq) * seq_len + tok) * chunks) * (HEAD_DIM + 2);
  float mx = __int_as_float(0xff800000u);
  for (int c = 0; c < chunks; ++c) {
    const float* p = base + (long long)c * (HEAD_DIM + 2);
    if (p[1] > 0.f) mx = fmaxf(mx, p[0]);
  }
  float num = 0.f, den = 0.f;
  for (int c = 0; c < chunks; ++c) {
    const float* p = base + (long long)c * (HEAD_DIM + 2);
    if (!(p[1] > 0.f)) continue;
    const float w = expf(p[0] - mx);
    den += w * p[1];
    num += w * p[2 + d];
  }
  o[row * HEAD_DIM + d] = dice_from_float(den > 0.f ? num / den : 0.f);
}

// grid (rows, ceil(INTER / SILU_THREADS)): out = silu(gate) * up.
extern "C" __global__ void __launch_bounds__(SILU_THREADS)
dice_sdar_silu_mul(const T* gate_up, T* out) {
  const long row = blockIdx.x;
  const int j = blockIdx.y * SILU_THREADS + threadIdx.x;
  if (j >= INTER) return;
  const float g = L(gate_up, row * 2L * INTER + j), u = L(gate_up, row * 2L * INTER + INTER + j);
  out[row * (long)INTER + j] = dice_from_float(R(g / (1.f + expf(-g))) * u);
}
)CUDA";

Status CudaFail(const CudaDriver* d, const char* call, int rc) {
  return Status(StatusCode::kCudaError, "SDAR fused kernels: " + d->ErrorText(call, rc));
}

// The skinny GEMMs (templates/gemv.h stream form): projection p, rows bucket
// b (kGemvRows) is kernel dice_sdar_gemv_<p>_m<rows>.
constexpr int kGemvRows[] = {4, 8, 16};
constexpr const char* kGemvNames[] = {"qkv", "o", "gate_up", "down"};

std::vector<tmpl::StreamGemvSpec> GemvSpecs(const SdarFusedShape& s) {
  const ir::DType dt = s.dtype == FusedDtype::kBF16 ? ir::DType::kBFloat16 : ir::DType::kFloat16;
  const int64_t qkv = (s.heads + 2 * s.kv_heads) * s.head_dim;
  const int64_t nk[4][2] = {{qkv, s.hidden}, {s.hidden, s.heads * s.head_dim}, {s.intermediate, s.hidden},
                            {s.hidden, s.intermediate}};
  std::vector<tmpl::StreamGemvSpec> out;
  for (int p = 0; p < 4; ++p) {
    for (int rows : kGemvRows) {
      tmpl::StreamGemvSpec g;
      g.m = rows, g.n = nk[p][0], g.k = nk[p][1], g.dtype = dt, g.silu_mul = p == 2, g.x_direct = s.gemv_direct;
      out.push_back(g);
    }
  }
  return out;
}

std::string GemvName(size_t i) {
  return std::string("dice_sdar_gemv_") + kGemvNames[i / 3] + "_m" + std::to_string(kGemvRows[i % 3]);
}

}  // namespace

Status CheckFusedShape(const SdarFusedShape& s) {
  auto bad = [](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused kernels do not fit this model: " + why);
  };
  if (s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.intermediate < 1) {
    return bad("every size must be >= 1");
  }
  if (s.head_dim % 2 != 0 || s.head_dim > 1024) {
    return bad("head_dim " + std::to_string(s.head_dim) + " must be even and <= 1024");
  }
  if (s.hidden > 32768) return bad("hidden_size " + std::to_string(s.hidden) + " exceeds 32768");
  if (s.heads % s.kv_heads != 0) {
    return bad("num_attention_heads " + std::to_string(s.heads) + " is not a multiple of num_key_value_heads " +
               std::to_string(s.kv_heads));
  }
  if (!(s.eps > 0)) return bad("rms_norm_eps must be > 0");
  return Status::Ok();
}

std::vector<std::string> SdarFusedKernelNames() {
  return {"dice_sdar_rmsnorm",   "dice_sdar_add_rmsnorm",  "dice_sdar_qk_norm_rope",
          "dice_sdar_silu_mul",  "dice_sdar_rmsnorm_s",    "dice_sdar_add_rmsnorm_s",
          "dice_sdar_attn_partial", "dice_sdar_attn_combine", "dice_sdar_qk_norm_rope_w"};
}

std::string SdarFusedSource(const SdarFusedShape& s) {
  const unsigned nt = NormThreads(s);
  std::ostringstream o;
  o.precision(17);
  o << "// SDAR fused elementwise kernels (dice/generator/sdar_fused_kernels.h)\n"
    << "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
    << "typedef " << TypeName(s.dtype) << " T;\n";
  switch (s.dtype) {
    case FusedDtype::kF32:
      o << "__device__ __forceinline__ float dice_to_float(float v) { return v; }\n"
        << "__device__ __forceinline__ float dice_from_float(float v) { return v; }\n";
      break;
    case FusedDtype::kBF16:
      o << "__device__ __forceinline__ float dice_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }\n"
        << "__device__ __forceinline__ __nv_bfloat16 dice_from_float(float v) { return __float2bfloat16_rn(v); }\n";
      break;
    case FusedDtype::kF16:
      o << "__device__ __forceinline__ float dice_to_float(__half v) { return __half2float(v); }\n"
        << "__device__ __forceinline__ __half dice_from_float(float v) { return __float2half_rn(v); }\n";
      break;
  }
  o << "#define HIDDEN " << s.hidden << "\n#define HEADS " << s.heads << "\n#define KV_HEADS " << s.kv_heads
    << "\n#define HEAD_DIM " << s.head_dim << "\n#define INTER " << s.intermediate << "\n#define EPS "
    << static_cast<float>(s.eps) << "f\n#define NORM_THREADS " << nt << "\n#define NORM_VEC "
    << NormVec(s) << "\n#define HEAD_THREADS " << HeadThreads(s.head_dim) << "\n#define SILU_THREADS "
    << kSiluThreads << "\n#define ATTN_WARPS " << kAttnWarps << "\n#define QK_WARPS " << sdar_qk::kWarpsPerBlock
    << "\n#define QK_EPL " << std::max<int64_t>(1, s.head_dim / 32) << "\n"
    << kBody << sdar_qk::kWarpBody;
  return o.str();
}

Expected<std::unique_ptr<SdarFusedKernels>> SdarFusedKernels::Build(const SdarFusedShape& shape,
                                                                   const std::string& arch, int ordinal) {
  DICE_RETURN_IF_ERROR(CheckFusedShape(shape));
  Candidate c;
  c.origin = "sdar:fused_elementwise";
  c.source = SdarFusedSource(shape);
  for (const auto& name : SdarFusedKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
  std::string target = arch;
  if (target.empty()) {
    auto info = runtime::QueryDevice(ordinal);
    if (!info.ok()) return info.status();
    target = info->arch;
  }
  auto compiled = runtime::CompileCandidate(c, target);
  if (!compiled.ok()) return compiled.status();
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  const CudaDriver* d = *driver;
  runtime::CUcontext_t ctx = nullptr;
  if (int rc = d->cuCtxGetCurrent(&ctx); rc != 0) return CudaFail(d, "cuCtxGetCurrent", rc);
  if (ctx == nullptr) {
    runtime::CUdevice_t dev = 0;
    if (int rc = d->cuDeviceGet(&dev, ordinal); rc != 0) return CudaFail(d, "cuDeviceGet", rc);
    if (int rc = d->cuDevicePrimaryCtxRetain(&ctx, dev); rc != 0) return CudaFail(d, "cuDevicePrimaryCtxRetain", rc);
    if (int rc = d->cuCtxSetCurrent(ctx); rc != 0) return CudaFail(d, "cuCtxSetCurrent", rc);
  }
  std::unique_ptr<SdarFusedKernels> k(new SdarFusedKernels());
  k->shape_ = shape;
  k->driver_ = d;
  k->norm_threads_ = NormThreads(shape);
  k->head_threads_ = HeadThreads(shape.head_dim);
  k->compile_ms_ = compiled->compile_ms;
  runtime::CUmodule_t module = nullptr;
  if (int rc = d->cuModuleLoadData(&module, compiled->cubin.data()); rc != 0) return CudaFail(d, "cuModuleLoadData", rc);
  k->module_ = module;
  for (const auto& name : SdarFusedKernelNames()) {
    runtime::CUfunction_t f = nullptr;
    if (int rc = d->cuModuleGetFunction(&f, module, name.c_str()); rc != 0) {
      return CudaFail(d, ("cuModuleGetFunction " + name).c_str(), rc);
    }
    k->functions_.push_back(f);
  }
  DICE_RETURN_IF_ERROR(k->BuildGemv(target));
  return k;
}

std::string SdarGemvSource(const SdarFusedShape& shape) {
  if (shape.dtype == FusedDtype::kF32) return "";
  const auto specs = GemvSpecs(shape);
  for (const auto& g : specs) {
    if (!tmpl::CheckStreamGemv(g).ok()) return "";
  }
  std::string src = "// SDAR skinny GEMMs: the gemv template family's stream form (templates/gemv.h)\n" +
                    tmpl::StreamGemvPrelude(specs[0].dtype, /*identity_epilogue=*/true);
  for (size_t i = 0; i < specs.size(); ++i) src += tmpl::StreamGemvInstance(specs[i], GemvName(i), true);
  return src;
}

std::vector<std::string> SdarGemvKernelNames() {
  std::vector<std::string> out;
  for (size_t i = 0; i < 4 * std::size(kGemvRows); ++i) out.push_back(GemvName(i));
  return out;
}

Status SdarFusedKernels::BuildGemv(const std::string& target) {
  if (!shape_.skinny_gemv) {
    gemv_note_ = "skinny GEMMs off (skinny_gemv)";
    return Status::Ok();
  }
  if (shape_.dtype == FusedDtype::kF32) {
    gemv_note_ = "skinny GEMMs serve bf16 and f16 only";
    return Status::Ok();
  }
  Candidate c;
  c.origin = "sdar:skinny_gemv";
  c.source = SdarGemvSource(shape_);
  if (c.source.empty()) {
    gemv_note_ = "skinny GEMMs do not fit this model (a row of K elements is no multiple of 16 bytes)";
    return Status::Ok();
  }
  for (const auto& name : SdarGemvKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
  auto compiled = runtime::CompileCandidate(c, target);
  if (!compiled.ok()) return compiled.status();
  compile_ms_ += compiled->compile_ms;
  const auto* d = static_cast<const CudaDriver*>(driver_);
  runtime::CUmodule_t module = nullptr;
  if (int rc = d->cuModuleLoadData(&module, compiled->cubin.data()); rc != 0) return CudaFail(d, "cuModuleLoadData", rc);
  gemv_module_ = module;
  const auto specs = GemvSpecs(shape_);
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string name = GemvName(i);
    runtime::CUfunction_t f = nullptr;
    if (int rc = d->cuModuleGetFunction(&f, module, name.c_str()); rc != 0) {
      return CudaFail(d, ("cuModuleGetFunction " + name).c_str(), rc);
    }
    const KernelLaunch l = tmpl::StreamGemvLaunch(specs[i], name);
    gemv_.push_back(GemvKernel{f, l.grid[0], l.block[0]});
  }
  gemv_note_.clear();
  return Status::Ok();
}

Status SdarFusedKernels::Gemv(SdarGemv which, const void* x, const void* w, void* out, int64_t rows,
                              void* stream) const {
  if (gemv_module_ == nullptr) return Status(StatusCode::kUnsupported, "SDAR skinny GEMM: " + gemv_note_);
  if (rows < 1 || rows > 16) {
    return Status(StatusCode::kUnsupported, "SDAR skinny GEMM: " + std::to_string(rows) + " rows (1..16)");
  }
  if (!Aligned16(x) || !Aligned16(w) || !Aligned16(out)) {
    return Status(StatusCode::kUnsupported, "SDAR skinny GEMM: a pointer is not 16-byte aligned");
  }
  const size_t bucket = rows <= 4 ? 0 : rows <= 8 ? 1 : 2;
  const GemvKernel& g = gemv_[static_cast<size_t>(which) * 3 + bucket];
  int r = static_cast<int>(rows);
  void* args[] = {&x, &w, &out, &r};
  const auto* d = static_cast<const CudaDriver*>(driver_);
  const int rc = d->cuLaunchKernel(static_cast<runtime::CUfunction_t>(g.function), g.grid, 1, 1, g.block, 1, 1, 0,
                                   static_cast<runtime::CUstream_t>(stream), args, nullptr);
  if (rc != 0) return CudaFail(d, "cuLaunchKernel", rc);
  return Status::Ok();
}

SdarFusedKernels::~SdarFusedKernels() {
  const auto* d = static_cast<const CudaDriver*>(driver_);
  if (module_ != nullptr) d->cuModuleUnload(static_cast<runtime::CUmodule_t>(module_));
  if (gemv_module_ != nullptr) d->cuModuleUnload(static_cast<runtime::CUmodule_t>(gemv_module_));
}

Status SdarFusedKernels::Launch(int which, unsigned grid_x, unsigned grid_y, unsigned block, void** args,
                                void* stream) const {
  const auto* d = static_cast<const CudaDriver*>(driver_);
  const int rc = d->cuLaunchKernel(static_cast<runtime::CUfunction_t>(functions_[which]), grid_x, grid_y, 1, block, 1,
                                   1, 0, static_cast<runtime::CUstream_t>(stream), args, nullptr);
  if (rc != 0) return CudaFail(d, "cuLaunchKernel", rc);
  return Status::Ok();
}

Status SdarFusedKernels::AddRmsNorm(const void* x, const void* delta, const void* w, void* sum, void* norm,
                                    int64_t rows, void* stream) const {
  if (rows < 1 || rows > 0x7fffffff) return Status(StatusCode::kInvalidArgument, "SDAR fused AddRmsNorm: bad rows");
  // The 16-byte forms need every row start aligned: the base pointers (rows
  // of hidden elements stay aligned when hidden is a multiple of NORM_VEC).
  const bool vec = Aligned16(x) && Aligned16(w) && Aligned16(norm) &&
                   (delta == nullptr || (Aligned16(delta) && Aligned16(sum)));
  if (delta == nullptr) {
    void* args[] = {&x, &w, &norm};
    return Launch(vec ? kRmsNorm : kRmsNormScalar, static_cast<unsigned>(rows), 1, norm_threads_, args, stream);
  }
  void* args[] = {&x, &delta, &w, &sum, &norm};
  return Launch(vec ? kAddRmsNorm : kAddRmsNormScalar, static_cast<unsigned>(rows), 1, norm_threads_, args, stream);
}

Status SdarFusedKernels::QkNormRope(const void* qkv, const void* q_w, const void* k_w, const void* cos,
                                    const void* sin, void* q_out, void* k_out, int64_t rows, int64_t seq_len,
                                    void* stream, const KvCacheWrite* kv, bool q_heads_major) const {
  if (rows < 1 || rows > 0x7fffffff || seq_len < 1 || rows % seq_len != 0) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused QkNormRope: rows " + std::to_string(rows) +
                                                    " is not a positive multiple of seq_len " +
                                                    std::to_string(seq_len));
  }
  if (kv != nullptr && (kv->k_cache == nullptr || kv->v_cache == nullptr || kv->capacity < 1 || kv->start < 0)) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused QkNormRope: the KV cache write needs both caches, "
                                                "capacity >= 1 and start >= 0");
  }
  if (kv == nullptr && k_out == nullptr) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused QkNormRope: k_out is null and no KV cache is given");
  }
  int len = static_cast<int>(seq_len);
  void* k_cache = kv ? kv->k_cache : nullptr;
  void* v_cache = kv ? kv->v_cache : nullptr;
  const void* slots = kv ? static_cast<const void*>(kv->slots) : nullptr;
  long long start = kv ? kv->start : 0, capacity = kv ? kv->capacity : 0;
  int heads_major = q_heads_major ? 1 : 0;
  void* args[] = {&qkv,     &q_w,     &k_w,   &cos,  &sin,     &q_out,    &k_out,
                  &len,     &k_cache, &v_cache, &slots, &start, &capacity, &heads_major};
  const int64_t heads = shape_.heads + shape_.kv_heads + (kv ? shape_.kv_heads : 0);
  // The warp form (sdar_fused_qk.h) when the head_dim fits it and every
  // pointer has its lanes' alignment; else the block form.
  const unsigned align = sdar_qk::PackAlignment(shape_.head_dim, shape_.dtype == FusedDtype::kF32 ? 4 : 2);
  bool warp = shape_.warp_qk && sdar_qk::WarpFits(shape_.head_dim);
  for (const void* p : {qkv, q_w, k_w, cos, sin, static_cast<const void*>(q_out), static_cast<const void*>(k_out),
                        static_cast<const void*>(k_cache), static_cast<const void*>(v_cache)}) {
    warp = warp && reinterpret_cast<uintptr_t>(p) % align == 0;
  }
  if (warp) {
    const unsigned per = sdar_qk::kWarpsPerBlock;
    return Launch(kQkNormRopeWarp, static_cast<unsigned>(rows), static_cast<unsigned>((heads + per - 1) / per),
                  per * 32, args, stream);
  }
  return Launch(kQkNormRope, static_cast<unsigned>(rows), static_cast<unsigned>(heads), head_threads_, args, stream);
}

int64_t SdarFusedKernels::AttentionChunk(int64_t batch, int64_t key_len) const {
  // Keys a block: enough blocks (chunks x kv_heads x batch) for about two
  // waves of 132 SMs, 16..256 keys, a power of two.
  const int64_t units = std::max<int64_t>(1, batch) * std::max<int64_t>(1, shape_.kv_heads);
  int64_t chunk = 16;
  while (chunk < 256 && (key_len + chunk - 1) / chunk * units > 264) chunk *= 2;
  return chunk;
}

int64_t SdarFusedKernels::AttentionWorkspaceFloats(int64_t batch, int64_t seq_len, int64_t key_len) const {
  const int64_t chunks = (key_len + AttentionChunk(batch, key_len) - 1) / AttentionChunk(batch, key_len);
  return batch * shape_.heads * seq_len * chunks * (shape_.head_dim + 2);
}

Status SdarFusedKernels::DecodeAttention(const void* q, const void* k_cache, const void* v_cache, const void* mask,
                                         void* out, void* workspace, int64_t batch, int64_t seq_len, int64_t key_len,
                                         int64_t capacity, void* stream) const {
  const int64_t g = shape_.heads / shape_.kv_heads;
  if (batch < 1 || batch > 65535 || seq_len < 1 || seq_len * g > 64 || key_len < 1 || key_len > capacity ||
      shape_.head_dim > 256) {
    return Status(StatusCode::kInvalidArgument, "SDAR split-KV attention: batch " + std::to_string(batch) +
                                                    ", " + std::to_string(seq_len) + " tokens x " +
                                                    std::to_string(g) + " heads a KV head (<= 64), key_len " +
                                                    std::to_string(key_len) + " of " + std::to_string(capacity) +
                                                    ", head_dim <= 256");
  }
  const int64_t chunk = AttentionChunk(batch, key_len);
  int chunks = static_cast<int>((key_len + chunk - 1) / chunk);
  int len = static_cast<int>(seq_len), keys = static_cast<int>(key_len), ch = static_cast<int>(chunk);
  long long cap = capacity;
  float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape_.head_dim)));
  const auto* d = static_cast<const CudaDriver*>(driver_);
  void* pargs[] = {&q, &k_cache, &v_cache, &mask, &workspace, &len, &keys, &cap, &ch, &scale};
  int rc = d->cuLaunchKernel(static_cast<runtime::CUfunction_t>(functions_[kAttnPartial]),
                             static_cast<unsigned>(chunks), static_cast<unsigned>(shape_.kv_heads),
                             static_cast<unsigned>(batch), kAttnWarps * 32, 1, 1, 0,
                             static_cast<runtime::CUstream_t>(stream), pargs, nullptr);
  if (rc != 0) return CudaFail(d, "cuLaunchKernel", rc);
  const void* ws = workspace;
  void* cargs[] = {&ws, &out, &len, &chunks};
  return Launch(kAttnCombine, static_cast<unsigned>(batch * seq_len * shape_.heads), 1, head_threads_, cargs,
                stream);
}

Status SdarFusedKernels::SiluMul(const void* gate_up, void* out, int64_t rows, void* stream) const {
  if (rows < 1 || rows > 0x7fffffff) return Status(StatusCode::kInvalidArgument, "SDAR fused SiluMul: bad rows");
  void* args[] = {&gate_up, &out};
  const auto chunks = static_cast<unsigned>((shape_.intermediate + kSiluThreads - 1) / kSiluThreads);
  return Launch(kSiluMul, static_cast<unsigned>(rows), chunks, kSiluThreads, args, stream);
}

}  // namespace dice::generator
