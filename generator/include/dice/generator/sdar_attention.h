// dice/generator/sdar_attention.h — split-KV ("flash-decoding") attention
// for the SDAR decoder's CUDA-graph step forward (issue 19 item 3).
//
// Why: the step forward scores a block of L <= 16 tokens a sequence against
// the KV cache. SDPA runs it as one CTA per (sequence, KV head) row tile:
// at batch 1 that is 32 CTAs on 132 SMs, 13.4 us a layer for ~2 MB of K/V
// (H200, SDAR-4B), bound by latency. Splitting the keys into chunks gives
// batch x kv_heads x chunks CTAs that all stream at once (the flash-decoding
// scheme: partial softmax per chunk, then a log-sum-exp merge).
//
// Two kernels, CUDA C++ written for one head shape (on the templates' device
// prelude) and compiled with NVRTC at load by SdarCudaModule
// (sdar_cuda_module.h: the runtime's public compiler and driver headers). Torch-free: the
// caller hands raw device pointers and its stream.
//   dice_sdar_attn_split_partial  grid (batch * kv_heads, chunks), 256
//       threads: the g = heads / kv_heads query heads of one KV head times
//       the L tokens (g * L rows, 16 at a time) against one chunk of keys,
//       staged in shared memory; scores, chunk max m, sum l and acc = P V in
//       float32 into the workspace.
//   dice_sdar_attn_split_combine  grid (ceil(batch * L * heads / 4)), one
//       warp a row: o = sum_c 2^(m_c - M) acc_c / sum_c 2^(m_c - M) l_c.
//
// Masking: the graph form's mask is BlockCausalMask(positions, 0..capacity-1,
// block_size) (sdar_step_graph.cc SdarStepGraph::Run), true iff
// key / block_size <= positions[t] / block_size: for every query token a
// PREFIX of the cache, [0, (positions[t] / block_size + 1) * block_size).
// The kernel takes those positions (the graph's device int64 tensor) and the
// block size instead of a mask, and never reads keys past a row's prefix (a
// chunk past every row's prefix returns after writing an empty partial).
//
// Numerics: scores, softmax and accumulation in float32 (exp2 of scores
// pre-scaled by log2(e) / sqrt(head_dim)); the output is rounded once to
// the element type. Against at::scaled_dot_product_attention (tested by
// SdarAttentionGpuTest): f32 within 1e-4 absolute; bf16 and f16 within
// 2e-2 x max(1, |o|) per element (two bf16 ulps: each side rounds o once,
// and SDPA's flash kernel also rounds P to bf16 before P V, this one not).
//
// Element types f32, bf16, f16 (FusedDtype, sdar_fused_kernels.h).
// Thread-safety: Launch is const and stateless; Build must run with the
// model's device current (or none: the primary context is retained).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/generator/sdar_cuda_module.h"
#include "dice/generator/sdar_fused_kernels.h"

namespace dice::generator {

/// The head shape the attention source is written for.
struct SdarAttentionShape {
  int64_t heads = 0;     ///< num_attention_heads
  int64_t kv_heads = 0;  ///< num_key_value_heads (heads a multiple of it)
  int64_t head_dim = 0;  ///< a multiple of 8, <= 256
  FusedDtype dtype = FusedDtype::kBF16;
};

/// Most query tokens a sequence one launch takes (the step forward: one
/// block, the merged step: two).
constexpr int64_t kSdarAttentionMaxRows = 16;

/// Why `shape` does not fit the kernels, or Ok. Limits: every size >= 1,
/// heads a multiple of kv_heads, head_dim a multiple of 8 (16-byte loads)
/// and <= 256. Errors: kInvalidArgument naming the field and the limit.
Status CheckAttentionShape(const SdarAttentionShape& shape);

/// The CUDA C++ source (NVRTC, -std=c++17) of dice_sdar_attn_split_partial
/// and dice_sdar_attn_split_combine for `shape` (extern "C"; the shape is
/// compile-time, batch, rows, keys and chunks are arguments).
/// Precondition: CheckAttentionShape(shape) is Ok.
std::string SdarAttentionSource(const SdarAttentionShape& shape);

/// The kernel names SdarAttentionSource defines, partial then combine.
std::vector<std::string> SdarAttentionKernelNames();

/// Most keys one chunk (one partial CTA) takes for `shape`: the largest
/// multiple of 8 <= 64 whose K, V, query and score tiles fit 48 KiB of
/// shared memory (bf16 at head_dim 128: 64; f32 at 128: 32; f32 at 256: 8).
int64_t AttentionMaxChunkKeys(const SdarAttentionShape& shape);

/// The compiled and loaded split-KV kernels of one model (one CUDA module,
/// unloaded on destruction). Not copyable.
class SdarAttention {
 public:
  /// Checks the shape, compiles SdarAttentionSource for `arch` ("sm_90"; ""
  /// = device `ordinal`'s) and loads it on device `ordinal`. Errors: those
  /// of CheckAttentionShape; kCompileError with the NVRTC log; kNoDevice /
  /// kCudaError naming the driver call.
  static Expected<std::unique_ptr<SdarAttention>> Build(const SdarAttentionShape& shape, const std::string& arch,
                                                        int ordinal);
  ~SdarAttention();
  SdarAttention(const SdarAttention&) = delete;
  SdarAttention& operator=(const SdarAttention&) = delete;

