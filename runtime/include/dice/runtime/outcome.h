// dice/runtime/outcome.h — what happened to one candidate, as a value.
//
// The tuner (tuner.h), the worker (worker_protocol.h) and the worker pool
// (worker_pool.h) branch on an Outcome; its string form (OutcomeName) is what
// the cache's attempts table, the worker protocol's "outcome" field and the
// CLI's --json output hold, so those names never change: a new outcome gets a
// new name, an old name is never reused. Plain functions over values;
// thread-safe.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

namespace dice::runtime {

/// One candidate's outcome. Who sets which:
///   kCompiled      compile-only run: NVRTC / nvcc accepted it (never verified)
///   kCompileError  NVRTC / nvcc rejected it, or its shared object did not load
///   kParseError    a generator output that held no candidate (no code block)
///   kVerifyFailed  wrong results, a failed extension call, or wrote its inputs
///   kCrashed       it took the worker down or left the CUDA context unusable
///   kTimeout       it was in flight when its deadline passed (worker pool)
///   kSlower        verified, but not faster than the baseline by the margin
///   kWinner        verified and the fastest that beats the baseline by the margin
///   kVerified      verified, not the winner and not known to be slower
///                  (no baseline, or beaten by a faster verified candidate)
///   kSkipped       never run: already attempted, precision policy, budget,
///                  a failed generator, a worker that finished without it
enum class Outcome {
  kCompiled,
  kCompileError,
  kParseError,
  kVerifyFailed,
  kCrashed,
  kTimeout,
  kSlower,
  kWinner,
  kVerified,
  kSkipped,
};

/// The stable string form: "compiled", "compile_error", "parse_error",
/// "verify_failed", "crashed", "timeout", "slower", "winner", "verified",
/// "skipped". The returned view points to static storage.
std::string_view OutcomeName(Outcome outcome);

/// Inverse of OutcomeName (exact, case-sensitive); nullopt for any other text.
std::optional<Outcome> ParseOutcome(std::string_view name);

/// The candidate was verified: kVerified, kSlower or kWinner.
bool IsVerified(Outcome outcome);

/// The candidate compiled: kCompiled, a verified outcome, or one that failed
/// only after compiling (kVerifyFailed, kCrashed, kTimeout). This is what
/// TuneReport::compiled counts.
bool IsCompiled(Outcome outcome);

/// Writes OutcomeName(outcome) (test failure messages, logs).
inline std::ostream& operator<<(std::ostream& os, Outcome outcome) { return os << OutcomeName(outcome); }

}  // namespace dice::runtime
