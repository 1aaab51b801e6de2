// dice/generator/sdar_fused_kernels.h — the SDAR decoder's fused elementwise
// kernels (issue 19 item 1): CUDA C++ written for one model shape, compiled
// with NVRTC when the model loads and launched through the CUDA driver, both
// through the runtime's public headers (dice/runtime/compiler.h,
// dice/runtime/cuda_driver.h). Torch-free: SdarModel (sdar_model.h) hands
// raw device pointers and its current stream.
//
// Three chains of the Qwen3 layer (sdar_model.h) become one launch each:
//   AddRmsNorm   s = x + d (optional), n = w * RMSNorm(s)   [rows, hidden]
//   QkNormRope   per head: q,k = w * RMSNorm over head_dim, then RoPE
//                (rotate-half) with the step's cos/sin tables; optionally
//                the new keys and values stored into the KV cache too
//   SiluMul      silu(gate) * up from the fused gate/up GEMM's output
// Numerics follow the LibTorch path op by op: statistics in float32, and
// every value LibTorch stores in the compute dtype is rounded to it at the
// same point (x + d, the normed value before the weight, the weighted value,
// q*cos, rot(q)*sin, their sum, silu(gate), the product). Only the order of
// the float32 sums of squares (and rsqrtf's last bit) differs. Tolerances
// against the unfused path, checked by SdarFusedGpuTest: f32 logits within
// 1e-4 absolute; bf16 logits within 5% of the largest |logit| (one rounding
// of an intermediate may land on the other side and propagate).
//
// The skinny GEMMs (SdarGemv, bf16/f16): the step forward's four
// projections at <= 16 rows run the gemv template family's stream form
// (templates/gemv.h), compiled in the same Build; float accumulation in
// another order than cuBLAS, so bf16 logits stay within the same 5%.
// SdarModel builds them only with DICE_SDAR_GEMV=1: measured slower than
// cuBLAS end to end on the H200 (SDAR-4B batch 1: 160.7 vs 216.3 tokens/s,
// session 14), so the model's default keeps cuBLAS.
//
// Element types f32, bf16, f16 (float / __nv_bfloat16 / __half). Every
// tensor is contiguous row-major in the element type, except the cos/sin
// tables which are [seq_len, head_dim] in the element type too.
// Thread-safety: the launch methods are const and stateless (safe from
// several threads); Build must run with the model's device current.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::generator {

/// The element type of the fused kernels.
enum class FusedDtype { kF32, kBF16, kF16 };

/// The model shape the sources are written for (SdarConfig's fields).
struct SdarFusedShape {
  int64_t hidden = 0;        ///< hidden_size
  int64_t heads = 0;         ///< num_attention_heads
  int64_t kv_heads = 0;      ///< num_key_value_heads
  int64_t head_dim = 0;      ///< even, <= 1024
  int64_t intermediate = 0;  ///< intermediate_size
  double eps = 1e-6;         ///< rms_norm_eps
  FusedDtype dtype = FusedDtype::kF32;
  /// Also compile the skinny GEMMs of the step forward (SdarGemv; bf16 and
  /// f16 only, ignored for f32): the stream form of the gemv template
  /// family (templates/gemv.h) for the four projections at 4, 8 and 16 rows.
  bool skinny_gemv = true;
  /// The skinny GEMMs in the family's direct form (x read through L1, no
  /// shared-memory staging or barrier; templates/gemv.h x_direct) instead
  /// of the staged one (DICE_SDAR_GEMV_DIRECT=1 in SdarModel, for A/B runs).
  bool gemv_direct = false;
  /// SdarModel: the CUDA-graph step form always runs DecodeAttention
  /// instead of SDPA (DICE_SDAR_SPLIT_KV=1).
  bool split_kv_attention = false;
  /// SdarStepGraph measures both attention forms when it captures a graph
  /// of at most kSplitKvMeasureMaxBatch rows and keeps the faster
  /// (DICE_SDAR_SPLIT_KV=2; unset or 0: SDPA always).
  bool split_kv_auto = false;
  /// QkNormRope runs the warp-per-head kernel (one warp a head, several
  /// heads a block) where head_dim is a multiple of 32 up to 256 and the
  /// pointers are aligned for it; false: always the block form
  /// (DICE_SDAR_QK_WARP=0 in SdarModel, for A/B runs).
  bool warp_qk = true;
};

/// The projections of one layer the skinny GEMMs serve (x [rows, K], the
/// weight [N, K] as SdarModel holds it, out [rows, N]).
enum class SdarGemv {
  kQkv,     ///< K hidden, N (heads + 2 kv_heads) head_dim
  kO,       ///< K heads head_dim, N hidden
  kGateUp,  ///< K hidden, weight [2 inter, K]; out [rows, inter] = silu(gate) * up
  kDown,    ///< K inter, N hidden
};