  const SdarAttentionShape& shape() const { return shape_; }
  double compile_ms() const { return module_->compile_ms(); }
  /// Multiprocessors of the device Build loaded on (sizes DefaultChunks;
  /// 132 when the driver did not say).
  int sm_count() const { return module_->sm_count() > 0 ? module_->sm_count() : 132; }

  /// Chunks for `batch` sequences over `key_len` keys: enough CTAs
  /// (batch x kv_heads x chunks) for two a multiprocessor, at least 16 keys
  /// a chunk, at most AttentionMaxChunkKeys. Fixed for a graph: pass it the
  /// capacity the graph attends over.
  int64_t DefaultChunks(int64_t batch, int64_t key_len) const;

  /// Bytes of Launch's workspace (float32; 16-byte aligned by any
  /// allocator): batch x heads x rows x chunks x (head_dim + 2) floats.
  int64_t WorkspaceBytes(int64_t batch, int64_t rows, int64_t chunks) const;

  /// o = softmax(q k^T / sqrt(head_dim)) v per query head under the graph
  /// form's block-causal mask (see the header comment), GQA: query head h
  /// reads KV head h / (heads / kv_heads).
  ///   q        [batch, rows, heads, head_dim] element type, contiguous
  ///   k_cache, v_cache  [batch, kv_heads, capacity, head_dim], contiguous;
  ///            keys 0 .. key_len - 1 attended (the graph: key_len = capacity)
  ///   positions  device int64 [rows]: query token t sees keys
  ///            [0, min(key_len, (positions[t] / block_size + 1) * block_size));
  ///            null: every token sees all key_len keys
  ///   out      [batch, rows, heads, head_dim] element type (o_proj's input)
  ///   workspace  WorkspaceBytes(batch, rows, chunks) bytes, no zeroing
  ///   chunks   key chunks (DefaultChunks); ceil(key_len / chunks) keys each
  /// Every pointer 16-byte aligned. Two launches on `stream`, capturable, no
  /// allocation, nothing formatted on success. A token that sees no key gets
  /// 0. Errors: kInvalidArgument for batch outside 1..65535, rows outside
  /// 1..kSdarAttentionMaxRows, key_len outside 1..capacity, chunks outside
  /// 1..key_len or with more than AttentionMaxChunkKeys keys each,
  /// block_size < 1 with positions, a null or unaligned pointer; kCudaError
  /// naming cuLaunchKernel.
  Status Launch(const void* q, const void* k_cache, const void* v_cache, const int64_t* positions,
                int64_t block_size, void* out, void* workspace, int64_t batch, int64_t rows, int64_t key_len,
                int64_t capacity, int64_t chunks, void* stream) const;

 private:
  SdarAttention() = default;
  SdarAttentionShape shape_;
  std::unique_ptr<SdarCudaModule> module_;  // partial, combine
  int64_t max_chunk_ = 0;
};

}  // namespace dice::generator
