// dice/runtime/tuner.h — task -> candidates -> compile -> verify -> time -> winner.
//
// The Tuner asks its generators for candidates (device form: NVRTC;
// extension form: nvcc + LibTorch headers, extension_compiler.h), skips those already
// attempted (cache attempts table), and hands the rest to a worker process
// (worker_pool.h) that compiles them with NVRTC, verifies them against the
// reference executor and times them against PyTorch running the same
// subgraph (DESIGN.md "Verification", "Timing"). A winner must beat the
// baseline by `margin`; it is stored in the cache with its cubin. A crashing
// or hanging candidate kills only the worker (recorded as an attempt).
//
// One Tune runs these phases, each a function of its own in tuner.cc:
//   LookupCache   the task's winner row, read once (verified: served as is,
//                 unless the precision policy refuses its TF32: then tuned)
//   Generate      candidates from the generators (or the pulled row), deduped,
//                 minus those attempted before or forbidden by the precision policy
//   CompileOnly | RunInWorker   compile only (no GPU), or compile + verify + time
//   SelectWinner  a pure function of the measurements (select_winner.h)
//   Persist       attempts, the winner, the fate of a pulled row
// A TuneProgressCallback hears of each phase boundary (`dice tune` shows it).
// Torch-free. Thread-compatible: one Tune at a time per Tuner.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dice/cache/store.h"
#include "dice/core/generator.h"
#include "dice/core/task.h"
#include "dice/runtime/outcome.h"

