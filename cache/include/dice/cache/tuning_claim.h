// dice/cache/tuning_claim.h — who is tuning a task key right now.
//
// When N processes that share one cache directory (torchrun: one process per
// GPU) meet the same untuned task key at once, one of them should tune it and
// the others should keep running the fallback until its winner lands in the
// cache. A tuning claim is a row of the cache's `tuning_claims` table (schema
// v4): the task key, the owner (pid, host, token) and an expiry time. The
// Store's ClaimTuning / ReleaseTuningClaim / GetTuningClaim (store.h) read
// and write it in one BEGIN IMMEDIATE transaction each, so two claimers never
// both win. A claim that has expired, or whose owner process is known to be
// gone (same host and pid namespace, and kill(pid, 0) says ESRCH), is taken
// over by the next claimer; the owner releases it when the winner (or the
// failure) is stored. Plain values here; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

namespace dice::cache {

/// The process (and tuner within it) that holds or asks for a claim.
struct ClaimOwner {
  int64_t pid = 0;    ///< process id in its pid namespace
  std::string host;   ///< "<hostname>/<pid namespace>" (ThisProcessOwner): where pid means something
  std::string token;  ///< tells claimers of one process apart (one per tuner); may be ""

  /// "pid 1234 on host node7/pid:[4026531836]" for messages.
  std::string Describe() const;
};

/// Equal when pid, host and token are.
inline bool operator==(const ClaimOwner& a, const ClaimOwner& b) {
  return a.pid == b.pid && a.host == b.host && a.token == b.token;
}
inline bool operator!=(const ClaimOwner& a, const ClaimOwner& b) { return !(a == b); }

/// This process as a claim owner: getpid(), gethostname() joined with the
/// pid namespace (readlink /proc/self/ns/pid, "" where unavailable), so two
/// containers that share a hostname but not a pid namespace never judge each
/// other's pids; `token` as given.
ClaimOwner ThisProcessOwner(const std::string& token);

/// True when `owner` is a process this one can see is gone: same host string
/// (hostname and pid namespace) and kill(pid, 0) fails with ESRCH. An owner
/// on another host, or one that exists (EPERM counts as existing), is not.
bool OwnerIsGone(const ClaimOwner& owner);

/// One row of `tuning_claims`.
struct TuningClaim {
  std::string task_key;
  ClaimOwner owner;
  int64_t claimed_at = 0;  ///< unix seconds
  int64_t expires_at = 0;  ///< unix seconds; the claim is void from then on
};

/// What Store::ClaimTuning decided.
struct ClaimResult {
  bool claimed = false;    ///< the caller holds the claim now (new, renewed or taken over)
  bool took_over = false;  ///< it replaced another owner's expired claim, or one whose owner is gone
  TuningClaim holder;      ///< the claim in force after the call: the caller's when claimed, else the other's
};

}  // namespace dice::cache