/// Why `shape` does not fit the fused kernels, or Ok. Limits: every size
/// >= 1, head_dim even and <= 1024 (one thread per element of a head),
/// hidden <= 32768 (the row lives in registers), heads a multiple of
/// kv_heads. Errors: kInvalidArgument naming the field and the limit.
Status CheckFusedShape(const SdarFusedShape& shape);

/// The CUDA C++ source (NVRTC, -std=c++17) of the kernels for `shape`:
/// dice_sdar_rmsnorm, dice_sdar_add_rmsnorm (16-byte loads when hidden is a
/// multiple of 16 bytes of elements), dice_sdar_qk_norm_rope (and its
/// warp-per-head form dice_sdar_qk_norm_rope_w),
/// dice_sdar_silu_mul, dice_sdar_rmsnorm_s / dice_sdar_add_rmsnorm_s
/// (the norms with scalar loads, for pointers not 16-byte aligned), and
/// dice_sdar_attn_partial / dice_sdar_attn_combine (DecodeAttention), all
/// extern "C". Shapes and eps are compile-time
/// constants; rows and seq_len are kernel arguments. Precondition:
/// CheckFusedShape(shape) is Ok.
std::string SdarFusedSource(const SdarFusedShape& shape);

/// The kernel names SdarFusedSource defines, in a fixed order.
std::vector<std::string> SdarFusedKernelNames();

/// Where QkNormRope also stores the new keys and values: one layer's KV
/// cache, k_cache and v_cache [batch, kv_heads, capacity, head_dim] of the
/// element type, contiguous, batch = rows / seq_len. Token t of every
/// sequence goes to slot slots[t] (device int64 [seq_len], the CUDA-graph
/// form's index tensor) or, when slots is null, to slot start + t. A slot
/// outside [0, capacity) is skipped (not written). The bits stored are those
/// the unfused path's copy_ / index_copy_ would store: the normed and rotated
/// key, and the value as the QKV GEMM wrote it.
struct KvCacheWrite {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int64_t* slots = nullptr;  ///< device pointer, or null
  int64_t start = 0;               ///< first slot when slots is null
  int64_t capacity = 0;            ///< the cache's slot count (dim 2)
};

/// The source of the skinny GEMMs (SdarGemv) for `shape`: the gemv
/// template family's stream form, one kernel per projection and rows bucket
/// (SdarGemvKernelNames), or "" for f32 or a K whose rows are no multiple
/// of 16 bytes.
std::string SdarGemvSource(const SdarFusedShape& shape);

/// dice_sdar_gemv_<qkv|o|gate_up|down>_m<4|8|16>, SdarGemv order then rows.
std::vector<std::string> SdarGemvKernelNames();

/// The compiled and loaded kernels of one model (one CUDA module in the
/// device's primary context, unloaded on destruction). Not copyable.
class SdarFusedKernels {
 public:
  /// Checks the shape, compiles SdarFusedSource for `arch` ("sm_90"; ""
  /// = device `ordinal`'s, runtime::QueryDevice) and
  /// loads it on CUDA device `ordinal` (its primary context is made current
  /// when no context is), and the skinny GEMMs (SdarGemvSource) when they
  /// fit (has_gemv). Errors: those of CheckFusedShape; kCompileError
  /// with the NVRTC log; kNoDevice / kCudaError naming the driver call.
  static Expected<std::unique_ptr<SdarFusedKernels>> Build(const SdarFusedShape& shape, const std::string& arch,
                                                           int ordinal);
  ~SdarFusedKernels();
  SdarFusedKernels(const SdarFusedKernels&) = delete;
  SdarFusedKernels& operator=(const SdarFusedKernels&) = delete;

  const SdarFusedShape& shape() const { return shape_; }
  double compile_ms() const { return compile_ms_; }

  /// n = w * RMSNorm(x + d) over rows of `hidden`, and s = x + d into
  /// `sum` (may alias x). `delta` null: n = w * RMSNorm(x), `sum` unused.
  /// One block a row issues all its loads (16 bytes each when every pointer
  /// is 16-byte aligned, else scalar: dice_sdar_*_s) before any store.
  /// x, delta, sum, norm: [rows, hidden]; w: [hidden]. `stream`: a
  /// CUstream / cudaStream_t (capturable). Errors: kCudaError naming
  /// cuLaunchKernel; kInvalidArgument for rows < 1.
  Status AddRmsNorm(const void* x, const void* delta, const void* w, void* sum, void* norm, int64_t rows,
                    void* stream) const;