namespace dice::runtime {

/// A compile-only tune (no GPU) starts an nvcc build that is not in the build
/// cache only while at least this much of the group's budget is left, in
/// seconds: one CUTLASS instantiation takes 30-90 s, so a build started with
/// less would overrun --budget-s by most of that (issue 20). Cached builds
/// (a verified copy, milliseconds) are always taken.
inline constexpr double kMinUncachedNvccBudgetS = 40;

struct TuneOptions {
  int max_candidates = 16;      ///< per generator
  double budget_s = 60;         ///< wall-clock budget per task, seconds
  double margin = 0.05;         ///< a winner must be < baseline * (1 - margin)
  int trials = 5;               ///< random-input verification trials (plus captured inputs)
  double candidate_timeout_s = 20;  ///< per candidate in the worker, seconds
  /// Precision policy (precision_policy.h): true allows reduced-precision
  /// (TF32 or lower inside) candidates for every task, an explicit override
  /// of the two switches below; $DICE_STRICT_FP32=1 refuses them all the same.
  bool allow_reduced_precision = false;
  /// TF32 allowed for tasks with a convolution (torch.backends.cudnn.allow_tf32;
  /// the torch extension copies PyTorch's switch here at each tune).
  bool tf32_conv = false;
  /// TF32 allowed for tasks with a GEMM (torch.backends.cuda.matmul.allow_tf32;
  /// copied likewise).
  bool tf32_matmul = false;
  /// The PyTorch version of the process that serves the winners ("2.11.0";
  /// the torch extension fills it from TORCH_VERSION like the switches
  /// above). A stored extension-form winner built against another torch or
  /// CUTLASS version is refused (winner_versions.h) and tuned again. "" does
  /// not compare torch versions.
  std::string torch_version;
  bool compile_only = false;    ///< no GPU: generate + NVRTC compile, never store a winner
  std::string worker_path;      ///< dice-worker binary ("" = next to this library / build path)
  int device = 0;               ///< CUDA ordinal the worker uses
  /// nvcc limit per extension-form candidate (extension_compiler.h), seconds.
  /// A worker's setup phase (which includes these builds) may take up to
  /// 120 s + 2x this before it counts as hung.
  double extension_compile_timeout_s = 300;
  /// > 0: before tuning a key, claim it in the cache for this many seconds
  /// (dice/cache/tuning_claim.h); when another process holds a live claim,
  /// Tune tunes nothing and says who in TuneReport::claimed_by. 0: no claim
  /// (every caller tunes what it misses). DefaultClaimTtl gives a length.
  double claim_ttl_s = 0;
};

/// The claim length that covers one tune with these options, seconds:
/// budget_s + 180 (worker start-up) + 2 * extension_compile_timeout_s.
inline double DefaultClaimTtl(const TuneOptions& o) { return o.budget_s + 180 + 2 * o.extension_compile_timeout_s; }

/// Field-by-field equality (every field above: extend it with a new one).
/// The torch extension rebuilds its process-wide Tuner when the options of
/// a tune differ from those it was built with.
inline bool operator==(const TuneOptions& a, const TuneOptions& b) {
  return std::tie(a.max_candidates, a.budget_s, a.margin, a.trials, a.candidate_timeout_s, a.allow_reduced_precision,
                  a.tf32_conv, a.tf32_matmul, a.torch_version, a.compile_only, a.worker_path, a.device,
                  a.extension_compile_timeout_s, a.claim_ttl_s) ==
         std::tie(b.max_candidates, b.budget_s, b.margin, b.trials, b.candidate_timeout_s, b.allow_reduced_precision,
                  b.tf32_conv, b.tf32_matmul, b.torch_version, b.compile_only, b.worker_path, b.device,
                  b.extension_compile_timeout_s, b.claim_ttl_s);
}
inline bool operator!=(const TuneOptions& a, const TuneOptions& b) { return !(a == b); }

/// What happened to one candidate.
struct CandidateOutcome {
  std::string origin;
  std::string hash;
  /// What happened (outcome.h). Its string form, OutcomeName(outcome), is what
  /// the cache's attempts table and --json hold.
  Outcome outcome = Outcome::kSkipped;
  std::string error;       ///< reason, first lines
  double compile_ms = 0;   ///< NVRTC / nvcc wall time, milliseconds
  double time_us = 0;      ///< median µs when timed
};

/// Result of tuning one task.
struct TuneReport {
  std::string task_key;
  std::string description;     ///< Task::Describe
  double baseline_us = 0;      ///< PyTorch on the same subgraph, median µs (0 in compile-only)
  double best_us = 0;          ///< winner's median µs (0 when none)
  double speedup = 0;          ///< baseline_us / best_us (0 when none)
  std::string winner_origin;   ///< "" when no candidate won
  int tried = 0, compiled = 0, verified = 0;
  bool from_cache = false;     ///< the winner was already cached; nothing compiled
  double tune_seconds = 0;
  std::vector<CandidateOutcome> outcomes;
  /// Non-empty: another process holds the key's tuning claim
  /// (TuneOptions::claim_ttl_s), so nothing was tuned; who ("pid 12 on host
  /// h (tuner 1, device 0), claimed for 900 s"). Look again later.
  std::string claimed_by;
  /// The UUID of the GPU the worker measured on ("GPU-..."; "" when no
  /// worker ran or the driver has no cuDeviceGetUuid).
  std::string worker_device_uuid;
};

/// How far one Tune has got; the phases of the header comment, in order.
/// A Tune reports kLookupCache, then either kDone (a verified cached
/// winner) or kGenerate, kCompile (compile-only: after the NVRTC batch and
/// after each nvcc build) or kMeasure (when the worker is handed the batch,
/// counts 0; while it works, after each compile batch, the baseline and
/// each candidate's result; and when it has answered for all),
/// kSelectWinner, kPersist, kDone (a pulled entry that cannot be read:
/// kGenerate, kDone). A Tune that fails reports no kDone.
enum class TunePhase { kLookupCache, kGenerate, kCompile, kMeasure, kSelectWinner, kPersist, kDone };

/// "lookup", "generate", "compile", "measure", "select", "persist", "done"
/// (static storage).
std::string_view TunePhaseName(TunePhase phase);

/// One progress event of a Tune. Counts are this Tune's so far.
struct TuneProgress {
  TunePhase phase = TunePhase::kLookupCache;
  int generated = 0;        ///< candidates to compile / measure (after dedupe, attempts table, precision policy)
  int compiled = 0;         ///< of those, compiled so far (IsCompiled)
  int verified = 0;         ///< verified against the reference executor (IsVerified)
  int timed = 0;            ///< with a measured median time
  double best_us = 0;       ///< fastest verified candidate so far, median µs (0 = none); a cached winner's
  double baseline_us = 0;   ///< PyTorch on the same subgraph, median µs, once measured (0 = not yet / compile-only)
  int finished = 0;         ///< kMeasure on: candidates the worker has a final result for (any outcome)
  double elapsed_s = 0;     ///< wall time since Tune began, seconds
  bool from_cache = false;  ///< a verified cached winner is served; nothing is generated
  std::string_view description;  ///< Task::Describe; valid only during the callback
};

/// Called on the thread that runs Tune, at each phase boundary; it must not
/// call back into the same Tuner.
using TuneProgressCallback = std::function<void(const TuneProgress&)>;

class Tuner {
 public:
  /// `store` may be null (nothing persisted). Generators are asked in order.
  Tuner(cache::Store* store, std::vector<std::shared_ptr<KernelGenerator>> generators, TuneOptions options);
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  /// Tunes one task. `captured_inputs` (optional) are the real input bytes
  /// (host memory, one per task input, contiguous, exactly TensorSpec::nbytes)
  /// added to the random verification trials. Errors: kNoDevice when not
  /// compile_only and no GPU; generator errors are folded into the report.
  /// A verified cached winner is returned as is (from_cache), unless it is
  /// marked reduced precision and the precision policy (precision_policy.h)
  /// now refuses that for the task: then it is a miss, tuned again under the
  /// current policy, the refusal ("winner <origin> uses TF32 ...") is the
  /// report's first outcome (kSkipped), and a new winner replaces the row
  /// even when slower (without one the row stays). An unverified
  /// one (pulled from a server or imported from a bundle, store.h
  /// WinnerRecord::verified) is re-verified instead of tuned: its source is
  /// compiled here (no extra NVRTC flags: the record carries none), verified
  /// and timed like any candidate, with no generator asked; when it wins
  /// (beats the baseline by the margin) it is stored verified with the local
  /// times and cubin, otherwise the attempt is recorded and the unverified
  /// row removed, so it is never served.
  /// `on_progress` (optional) is told of each phase as it ends (TunePhase
  /// says which, in which order); it costs nothing when empty.
  /// The worker runs on CUDA device options.device of this process, bound
  /// to it by UUID (device_binding.h). With options.claim_ttl_s > 0 the key
  /// is claimed in the cache before anything is generated (a report with
  /// claimed_by set and nothing tuned when another process holds it) and
  /// released when the result is stored or the Tune fails.
  Expected<TuneReport> Tune(const Task& task, const std::vector<std::string>* captured_inputs = nullptr,
                            const TuneProgressCallback& on_progress = {});

  /// The extension-form (nvcc) candidates a Tune of `task` would build now,
  /// for building them ahead of it (prebuild.h): none when the cache holds a
  /// verified winner for the task's key that Tune would serve, else the
  /// extension-form ones of Generate (deduped, minus those the attempts table
  /// records for the key and those the precision policy forbids), in
  /// generator order. Nothing
  /// is compiled, run or stored; no worker is started.
  /// Errors: the cache store's read errors (generator errors are skipped,
  /// as Tune skips them).
  Expected<std::vector<Candidate>> PendingExtensionCandidates(const Task& task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::runtime
