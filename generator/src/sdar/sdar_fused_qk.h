// The warp-per-head form of the SDAR decoder's q/k RMSNorm + RoPE kernel
// (dice_sdar_qk_norm_rope_w), part of SdarFusedSource
// (dice/generator/sdar_fused_kernels.h). Internal to generator/src/sdar.
//
// Why a second form: the block form (one block of head_dim threads per row
// and head, a shared-memory reduction and a barrier) ran at ~0.5 TB/s on the
// H100 at SDAR-4B batch 128 (21 µs a layer, PERF.md "Session 28"). Here one
// warp takes one head: each lane loads head_dim / 32 consecutive elements
// (one 8- or 16-byte load), the sum of squares is a warp shuffle, and the
// RoPE partner element t ± head_dim / 2 sits in lane ^ 16. QK_WARPS heads a
// block. Same arguments and per-element formula as the block form; only the
// order of the float32 sum of squares differs.
#ifndef DICE_GENERATOR_SRC_SDAR_SDAR_FUSED_QK_H_
#define DICE_GENERATOR_SRC_SDAR_SDAR_FUSED_QK_H_

#include <cstdint>

namespace dice::generator::sdar_qk {

/// Heads (warps) a block of dice_sdar_qk_norm_rope_w.
constexpr unsigned kWarpsPerBlock = 4;

/// The kernel's CUDA source. It follows SdarFusedSource's fixed body, whose
/// helpers (L, R, CacheAt, QOutAt) and #defines (T, HEADS, KV_HEADS, HEAD_DIM, EPS)
/// it uses, and needs QK_WARPS and QK_EPL (= max(1, HEAD_DIM / 32)) defined.
extern const char* const kWarpBody;

/// Whether the warp form computes this head_dim: a multiple of 32, at most
/// 256 (8 elements a lane).
bool WarpFits(int64_t head_dim);

/// The alignment, in bytes, every pointer the warp form loads or stores
/// through must have: the largest power of two (at most 16) dividing the
/// size of one lane's elements (max(1, head_dim / 32) of element_bytes).
unsigned PackAlignment(int64_t head_dim, int element_bytes);

}  // namespace dice::generator::sdar_qk

#endif  // DICE_GENERATOR_SRC_SDAR_SDAR_FUSED_QK_H_
