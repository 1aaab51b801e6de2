// dice/generator/sdar_served_groups.h — the SDAR decoder's fusion groups
// (sdar_groups.h) served by dice's own runtime (issue 19 item 1).
//
// SdarModel (sdar_model.h, SdarModelOptions::serve_groups) owns one
// SdarServedGroups. For a row count R (batch x tokens of a forward),
// Prepare(R) hands each declared group's IR to the runtime's public serving
// API, the one a user's C++ program uses: dice::torch_ext::RegisterIrGroup
// and dice::torch_ext::RunGroup (dice/torch_ext/run_group.h), once, on
// random inputs of the group's shapes on the model's device. What that call
// does follows the process's dice mode (DICE_MODE or
// dice::torch_ext::SetRuntimeOptions; dice/torch_ext/mode.h): `cache` loads
// a cached winner, `tune-sync` tunes a miss before returning (templates,
// verification, timing in the dice worker; the winner is stored in the
// cache), `tune` queues the miss for the background tuner (served from the
// next process on), `off` / `observe` serve nothing. A group is served at R
// when that call launched a winner kernel (the group's hit count grew,
// dice/torch_ext/group_stats.h); otherwise its note says why ("no winner",
// "tuning in progress", the mode, ...), printed to stderr, and the decoder
// keeps its hand-written kernel (sdar_fused_kernels.h) for it. Prepare runs
// before any CUDA graph is captured (SdarModel::Load for
// SdarModelOptions::serve_rows, SdarStepGraph for its own rows): RunGroup's
// first call of a shape reads the cache and may tune; later calls of a
// prepared shape only allocate outputs and launch (capturable). Nothing here
// reaches tuner internals.
//
// Numerics: the winner is verified against the IR's reference executor
// (f32 within 1e-4, f16/bf16 within 1e-2, DESIGN.md "Verification"); the
// IR rounds as the unfused LibTorch path does (sdar_groups.h), so f32 logits
// stay within 1e-4 of the unfused path (SdarServedGroupsGpuTest).
// Thread-safety: Prepare and the run methods may be called from several
// threads (a reader/writer lock guards the served table); a run never waits
// on a tune.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/generator/checkpoint.h"
#include "dice/generator/sdar_groups.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {

class SdarServedGroups {
 public:
  /// A table for model `config` computing in `dtype` (kFloat32, kBFloat16
  /// or kFloat16) on `device`; nothing is served until Prepare. On a CPU
  /// device every group is declared and run through the serving API but
  /// never served (the runtime's reason: "no GPU"); the tests use that.
  /// Errors: kInvalidArgument for another dtype.
  static Expected<std::unique_ptr<SdarServedGroups>> Create(const SdarConfig& config, torch::ScalarType dtype,
                                                            torch::Device device);
  SdarServedGroups(const SdarServedGroups&) = delete;
  SdarServedGroups& operator=(const SdarServedGroups&) = delete;

  /// Declares the groups at `rows` token rows (DeclareSdarGroups), runs
  /// each once through dice::torch_ext::RunGroup on random inputs of its
  /// specs (randn; silu_mul's selectors as declared) and records whether a
  /// winner kernel served it. Idempotent per rows. An unserved group is no
  /// error: its note (notes()) names the group, the rows and the runtime's
  /// reason, and is printed to stderr once. REQUIRES: no CUDA graph capture
  /// is under way on the current stream (the call may read the cache, tune
  /// and synchronise). Errors: kInvalidArgument for rows < 1; kInternal
  /// naming the group when LibTorch or the serving API fails.
  Status Prepare(int64_t rows);

  /// Whether Prepare found `group` served at `rows`.
  bool Serves(SdarGroup group, int64_t rows) const;

  /// add_rmsnorm (delta defined) or rmsnorm (delta undefined) through the
  /// serving API: x, delta [..., hidden] contiguous, 16-byte aligned, of
  /// the model's dtype on its device; w [hidden]. On success *norm (and,
  /// with delta, *sum = x + delta) are fresh tensors of x's shape and dtype
  /// and true is returned. Returns false, touching nothing, when the group
  /// is not served at these rows (x.numel() / hidden) or an input is not
  /// contiguous or aligned: the caller runs its own kernel. Throws
  /// c10::Error (LibTorch's convention, as the decoder's other launches)
  /// when the serving API fails.
  bool AddRmsNorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, torch::Tensor* sum,
                  torch::Tensor* norm) const;

  /// silu_mul through the serving API: gate_up [..., 2 * inter] contiguous
  /// (gate columns first) -> *out [..., inter] = silu(gate) * up, a fresh
  /// tensor. Returns false, touching nothing, as AddRmsNorm; throws as it.
  bool SiluMul(const torch::Tensor& gate_up, torch::Tensor* out) const;

  /// q/k RMSNorm + RoPE through the serving API (qk_norm_rope, sdar_groups.h,
  /// at q's and at k's head count): qkv [batch, len, (heads + 2 kv_heads) *
  /// head_dim] contiguous (the fused QKV GEMM's output: q heads, k heads, v
  /// heads), q_norm / k_norm [head_dim], cos / sin [batch * len, 1, head_dim]
  /// contiguous (the RoPE table of each token row's position), all of the
  /// model's dtype on its device -> *q [batch, len, heads, head_dim] and *k
  /// [batch, len, kv_heads, head_dim], fresh contiguous tensors. The q and k
  /// heads are first copied out of qkv (RunGroup serves contiguous inputs
  /// only), and nothing is written to the KV cache: the caller stores k and
  /// v as the unfused path does (the hand-written QkNormRope does both in one
  /// launch). Returns false, touching nothing, when either group is not
  /// served at batch * len rows or an input does not fit; throws as AddRmsNorm.
  bool QkNormRope(const torch::Tensor& qkv, const torch::Tensor& q_norm, const torch::Tensor& k_norm,
                  const torch::Tensor& cos, const torch::Tensor& sin, torch::Tensor* q, torch::Tensor* k) const;

  /// One line per group and prepared rows: "add_rmsnorm at 4 rows: served"
  /// or "... not served (<reason>); hand-written kernel used".
  std::vector<std::string> notes() const;

 private:
  SdarServedGroups() = default;
  bool Eligible(SdarGroup group, const torch::Tensor& t, int64_t row_len, int64_t* rows) const;
  SdarConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  std::string ir_text_[kNumSdarGroups];  // canonical IR (shape-free)
  torch::Tensor sel_gate_, sel_up_;      // silu_mul's selectors [1, 2, 1]
  mutable std::shared_mutex mu_;         // guards served_, prepared_, notes_
  std::vector<int64_t> served_[kNumSdarGroups];
  std::vector<int64_t> prepared_;
  std::vector<std::string> notes_;
};

/// SdarModel::Load's step for SdarModelOptions::serve_groups: null when
/// the option is off and DICE_SDAR_SERVE_GROUPS is not 1 (the variable
/// turns serving on for every model of the process); otherwise Create, then Prepare for every row count of
/// options.serve_rows (empty: config.block_size). `fused_on`: whether the
/// model's hand-written kernels loaded (the fallback the served path
/// needs); without them, or on a CPU device, or when Create / Prepare
/// fails, null and a message on stderr saying why (the model then runs as
/// without the option). Never throws.
std::shared_ptr<SdarServedGroups> ServeSdarGroups(const SdarConfig& config, const SdarModelOptions& options,
                                                  bool fused_on);

}  // namespace dice::generator
