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
// next process on), `off` / `observe` serve nothing. The runtime has a
// winner for a group at R when that call launched one (the group's hit
// count grew, dice/torch_ext/group_stats.h).
//
// Served only where faster. The runtime's winner beat PyTorch's op chain
// (its baseline), not the decoder's hand-written kernel (sdar_fused_kernels.h),
// which is the real alternative here: on the H100 (SDAR-4B, bf16) serving
// every winner made the decoder slower (151.4 vs 165.9 tok/s at batch 1,
// docs/DECISIONS.md). So Prepare times a group that has a winner against the
// hand-written launch it would replace, on the same random inputs at R rows,
// and serves it only where its median is lower; otherwise the hand-written
// kernel is kept. Each outcome is a ServedDecision (decisions(), notes(),
// printed to stderr unless served). Timing: CUDA events on the device's
// current stream, 5 warm-up calls of each, then 50 repetitions interleaved
// (served, hand, served, hand, ...) so drift hits both, medians in µs. Each
// pair is queued behind a GPU sleep so the host's enqueue time (RunGroup's
// lookup and allocation, absent under CUDA graphs, which the decoder
// replays) is not counted; L2 is not flushed (both read the same warm
// inputs). The served side is the same private RunGroup call the public
// run methods make, with their copies; q/k RMSNorm + RoPE is compared as a
// pair, as the decoder uses it: the served QkNormRope (two head copies, two
// RunGroup calls) plus the K/V cache copies, against the one hand-written
// launch that also stores K/V, and both groups get that one decision.
//
// Why a HandKernelLaunch (a function the model supplies) and not a
// `const SdarFusedKernels*`: this table knows the groups and the serving
// API, the model knows how it calls its kernels (raw pointers, its stream,
// its KV cache layout); the callback keeps those apart (SdarModel builds it
// from its SdarFusedKernels, sdar_layer_steps.h HandKernelsOf), lets the
// CPU tests pass a fake, and lets the timing loop here interleave the two
// calls (a whole hand-side timer could not).
//
// DICE_SDAR_SERVE_FORCE=1 (read by ServeSdarGroups) skips the comparison:
// every group with a winner is served, as before the comparison existed
// (tests that check the served numerics, benchmarks of the served path).
//
// Prepare runs before any CUDA graph is captured (SdarModel::Load for
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
// threads (a reader/writer lock guards the served table; timing runs outside
// it, on the calling thread's current stream); a run never waits on a tune.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/generator/checkpoint.h"
#include "dice/generator/sdar_groups.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {

/// One group's inputs at R rows for the served-vs-hand comparison: random
/// tensors of the model's dtype on its device, contiguous, one sequence of
/// R tokens at positions 0..R-1; the same tensors feed both sides. Only the
/// fields of `group` are defined.
struct SdarTimingInputs {
  SdarGroup group = SdarGroup::kRmsNorm;
  int64_t rows = 0;
  /// kRmsNorm / kAddRmsNorm: x, delta [1, R, hidden] (delta undefined for
  /// kRmsNorm), w [hidden].
  torch::Tensor x, delta, w;
  /// kSiluMul: [1, R, 2 * intermediate], gate columns first.
  torch::Tensor gate_up;
  /// kQNormRope / kKNormRope (timed as one pair): qkv [1, R, (heads + 2
  /// kv_heads) * head_dim], q_norm / k_norm [head_dim], cos / sin [R,
  /// head_dim] (row r is position r), k_cache / v_cache [1, kv_heads, R,
  /// head_dim] (this forward's keys and values go to slots 0..R-1).
  torch::Tensor qkv, q_norm, k_norm, cos, sin, k_cache, v_cache;
};

/// Launches once, on the current CUDA stream of the inputs' device, what the
/// decoder runs for `in.group` when that group is not served: output
/// allocation included, for q/k the one launch that also stores K/V into
/// in.k_cache / in.v_cache. Throws c10::Error when a launch fails.
using HandKernelLaunch = std::function<void(const SdarTimingInputs& in)>;

/// What Prepare decided for one group at one row count.
struct ServedDecision {
  SdarGroup group = SdarGroup::kRmsNorm;
  int64_t rows = 0;
  bool winner = false;   ///< the runtime launched a winner kernel for it
  bool served = false;   ///< the run methods serve it (else the hand-written kernel runs)
  double served_us = 0;  ///< median of the served call, µs; 0 when not timed
  double hand_us = 0;    ///< median of the hand-written call, µs; 0 when not timed
  std::string why;       ///< the note's text after "<group> at <R> rows: "
};

/// The rule for a group with a winner, timed: served exactly when served_us
/// < hand_us; `why` reads "served (served 3.1 µs vs hand 4.2 µs)" or
/// "hand-written kernel kept (served 6.1 µs vs hand 4.2 µs)", with `what`
/// appended inside the parentheses when not empty. Pure.
ServedDecision DecideByTimes(SdarGroup group, int64_t rows, double served_us, double hand_us,
                             const std::string& what = "");

