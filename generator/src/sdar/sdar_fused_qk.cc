// dice_sdar_qk_norm_rope_w: see sdar_fused_qk.h.
#include "sdar_fused_qk.h"

#include <algorithm>

namespace dice::generator::sdar_qk {

const char* const kWarpBody = R"CUDA(
// QK_EPL elements of one lane, moved by one load or store: aligned to the
// largest power of two (at most 16) dividing their size.
constexpr int QkAlign(int bytes) {
  return bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : bytes % 2 == 0 ? 2 : 1;
}
template <int V>
struct alignas(QkAlign(V * (int)sizeof(T))) QkPack { T h[V]; };

// grid (rows, ceil(heads' / QK_WARPS)), QK_WARPS warps; heads' = HEADS +
// KV_HEADS (+ KV_HEADS when v_cache: those heads copy a value into it).
// Arguments as dice_sdar_qk_norm_rope. q_heads_major: q_out is [batch,
// HEADS, seq_len, HEAD_DIM] instead of [rows, HEADS, HEAD_DIM].
extern "C" __global__ void __launch_bounds__(QK_WARPS * 32)
dice_sdar_qk_norm_rope_w(const T* qkv, const T* qw, const T* kw, const T* cos_t, const T* sin_t, T* q_out,
                         T* k_out, int seq_len, T* k_cache, T* v_cache, const long long* slots, long long start,
                         long long capacity, int q_heads_major) {
  typedef QkPack<QK_EPL> P;
  const long row = blockIdx.x;
  const int head = blockIdx.y * QK_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = lane * QK_EPL;
  if (head >= HEADS + KV_HEADS + (v_cache != nullptr ? KV_HEADS : 0)) return;  // whole warps
  const long in = row * (long)((HEADS + 2 * KV_HEADS) * HEAD_DIM) + (long)head * HEAD_DIM + t;
  const P raw = *reinterpret_cast<const P*>(qkv + in);
  if (head >= HEADS + KV_HEADS) {  // a value head: into v_cache unchanged
    const long long at = CacheAt(row, head - HEADS - KV_HEADS, t, seq_len, slots, start, capacity);
    if (at >= 0) *reinterpret_cast<P*>(v_cache + at) = raw;
    return;
  }
  const bool is_q = head < HEADS;
  const P wp = *reinterpret_cast<const P*>((is_q ? qw : kw) + t);
  const long tab = (row % seq_len) * HEAD_DIM + t;
  const P cp = *reinterpret_cast<const P*>(cos_t + tab), sp = *reinterpret_cast<const P*>(sin_t + tab);
  float v[QK_EPL], ss = 0.f;
#pragma unroll
  for (int e = 0; e < QK_EPL; ++e) {
    v[e] = dice_to_float(raw.h[e]);
    ss += v[e] * v[e];
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss / (float)HEAD_DIM + EPS);
  P out;
#pragma unroll
  for (int e = 0; e < QK_EPL; ++e) {
    const float n = R(dice_to_float(wp.h[e]) * R(v[e] * r));
    const float other = __shfl_xor_sync(0xffffffffu, n, 16);  // element t +- HEAD_DIM / 2
    const float rot = lane < 16 ? -other : other;
    out.h[e] = dice_from_float(R(R(n * dice_to_float(cp.h[e])) + R(rot * dice_to_float(sp.h[e]))));
  }
  if (is_q) {
    *reinterpret_cast<P*>(q_out + QOutAt(row, head, seq_len, q_heads_major) + t) = out;
    return;
  }
  if (k_out != nullptr) *reinterpret_cast<P*>(k_out + (row * KV_HEADS + (head - HEADS)) * (long)HEAD_DIM + t) = out;
  if (k_cache != nullptr) {
    const long long at = CacheAt(row, head - HEADS, t, seq_len, slots, start, capacity);
    if (at >= 0) *reinterpret_cast<P*>(k_cache + at) = out;
  }
}
)CUDA";

bool WarpFits(int64_t head_dim) { return head_dim >= 32 && head_dim % 32 == 0 && head_dim <= 256; }

unsigned PackAlignment(int64_t head_dim, int element_bytes) {
  const int64_t bytes = std::max<int64_t>(1, head_dim / 32) * element_bytes;
  for (unsigned a : {16u, 8u, 4u, 2u}) {
    if (bytes % a == 0) return a;
  }
  return 1;
}

}  // namespace dice::generator::sdar_qk
