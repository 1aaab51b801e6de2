// dice/runtime/prebuild.h — build extension-form candidates ahead of their
// tunes, many nvcc processes at once.
//
// A Tune builds its own task's nvcc candidates (a CUTLASS configuration:
// tens of seconds each) a few at a time, and a model's tasks are tuned one
// after the other, so a network with a dozen GEMM groups spends minutes of
// its first call waiting on nvcc with most of the machine idle (issue 17:
// "first-call compile time"). PrebuildExtensions takes the candidates of
// all the tasks at once (Tuner::PendingExtensionCandidates), drops the
// duplicates (the gemm family's sources are shape-generic, so groups that
// differ only in M/N/K share them) and builds each once through
// CompileExtensionCached, up to `parallel` at a time. The tunes that follow
// then find every library in the build cache (extension_compiler.h) and
// spend their time verifying and timing. Nothing is verified, run or stored
// in the kernel cache here. Torch-free; thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/runtime/extension_compiler.h"

namespace dice::runtime {

/// One candidate to build: its source, the arch ("sm_90") and the number of
/// task inputs its dice_forward takes (ExtensionTranslationUnit).
struct PrebuildItem {
  Candidate candidate;
  std::string arch;
  int num_inputs = 1;
};

/// What PrebuildExtensions did. Counts are of distinct builds (after
/// dropping duplicates); seconds is the wall time of the whole call.
struct PrebuildReport {
  int requested = 0;  ///< items given
  int distinct = 0;   ///< distinct (source, arch, inputs) builds among them
  int built = 0;      ///< nvcc ran and succeeded (now in the build cache)
  int cached = 0;     ///< already in the build cache (no nvcc run)
  int failed = 0;     ///< nvcc failed or timed out (the Tune records it again as the candidate's compile error)
  double seconds = 0;
  std::string first_error;  ///< "<origin>: " + ErrorHeadline of the first failure (outcome.h), "" when none
};

/// The number of nvcc processes to run at once: $DICE_PREBUILD_JOBS when it
/// is an integer in [0, 64] (0: callers do not prebuild), else (unset, or
/// junk with one warning: core/env.h EnvInt) half the hardware threads, at
/// least 1 and at most 16 (each nvcc of a CUTLASS configuration takes 1-2 GB
/// of memory).
int DefaultPrebuildJobs();

/// Builds every distinct item through CompileExtensionCached(options), up to
/// `parallel` (>= 1; smaller values count as 1) at a time, and drops the
/// built objects (the libraries stay in the build cache). A failure of one
/// build never stops the others; it is counted, not returned. When the build
/// cache is off ($DICE_BUILD_CACHE=off or options.build_cache_dir "off")
/// nothing is built (a later Tune could not find the result): the report
/// says distinct, built 0. No errors.
PrebuildReport PrebuildExtensions(const std::vector<PrebuildItem>& items, int parallel,
                                  const ExtensionCompileOptions& options = {});

}  // namespace dice::runtime
