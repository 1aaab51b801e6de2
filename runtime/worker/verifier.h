// verifier.h — the GPU half of one tune request inside dice-worker (private
// to runtime/worker/; DESIGN.md "Verification", "Timing").
//
// A Verifier owns what the candidates of one request share: verification
// trials (fresh random inputs kept inside each op's domain, plus captured
// real inputs; trial_layout.h) with their reference outputs (dice::reference
// on the GPU), and an L2-flush buffer. For each compiled candidate it loads
// the cubin (or dlopens the extension), poisons the outputs, launches on
// PyTorch's current stream, checks CUDA errors, compares every element,
// repeats once (races), times it (CUDA events, L2 flushed between
// repetitions, median), re-verifies with 3x the trials when the speedup
// exceeds 10x, and then checks that the trial data it shares with the other
// candidates is unchanged (else rejects it and rebuilds the trials).
// This header is torch-free (the LibTorch side lives in verifier.cc only).
// Thread-compatible: one request at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::runtime::worker_impl {

/// What one request is about, read from it before any GPU work (torch-free).
struct TaskSetup {
  const CudaDriver* driver = nullptr;      ///< the process-wide driver
  const worker::TuneRequest* req = nullptr;  ///< outlives the Verifier
  ir::Graph graph;                         ///< parsed graph_canonical
  std::vector<ir::TensorSpec> outputs;     ///< ir::InferOutputSpecs of the request's inputs
};

/// One compiled candidate, ready to be verified: a device-form cubin or an
/// extension-form build (its directory goes when `extension` is reset; a
/// loaded library stays mapped).
struct Runnable {
  const worker::TuneItem* item = nullptr;
  CompileResult device;                       ///< device form: the cubin
  std::unique_ptr<ExtensionBuild> extension;  ///< extension form; null for device form
  /// NVRTC or nvcc wall time, milliseconds.
  double compile_ms() const { return extension ? extension->compile_ms() : device.compile_ms; }
};

class Verifier {
 public:
  explicit Verifier(TaskSetup setup);
  ~Verifier();
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  /// Makes the request's device current and builds the trials: max(trials,1)
  /// random ones (all resident, or only trial 0 for large tasks: PlanResidency)
  /// and the captured inputs when the request names a file (skipped with a
  /// note on stderr when unusable), plus the L2-flush buffer (>= 2x L2).
  /// Errors: the reference executor's; kCrashed when the CUDA context is
  /// unusable after a PyTorch error (the worker must exit); kInternal for
  /// another PyTorch error. Call once, before anything else.
  Status BuildTrials();

  /// Times PyTorch (the reference executor) on trial 0 like a candidate and
  /// keeps it as the baseline, µs. Errors: the executor's or the timing's;
  /// kCrashed as for BuildTrials.
  Expected<double> MeasureBaseline();

  /// Uses a baseline an earlier worker measured, µs (0 = unknown).
  void SetKnownBaseline(double baseline_us);

  /// Verifies and times `r`. Never fails: what went wrong is the result's
  /// outcome (kVerified, kVerifyFailed, kCompileError for an extension that
  /// does not load, kCrashed with fatal=true when the context is gone).
  worker::CandidateResult Evaluate(const Runnable& r);

  /// After Evaluate: when the candidate wrote into the shared trial data, its
  /// result becomes kVerifyFailed naming the changed tensor (a failed one
  /// keeps its error with this added) and the trials are rebuilt. Errors:
  /// rebuilding failed, or kCrashed when the check itself hit a broken
  /// context; the request cannot go on.
  Status GuardTrialData(worker::CandidateResult& r);

  /// Hands PyTorch's cached device memory back to the driver (after a
  /// request, so the user's process can use it).
  static void ReleaseDeviceMemory();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// An error text as a result carries it: at most 4000 characters, then "...".
std::string ClipError(std::string text);

/// The LibTorch version this worker was built against ("2.11.0"; hello_reply).
std::string LinkedTorchVersion();

}  // namespace dice::runtime::worker_impl
