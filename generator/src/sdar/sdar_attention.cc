// Split-KV decode attention for the SDAR step forward: see
// dice/generator/sdar_attention.h. Torch-free on purpose (LAYERS.md): only
// the runtime's public compiler and driver headers.
#include "dice/generator/sdar_attention.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dice/core/candidate.h"
#include "dice/generator/sdar_cuda_module.h"
#include "../templates/emit.h"

namespace dice::generator {
namespace {

constexpr unsigned kPartialThreads = 256;
constexpr unsigned kCombineWarps = 4;
constexpr int64_t kRowTile = 16;          // query rows a partial CTA scores at once
constexpr int64_t kSmemBudget = 48 * 1024 - 256;  // with the static svis: no opt-in needed
constexpr int64_t kMinChunkKeys = 16;

int64_t ElementBytes(FusedDtype d) { return d == FusedDtype::kF32 ? 4 : 2; }

// Shared memory of a partial CTA over `chunk` keys: K and V tiles (rows
// padded by one 16-byte piece: conflict-free 16-byte reads across keys),
// the float query tile and the float score tile.
int64_t SmemBytes(const SdarAttentionShape& s, int64_t chunk) {
  const int64_t eb = ElementBytes(s.dtype);
  const int64_t stride = s.head_dim + 16 / eb;
  return 2 * chunk * stride * eb + kRowTile * s.head_dim * 4 + kRowTile * chunk * 4;
}

const char* TypeName(FusedDtype d) {
  return d == FusedDtype::kF32 ? "float" : d == FusedDtype::kBF16 ? "__nv_bfloat16" : "__half";
}

// The fixed part of the source; the shape arrives as the #defines before it.
// ws layout (float): acc [B * HEADS * rows * chunks][HEAD_DIM], then
// (m, l) [B * HEADS * rows * chunks][2], row index ((b * HEADS + hq) * rows
// + tok) * chunks + c; m in log2 units (scores carry log2(e)).
constexpr const char* kBody = R"CUDA(
constexpr int G = HEADS / KV_HEADS;
constexpr int VEC = 16 / sizeof(T);      // elements of one 16-byte load
constexpr int DV = HEAD_DIM / VEC;       // 16-byte pieces of a head row
constexpr int KSTRIDE = HEAD_DIM + VEC;  // padded shared-memory row, elements
constexpr int NT = PARTIAL_THREADS;
constexpr int KV_ITERS = (MAX_CHUNK * DV + NT - 1) / NT;
#define NEG_INF (-DICE_INF)

// Keys [0, result) token `tok` sees: BlockCausalMask over key positions
// 0..key_len-1 (floor division; a negative position sees none).
__device__ __forceinline__ int Visible(const long long* positions, int tok, int key_len, long long block) {
  if (positions == nullptr) return key_len;
  const long long p = positions[tok];
  if (p < 0) return 0;
  return (int)min((long long)key_len, (p / block + 1) * block);
}

// grid (batch * KV_HEADS, chunks), NT threads, dynamic shared memory for
// `chunk` keys. Rows r < G * rows of KV head kvh: query head kvh * G + r /
// rows, token r % rows, ROW_TILE at a time.
extern "C" __global__ void __launch_bounds__(PARTIAL_THREADS)
dice_sdar_attn_split_partial(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                             const long long* __restrict__ positions, long long block, float* __restrict__ ws,
                             int rows, int key_len, long long capacity, int chunk, float qscale) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + chunk * KSTRIDE;
  float* sq = reinterpret_cast<float*>(sv + chunk * KSTRIDE);  // [ROW_TILE][HEAD_DIM]
  float* ss = sq + ROW_TILE * HEAD_DIM;                         // [ROW_TILE][chunk]
  __shared__ int svis[MAX_ROWS];
  const int b = blockIdx.x / KV_HEADS, kvh = blockIdx.x % KV_HEADS, c = blockIdx.y, chunks = gridDim.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int total = G * rows, j0 = c * chunk;
  const long long ws_rows = (long long)gridDim.x / KV_HEADS * HEADS * rows * chunks;
  float2* ml = reinterpret_cast<float2*>(ws + ws_rows * HEAD_DIM);
  if (tid < rows) svis[tid] = Visible(positions, tid, key_len, block);
  __syncthreads();
  int vmax = 0;
  for (int t = 0; t < rows; ++t) vmax = max(vmax, svis[t]);
  const int live = max(0, min(min(chunk, key_len - j0), vmax - j0));  // keys of the chunk any row sees
  auto at = [&](int r) {  // workspace row of tile row r
    return (((long long)b * HEADS + kvh * G + r / rows) * rows + r % rows) * chunks + c;
  };
  if (live == 0) {
    for (int r = tid; r < total; r += NT) ml[at(r)] = make_float2(NEG_INF, 0.f);
    return;
  }
  {  // Stage the chunk's keys and values: every load issued before a store.
    const long long base = ((long long)b * KV_HEADS + kvh) * capacity + j0;
    uint4 kr[KV_ITERS], vr[KV_ITERS];
#pragma unroll
    for (int it = 0; it < KV_ITERS; ++it) {
      const int i = tid + it * NT;
      if (i < live * DV) {
        const long long g = (base + i / DV) * HEAD_DIM + (i % DV) * VEC;
        kr[it] = *reinterpret_cast<const uint4*>(kc + g);
        vr[it] = *reinterpret_cast<const uint4*>(vc + g);
      }
    }
#pragma unroll
    for (int it = 0; it < KV_ITERS; ++it) {
      const int i = tid + it * NT;
      if (i < live * DV) {
        const int o = (i / DV) * KSTRIDE + (i % DV) * VEC;
        *reinterpret_cast<uint4*>(sk + o) = kr[it];
        *reinterpret_cast<uint4*>(sv + o) = vr[it];
      }
    }
  }
  for (int r0 = 0; r0 < total; r0 += ROW_TILE) {
    const int nr = min(ROW_TILE, total - r0);
    for (int i = tid; i < nr * DV; i += NT) {  // the query tile, pre-scaled
      const int r = r0 + i / DV, piece = i % DV;
      float v[VEC];
      dice_ld16(q + (((long long)b * rows + r % rows) * HEADS + kvh * G + r / rows) * HEAD_DIM + piece * VEC, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sq[(i / DV) * HEAD_DIM + piece * VEC + e] = v[e] * qscale;
    }
    __syncthreads();
    for (int i = tid; i < nr * live; i += NT) {  // scores (log2 units); -inf where masked
      const int rr = i / live, key = i % live;
      float s = NEG_INF;
      if (j0 + key < svis[(r0 + rr) % rows]) {
        const T* kr = sk + key * KSTRIDE;
        const float* qr = sq + rr * HEAD_DIM;
        s = 0.f;
#pragma unroll 4
        for (int piece = 0; piece < DV; ++piece) {
          float kv[VEC];
          dice_ld16(kr + piece * VEC, kv);
#pragma unroll
          for (int e = 0; e < VEC; ++e) s = fmaf(qr[piece * VEC + e], kv[e], s);
        }
      }
      ss[rr * chunk + key] = s;
    }
    __syncthreads();
    for (int rr = warp; rr < nr; rr += NT / 32) {  // chunk max and sum; scores become 2^(s - m)
      float m = NEG_INF;
      for (int key = lane; key < live; key += 32) m = fmaxf(m, ss[rr * chunk + key]);
      m = dice_warp_reduce<1>(m);
      float l = 0.f;
      for (int key = lane; key < live; key += 32) {
        const float p = m == NEG_INF ? 0.f : exp2f(ss[rr * chunk + key] - m);
        ss[rr * chunk + key] = p;
        l += p;
      }
      l = dice_warp_reduce<0>(l);
      if (lane == 0) ml[at(r0 + rr)] = make_float2(m, l);
    }
    __syncthreads();
    for (int i = tid; i < nr * DV; i += NT) {  // acc = P V over the live keys
      const int rr = i / DV, piece = i % DV;
      float acc[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = 0.f;
      for (int key = 0; key < live; ++key) {
        const float p = ss[rr * chunk + key];
        float v[VEC];
        dice_ld16(sv + key * KSTRIDE + piece * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = fmaf(p, v[e], acc[e]);
      }
      float4* out = reinterpret_cast<float4*>(ws + at(r0 + rr) * HEAD_DIM + piece * VEC);
#pragma unroll
      for (int e = 0; e < VEC / 4; ++e) out[e] = make_float4(acc[4 * e], acc[4 * e + 1], acc[4 * e + 2], acc[4 * e + 3]);
    }
    __syncthreads();  // the next tile overwrites sq and ss
  }
}

// grid (ceil(batch * rows * HEADS / COMBINE_WARPS)), one warp an output row
// (b * rows + tok) * HEADS + hq of o [batch, rows, HEADS, HEAD_DIM]; chunks
// with l = 0 (no key seen) are skipped, never read.
constexpr int DPL = (HEAD_DIM + 31) / 32;
extern "C" __global__ void __launch_bounds__(COMBINE_WARPS * 32)
dice_sdar_attn_split_combine(const float* __restrict__ ws, T* __restrict__ o, int total_rows, int rows, int chunks) {
  const int row = blockIdx.x * COMBINE_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= total_rows) return;
  const int hq = row % HEADS, bt = row / HEADS, tok = bt % rows, b = bt / rows;
  const long long wr = (((long long)b * HEADS + hq) * rows + tok) * chunks;
  const float* acc = ws + wr * HEAD_DIM;
  const float2* ml = reinterpret_cast<const float2*>(ws + (long long)total_rows * chunks * HEAD_DIM) + wr;
  float mx = NEG_INF;
  for (int c = lane; c < chunks; c += 32) {
    const float2 v = ml[c];
    if (v.y > 0.f) mx = fmaxf(mx, v.x);
  }
  mx = dice_warp_reduce<1>(mx);
  float num[DPL], den = 0.f;
#pragma unroll
  for (int e = 0; e < DPL; ++e) num[e] = 0.f;
#pragma unroll 4
  for (int c = 0; c < chunks; ++c) {
    const float2 v = ml[c];
    if (!(v.y > 0.f)) continue;
    const float w = exp2f(v.x - mx);
    den = fmaf(w, v.y, den);
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int d = lane + 32 * e;
      if (d < HEAD_DIM) num[e] = fmaf(w, acc[(long long)c * HEAD_DIM + d], num[e]);
    }
  }
  const float inv = den > 0.f ? 1.f / den : 0.f;
#pragma unroll
  for (int e = 0; e < DPL; ++e) {
    const int d = lane + 32 * e;
    if (d < HEAD_DIM) dice_st(o + (long long)row * HEAD_DIM + d, num[e] * inv);
  }
}
)CUDA";

Status Bad(const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "SDAR split-KV attention: " + why);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status CheckAttentionShape(const SdarAttentionShape& s) {
  if (s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1) return Bad("every size must be >= 1");
  if (s.heads % s.kv_heads != 0) {
    return Bad("num_attention_heads " + std::to_string(s.heads) + " is not a multiple of num_key_value_heads " +
               std::to_string(s.kv_heads));
  }
  if (s.head_dim % 8 != 0 || s.head_dim > 256) {
    return Bad("head_dim " + std::to_string(s.head_dim) + " must be a multiple of 8 and <= 256");
  }
  return Status::Ok();
}

int64_t AttentionMaxChunkKeys(const SdarAttentionShape& s) {
  int64_t chunk = 64;
  while (chunk > 8 && SmemBytes(s, chunk) > kSmemBudget) chunk -= 8;
  return chunk;
}

std::vector<std::string> SdarAttentionKernelNames() {
  return {"dice_sdar_attn_split_partial", "dice_sdar_attn_split_combine"};
}

std::string SdarAttentionSource(const SdarAttentionShape& s) {
  std::ostringstream o;
  o << "// SDAR split-KV decode attention (dice/generator/sdar_attention.h)\n"
    << tmpl::Prelude() << "typedef " << TypeName(s.dtype) << " T;\n"
    << "#define HEADS " << s.heads << "\n#define KV_HEADS " << s.kv_heads << "\n#define HEAD_DIM " << s.head_dim
    << "\n#define MAX_CHUNK " << AttentionMaxChunkKeys(s) << "\n#define MAX_ROWS " << kSdarAttentionMaxRows
    << "\n#define ROW_TILE " << kRowTile << "\n#define PARTIAL_THREADS " << kPartialThreads
    << "\n#define COMBINE_WARPS " << kCombineWarps << "\n"
    << kBody;
  return o.str();
}

Expected<std::unique_ptr<SdarAttention>> SdarAttention::Build(const SdarAttentionShape& shape,
                                                             const std::string& arch, int ordinal) {
  DICE_RETURN_IF_ERROR(CheckAttentionShape(shape));
  Candidate c;
  c.origin = "sdar:split_kv_attention";
  c.source = SdarAttentionSource(shape);
  for (const auto& name : SdarAttentionKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
  auto module = SdarCudaModule::Build(c, arch, ordinal, "SDAR split-KV attention");
  if (!module.ok()) return module.status();
  std::unique_ptr<SdarAttention> a(new SdarAttention());
  a->shape_ = shape;
  a->module_ = std::move(*module);
  a->max_chunk_ = AttentionMaxChunkKeys(shape);
  return a;
}

SdarAttention::~SdarAttention() = default;

int64_t SdarAttention::DefaultChunks(int64_t batch, int64_t key_len) const {
  const int64_t keys = std::max<int64_t>(1, key_len);
  const int64_t units = std::max<int64_t>(1, batch) * shape_.kv_heads;
  int64_t chunks = CeilDiv(2 * static_cast<int64_t>(sm_count()), units);
  chunks = std::min(chunks, CeilDiv(keys, kMinChunkKeys));
  chunks = std::max(chunks, CeilDiv(keys, max_chunk_));
  return std::clamp<int64_t>(chunks, 1, std::min<int64_t>(keys, 65535));
}

int64_t SdarAttention::WorkspaceBytes(int64_t batch, int64_t rows, int64_t chunks) const {
  return batch * shape_.heads * rows * chunks * (shape_.head_dim + 2) * 4;
}

Status SdarAttention::Launch(const void* q, const void* k_cache, const void* v_cache, const int64_t* positions,
                             int64_t block_size, void* out, void* workspace, int64_t batch, int64_t rows,
                             int64_t key_len, int64_t capacity, int64_t chunks, void* stream) const {
  if (batch < 1 || batch > 65535) return Bad("batch " + std::to_string(batch) + " outside 1..65535");
  if (rows < 1 || rows > kSdarAttentionMaxRows) {
    return Bad(std::to_string(rows) + " query tokens a sequence, outside 1.." + std::to_string(kSdarAttentionMaxRows));
  }
  if (key_len < 1 || key_len > capacity || capacity > 0x7fffffff) {
    return Bad("key_len " + std::to_string(key_len) + " outside 1..capacity " + std::to_string(capacity));
  }
  const int64_t chunk = chunks >= 1 ? CeilDiv(key_len, chunks) : 0;
  if (chunks < 1 || chunks > std::min<int64_t>(key_len, 65535) || chunk > max_chunk_) {
    return Bad(std::to_string(chunks) + " chunks over " + std::to_string(key_len) + " keys: need 1.." +
               std::to_string(std::min<int64_t>(key_len, 65535)) + " chunks of at most " +
               std::to_string(max_chunk_) + " keys");
  }
  if (positions != nullptr && block_size < 1) return Bad("block_size must be >= 1 with positions");
  for (const void* p : {q, k_cache, v_cache, static_cast<const void*>(out), static_cast<const void*>(workspace)}) {
    if (p == nullptr || !Aligned16(p)) return Bad("a tensor pointer is null or not 16-byte aligned");
  }
  long long block = block_size, cap = capacity;
  int len = static_cast<int>(rows), keys = static_cast<int>(key_len), ck = static_cast<int>(chunk);
  int nchunks = static_cast<int>(chunks);
  float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(shape_.head_dim)));
  void* pargs[] = {&q, &k_cache, &v_cache, &positions, &block, &workspace, &len, &keys, &cap, &ck, &qscale};
  DICE_RETURN_IF_ERROR(module_->Launch(0, static_cast<unsigned>(batch * shape_.kv_heads),
                                       static_cast<unsigned>(chunks), 1, kPartialThreads,
                                       static_cast<unsigned>(SmemBytes(shape_, chunk)), pargs, stream));
  int total = static_cast<int>(batch * rows * shape_.heads);
  const void* ws = workspace;
  void* cargs[] = {&ws, &out, &total, &len, &nchunks};
  return module_->Launch(1, static_cast<unsigned>(CeilDiv(total, kCombineWarps)), 1, 1, kCombineWarps * 32, 0, cargs,
                         stream);
}

}  // namespace dice::generator