  /// From qkv [rows, (heads + 2 kv_heads) * head_dim] (the fused QKV GEMM's
  /// output; row r is token r % seq_len of its sequence): q_out [rows, heads,
  /// head_dim] and k_out [rows, kv_heads, head_dim], each head RMS-normed
  /// with q_w / k_w [head_dim] and rotated with cos/sin [seq_len, head_dim]
  /// row r % seq_len. `kv` non-null: the new keys and values also go
  /// straight into that layer's cache (KvCacheWrite; replaces the copy_ /
  /// index_copy_ launches), and k_out may be null. Errors: as AddRmsNorm;
  /// kInvalidArgument when rows is not a multiple of seq_len, when k_out is
  /// null without `kv`, or for a `kv` without both caches or with capacity
  /// < 1 or start < 0. `q_heads_major`: q_out is [batch, heads, seq_len,
  /// head_dim] instead (the layout SDPA reads without a copy). One warp a
  /// head when shape().warp_qk and head_dim allow it (sdar_fused_qk.h), else
  /// one block a head: same values up to the order of the float32 sum of
  /// squares.
  Status QkNormRope(const void* qkv, const void* q_w, const void* k_w, const void* cos, const void* sin, void* q_out,
                    void* k_out, int64_t rows, int64_t seq_len, void* stream, const KvCacheWrite* kv = nullptr,
                    bool q_heads_major = false) const;

  /// out [rows, intermediate] = silu(gate) * up with gate_up [rows, 2 *
  /// intermediate] (gate columns first). Errors: as AddRmsNorm.
  Status SiluMul(const void* gate_up, void* out, int64_t rows, void* stream) const;

  /// Split-KV decode attention (the CUDA-graph step form; issue 19 item 3):
  /// o [batch, seq_len, heads, head_dim] = softmax(q k^T / sqrt(head_dim) +
  /// mask) v per query head, GQA (query head h reads KV head h / (heads /
  /// kv_heads)). q [batch, seq_len, heads, head_dim]; k_cache, v_cache
  /// [batch, kv_heads, capacity, head_dim], keys 0..key_len-1 read; mask
  /// bool (1 byte) [seq_len, key_len], true = attend, or null (all keys).
  /// Two launches: partials over key chunks of AttentionChunk keys (online
  /// softmax in float) into `workspace` (AttentionWorkspaceFloats floats),
  /// then their combination. Capturable; no allocation. Errors:
  /// kInvalidArgument for seq_len x heads / kv_heads > 64, head_dim > 256,
  /// key_len outside 1..capacity or batch outside 1..65535; kCudaError.
  Status DecodeAttention(const void* q, const void* k_cache, const void* v_cache, const void* mask, void* out,
                         void* workspace, int64_t batch, int64_t seq_len, int64_t key_len, int64_t capacity,
                         void* stream) const;
  /// Keys per partial block (16..256, a power of two; about two waves of
  /// 132 SMs over chunks x kv_heads x batch).
  int64_t AttentionChunk(int64_t batch, int64_t key_len) const;
  /// Floats of DecodeAttention's workspace.
  int64_t AttentionWorkspaceFloats(int64_t batch, int64_t seq_len, int64_t key_len) const;

  /// Whether the skinny GEMMs were compiled (shape.skinny_gemv, bf16/f16,
  /// shapes with rows of 16-byte multiples); gemv_note() says why not.
  bool has_gemv() const { return gemv_module_ != nullptr; }
  const std::string& gemv_note() const { return gemv_note_; }

  /// out = x @ w^T for projection `which` (SdarGemv) at 1..16 rows, float
  /// accumulation, streaming w once (templates/gemv.h stream form; kGateUp
  /// writes silu(gate) * up rounded as the unfused path). Every pointer
  /// 16-byte aligned, contiguous. Errors: kUnsupported when !has_gemv(),
  /// rows outside 1..16 or a pointer not aligned (the caller then uses its
  /// GEMM); kCudaError naming cuLaunchKernel.
  Status Gemv(SdarGemv which, const void* x, const void* w, void* out, int64_t rows, void* stream) const;

 private:
  SdarFusedKernels() = default;
  Status Launch(int which, unsigned grid_x, unsigned grid_y, unsigned block, void** args, void* stream) const;
  Status BuildGemv(const std::string& target);
  SdarFusedShape shape_;
  const void* driver_ = nullptr;  // const runtime::CudaDriver*
  void* module_ = nullptr;        // CUmodule
  std::vector<void*> functions_;  // CUfunction, SdarFusedKernelNames order
  unsigned norm_threads_ = 0, head_threads_ = 0;
  double compile_ms_ = 0;
  void* gemv_module_ = nullptr;  // CUmodule of the skinny GEMMs, or null
  struct GemvKernel {
    void* function = nullptr;  // CUfunction
    unsigned grid = 0, block = 0;
  };
  std::vector<GemvKernel> gemv_;  // [projection * 3 + bucket (4, 8, 16 rows)]
  std::string gemv_note_;
};

}  // namespace dice::generator
