// dice/runtime/worker_pool.h — the dice-worker processes of the user's process.
//
// All candidate work (compile, verify, time) runs in a separate, exec'd
// dice-worker process so that a crashing or hanging kernel never takes the
// user's process down (DESIGN.md "Verification"). Workers are started with
// posix_spawn only — never fork, because the user's process may have
// initialised CUDA — and talk over a Unix socket pair bound to their
// stdin/stdout (worker_protocol.h). Every read has a poll()-based deadline;
// a worker that misses it is killed (SIGKILL) and reaped (waitpid), so no
// zombie is left. A small pool (one worker by default) keeps workers warm
// between tasks and respawns one that died.
//
// Torch-free; lives in the user's process.
// Thread-safety: WorkerProcess is thread-compatible (one user at a time).
// WorkerPool is thread-safe: concurrent Hello/Tune calls each take their own
// worker (up to the pool size; further calls wait).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::runtime {

/// The dice-worker binary to run: `explicit_path` when non-empty, else
/// $DICE_WORKER, else the build tree's dice-worker (when it exists), else an
/// installed <prefix>/bin/dice-worker beside the <prefix>/lib library that
/// holds this code (dladdr), else "dice-worker" next to the running
/// executable (/proc/self/exe).
std::string ResolveWorkerPath(const std::string& explicit_path);

/// One spawned worker process and its end of the socket pair.
class WorkerProcess {
 public:
  /// Spawns `path` with `args` (argv[1..]); its stdin and stdout are one end
  /// of a socket pair, stderr is inherited; it runs in its own process group
  /// (a Ctrl-C aimed at the user's process does not hit it mid-kernel).
  /// Errors: kNotFound when `path` does not exist or is not executable (the
  /// message names the path and how to set it); kIoError when socketpair or
  /// posix_spawn fails.
  /// `env`: "NAME=value" entries that replace this process's variables of
  /// the same name in the child's environment (the rest is inherited), e.g.
  /// a device binding's CUDA_VISIBLE_DEVICES (device_binding.h).
  static Expected<std::unique_ptr<WorkerProcess>> Spawn(const std::string& path,
                                                        const std::vector<std::string>& args,
                                                        const std::vector<std::string>& env = {});
  /// Kills (SIGKILL) and reaps the process if it is still alive.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  /// Sends one frame. Errors: kCrashed when the worker is gone (the message
  /// says how it ended: exit status or signal); kIoError.
  Status Send(const std::string& payload);

  /// Waits at most `timeout_s` seconds (negative = no limit) for one frame.
  /// Errors: kTimeout — the worker is then killed and reaped; kCrashed when
  /// it died (message: "worker pid N killed by signal 11 (Segmentation
  /// fault)" / "exited with status 3"); kCorrupt for an oversized frame.
  Expected<std::string> Receive(double timeout_s);

  /// SIGKILL + waitpid; idempotent.
  void Kill();

  /// Asks the worker to exit ("shutdown"), waits up to `grace_s` seconds for
  /// it, then kills it. Idempotent.
  void Shutdown(double grace_s = 2.0);

  /// False once the process is known to have ended (killed, EOF seen).
  bool alive() const { return pid_ > 0; }
  /// Process id as spawned (still valid after the process ended, for logs).
  int pid() const { return spawned_pid_; }
  /// How the process ended ("" while alive).
  const std::string& end_reason() const { return end_reason_; }

 private:
  WorkerProcess() = default;
  // After EOF or a failed write: reap (waiting briefly), then describe.
  std::string ReapAndDescribe();
  int pid_ = -1;
  int spawned_pid_ = -1;
  int fd_ = -1;
  std::string end_reason_;
};

/// How a pool starts its workers.
struct WorkerPoolOptions {
  std::string worker_path;            ///< "" = ResolveWorkerPath("")
  std::vector<std::string> args;      ///< extra argv for the worker
  std::vector<std::string> env;       ///< "NAME=value" overrides of the worker's environment (device binding)
  int size = 1;                       ///< most workers alive at once
  double startup_timeout_s = 120;     ///< hello reply / setup phase (torch + CUDA init, compiles, reference), seconds
};

/// Result of WorkerPool::Tune: one CandidateResult per request item (same
/// order, ids kept). Outcomes are the worker's ("compile_error",
/// "verify_failed", "crashed", "skipped", "verified") plus "timeout" (the
/// candidate was in flight when its deadline passed) and "crashed" for a
/// candidate in flight when the worker died.
struct WorkerTuneResult {
  std::vector<worker::CandidateResult> results;
  double baseline_us = 0;      ///< reference executor median, µs (0 when not measured)
  std::string baseline_error;  ///< why no baseline was measured ("" = fine)
  int respawns = 0;            ///< workers lost (crash/timeout) during this call
};

/// How far one WorkerPool::Tune call has got, counted over the request's
/// items (across respawned workers).
struct WorkerTuneProgress {
  int total = 0;           ///< items in the request
  int compiled = 0;        ///< known to have compiled: named by a "progress" event, or a result past compiling (IsCompiled)
  int finished = 0;        ///< with a final result (any outcome)
  int verified = 0;        ///< verified (IsVerified)
  int timed = 0;           ///< with a median time
  double best_us = 0;      ///< fastest verified median so far, µs (0 = none)
  double baseline_us = 0;  ///< reference executor median, µs (0 = not measured yet)
};

/// Called on the thread running WorkerPool::Tune after each worker event
/// that changes a count (a compile batch, a result, the baseline, a lost
/// in-flight candidate). It must not call back into the pool.
using WorkerProgressCallback = std::function<void(const WorkerTuneProgress&)>;

class WorkerPool {
 public:
  explicit WorkerPool(WorkerPoolOptions options);
  /// Sends "shutdown" to idle workers and kills any left.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Asks a worker what it found (device or no-device reason, versions).
  /// Errors: kNotFound (no binary), kTimeout (no reply within
  /// startup_timeout_s; the worker is killed), kCrashed (it died),
  /// kCorrupt (not a hello_reply).
  Expected<worker::HelloReply> Hello();

  /// Runs one tune batch: sends `request`, streams the results, and when the
  /// worker dies or hangs records the in-flight candidate as "crashed" /
  /// "timeout", respawns the worker and resubmits the candidates that have
  /// no result yet. A candidate gets `candidate_timeout_s` seconds after its
  /// "begin"; the setup phase (spawn, compiles, reference, baseline) gets
  /// startup_timeout_s. Stops at `budget_s` seconds (remaining candidates
  /// "skipped", error "tuning budget exhausted").
  /// `on_progress` (optional): told of each count change (WorkerTuneProgress);
  /// with it the request asks the worker for "progress" events (a worker
  /// that sends none is counted from its results alone).
  /// Errors: kNotFound when the worker binary is missing; everything that
  /// happens to candidates is in the result.
  Expected<WorkerTuneResult> Tune(const worker::TuneRequest& request, double candidate_timeout_s, double budget_s,
                                  const WorkerProgressCallback& on_progress = {});

  const WorkerPoolOptions& options() const { return options_; }

 private:
  Expected<std::unique_ptr<WorkerProcess>> Acquire();
  void Release(std::unique_ptr<WorkerProcess> w);

  WorkerPoolOptions options_;
  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<WorkerProcess>> idle_;
  int live_ = 0;  // workers spawned and not yet discarded (idle + in use)
};

}  // namespace dice::runtime