class SdarServedGroups {
 public:
  /// A table for model `config` computing in `dtype` (kFloat32, kBFloat16
  /// or kFloat16) on `device`; nothing is served until Prepare. `hand`: the
  /// hand-written kernels each winner is timed against (HandKernelLaunch);
  /// null serves every group the runtime has a winner for, untimed
  /// (DICE_SDAR_SERVE_FORCE=1). On a CPU device every group is declared and
  /// run through the serving API but never served (the runtime's reason:
  /// "no GPU") and nothing is timed; the tests use that.
  /// Errors: kInvalidArgument for another dtype.
  static Expected<std::unique_ptr<SdarServedGroups>> Create(const SdarConfig& config, torch::ScalarType dtype,
                                                            torch::Device device, HandKernelLaunch hand = nullptr);
  SdarServedGroups(const SdarServedGroups&) = delete;
  SdarServedGroups& operator=(const SdarServedGroups&) = delete;

  /// Declares the groups at `rows` token rows (DeclareSdarGroups), runs
  /// each once through dice::torch_ext::RunGroup on random inputs of its
  /// specs (randn; silu_mul's selectors as declared), and, with a hand
  /// launcher on CUDA, times each group that has a winner against the
  /// hand-written kernel (see the file comment; adds about 55 calls of each
  /// side per group). Serves a group at `rows` only when it has a winner
  /// and, unless untimed, its median is below the hand kernel's.
  /// Idempotent per rows. Keeping the hand kernel is no error: the group's
  /// ServedDecision and note say why (the runtime's reason, or both times
  /// in µs) and the note is printed to stderr once. REQUIRES: no CUDA graph
  /// capture is under way on the current stream (the call may read the
  /// cache, tune and synchronise). Errors: kInvalidArgument for rows < 1;
  /// kInternal naming the group when LibTorch, the serving API or a timed
  /// launch (either side) fails.
  Status Prepare(int64_t rows);

  /// Whether Prepare decided to serve `group` at `rows`.
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

  /// One line per group and prepared rows, "<group> at <R> rows: <why>":
  /// "add_rmsnorm at 4 rows: served (served 3.1 µs vs hand 4.2 µs)",
  /// "... hand-written kernel kept (served 6.1 µs vs hand 4.2 µs)",
  /// "... served (not compared with the hand-written kernel)" or
  /// "... not served (<runtime's reason>); hand-written kernel used".
  std::vector<std::string> notes() const;

  /// Every decision so far, in Prepare order (groups in SdarGroup order).
  std::vector<ServedDecision> decisions() const;

 private:
  SdarServedGroups() = default;
  // Whether t is a [..., row_len] tensor the served kernels take (dtype,
  // CUDA, contiguous, 16-byte aligned); *rows = its row count.
  bool Fits(const torch::Tensor& t, int64_t row_len, int64_t* rows) const;
  // The RunGroup calls behind the run methods, shapes already checked.
  void RunAddRmsNorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, int64_t rows,
                     torch::Tensor* sum, torch::Tensor* norm) const;
  void RunSiluMul(const torch::Tensor& gate_up, int64_t rows, torch::Tensor* out) const;
  void RunQkNormRope(const torch::Tensor& qkv, const torch::Tensor& q_norm, const torch::Tensor& k_norm,
                     const torch::Tensor& cos, const torch::Tensor& sin, int64_t rows, torch::Tensor* q,
                     torch::Tensor* k) const;
  // Prepare's steps: one RunGroup call of each declared group (winner per
  // group, else the runtime's reason), then the timed comparison.
  Status RunOnce(int64_t rows, bool winner[kNumSdarGroups], std::string why[kNumSdarGroups]) const;
  SdarTimingInputs TimingInputs(SdarGroup group, int64_t rows) const;
  ServedDecision Compare(SdarGroup group, int64_t rows) const;
  SdarConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  HandKernelLaunch hand_;                // null: serve untimed
  std::string ir_text_[kNumSdarGroups];  // canonical IR (shape-free)
  torch::Tensor sel_gate_, sel_up_;      // silu_mul's selectors [1, 2, 1]
  mutable std::shared_mutex mu_;         // guards served_, prepared_, decisions_
  std::vector<int64_t> served_[kNumSdarGroups];
  std::vector<int64_t> prepared_;
  std::vector<ServedDecision> decisions_;
};

/// SdarModel::Load's step for SdarModelOptions::serve_groups: null when
/// the option is off and DICE_SDAR_SERVE_GROUPS is not 1 (the variable
/// turns serving on for every model of the process); otherwise Create, then
/// Prepare for every row count of options.serve_rows (empty:
/// config.block_size). `hand`: the model's hand-written kernels (the
/// fallback the served path needs, and what each winner is timed against);
/// null when they did not load. Without them, or on a CPU device, or when
/// Create / Prepare fails, null and a message on stderr saying why (the
/// model then runs as without the option). DICE_SDAR_SERVE_FORCE=1 creates
/// the table without `hand` (every winner served untimed; one line on
/// stderr says so). Never throws.
std::shared_ptr<SdarServedGroups> ServeSdarGroups(const SdarConfig& config, const SdarModelOptions& options,
                                                  HandKernelLaunch hand);

}  // namespace dice::generator
