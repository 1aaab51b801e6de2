// worker_pool.cc — spawning, talking to, and replacing dice-worker processes
// (worker_pool.h). posix_spawn only: the user's process may have initialised
// CUDA, and a forked child of such a process must not touch CUDA.
#include "dice/runtime/worker_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

extern char** environ;

namespace dice::runtime {
namespace {

using Clock = std::chrono::steady_clock;

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

// waitpid that retries EINTR; returns the pid, 0 (WNOHANG, still running) or -1.
pid_t WaitPid(pid_t pid, int* status, int flags) {
  for (;;) {
    pid_t r = ::waitpid(pid, status, flags);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::string ResolveWorkerPath(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* env = std::getenv("DICE_WORKER"); env != nullptr && env[0] != '\0') return env;
#ifdef DICE_WORKER_BUILD_PATH
  if (IsExecutableFile(DICE_WORKER_BUILD_PATH)) return DICE_WORKER_BUILD_PATH;
#endif
  // An installed tree: <prefix>/lib/<the library holding this code> and
  // <prefix>/bin/dice-worker.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&ResolveWorkerPath), &info) != 0 && info.dli_fname != nullptr) {
    std::string lib(info.dli_fname);
    auto slash = lib.rfind('/');
    if (slash != std::string::npos) {
      const std::string installed = lib.substr(0, slash) + "/../bin/dice-worker";
      if (IsExecutableFile(installed)) return installed;
    }
  }
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    std::string exe(buf, static_cast<size_t>(n));
    auto slash = exe.rfind('/');
    if (slash != std::string::npos) return exe.substr(0, slash + 1) + "dice-worker";
  }
  return "dice-worker";
}

// ---------------------------------------------------------------- WorkerProcess

Expected<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(const std::string& path,
                                                              const std::vector<std::string>& args,
                                                              const std::vector<std::string>& env) {
  if (!IsExecutableFile(path)) {
    return Status(StatusCode::kNotFound, "dice-worker binary '" + path +
                                             "' does not exist or is not executable (set TuneOptions.worker_path "
                                             "or the DICE_WORKER environment variable)");
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status(StatusCode::kIoError, std::string("socketpair for the worker: ") + strerror(errno));
  }
  // Keep the child's end off fds 0-2 so dup2 below always makes a fresh,
  // non-close-on-exec descriptor.
  if (sv[1] <= 2) {
    int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 3);
    ::close(sv[1]);
    sv[1] = moved;
    if (moved < 0) {
      ::close(sv[0]);
      return Status(StatusCode::kIoError, std::string("fcntl(F_DUPFD_CLOEXEC): ") + strerror(errno));
    }
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDOUT_FILENO);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);  // own process group
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> argv_store;
  argv_store.push_back(path);
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  // This process's environment with `env` replacing variables by name.
  std::vector<std::string> env_store;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('=') + 1);
    bool replaced = false;
    for (const auto& o : env) replaced = replaced || o.compare(0, name.size(), name) == 0;
    if (!replaced) env_store.push_back(kv);
  }
  env_store.insert(env_store.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& kv : env_store) envp.push_back(kv.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return Status(rc == ENOENT || rc == EACCES ? StatusCode::kNotFound : StatusCode::kIoError,
                  "posix_spawn '" + path + "': " + strerror(rc));
  }
  std::unique_ptr<WorkerProcess> w(new WorkerProcess());
  w->pid_ = pid;
  w->spawned_pid_ = pid;
  w->fd_ = sv[0];
  return w;
}

WorkerProcess::~WorkerProcess() { Kill(); }

void WorkerProcess::Kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    if (WaitPid(pid_, &status, 0) == pid_ && end_reason_.empty()) {
      end_reason_ = "killed by the runtime (" + DescribeWaitStatus(status) + ")";
    }
    pid_ = -1;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (end_reason_.empty()) end_reason_ = "killed by the runtime";
}

void WorkerProcess::Shutdown(double grace_s) {
  if (pid_ <= 0) {
    Kill();
    return;
  }
  if (worker::WriteFrame(fd_, worker::EncodeShutdownRequest()).ok()) {
    auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
    while (Clock::now() < deadline) {
      int status = 0;
      pid_t r = WaitPid(pid_, &status, WNOHANG);
      if (r == pid_ || r < 0) {
        end_reason_ = "shut down (" + (r == pid_ ? DescribeWaitStatus(status) : std::string("reaped elsewhere")) + ")";
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  Kill();
}

std::string WorkerProcess::ReapAndDescribe() {
  std::string reason;
  if (pid_ > 0) {
    // The stream ended; the process normally follows within milliseconds.
    auto deadline = Clock::now() + std::chrono::seconds(2);
    int status = 0;
    pid_t r = 0;
    while ((r = WaitPid(pid_, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (r == pid_) {
      reason = DescribeWaitStatus(status);
    } else if (r == 0) {
      ::kill(pid_, SIGKILL);
      WaitPid(pid_, &status, 0);
      reason = "closed its stream and was killed";
    } else {
      reason = "ended (not reapable: " + std::string(strerror(errno)) + ")";
    }
    pid_ = -1;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  end_reason_ = reason.empty() ? "ended" : reason;
  return end_reason_;
}

Status WorkerProcess::Send(const std::string& payload) {
  if (fd_ < 0) return Status(StatusCode::kCrashed, "worker pid " + std::to_string(spawned_pid_) + " " + end_reason_);
  Status st = worker::WriteFrame(fd_, payload);
  if (st.code() == StatusCode::kCrashed) {
    return Status(StatusCode::kCrashed, "worker pid " + std::to_string(spawned_pid_) + " " + ReapAndDescribe());
  }
  return st;
}

Expected<std::string> WorkerProcess::Receive(double timeout_s) {
  if (fd_ < 0) return Status(StatusCode::kCrashed, "worker pid " + std::to_string(spawned_pid_) + " " + end_reason_);
  int64_t ms = timeout_s < 0 ? -1 : static_cast<int64_t>(timeout_s * 1000.0 + 0.5);
  auto frame = worker::ReadFrame(fd_, ms);
  if (frame.ok()) return frame;
  const Status& st = frame.status();
  if (st.code() == StatusCode::kTimeout) {
    end_reason_ = "gave no answer within " + std::to_string(timeout_s) + " s and was killed";
    Kill();
    return Status(StatusCode::kTimeout, "worker pid " + std::to_string(spawned_pid_) + " " + end_reason_);
  }
  if (st.code() == StatusCode::kCrashed) {
    return Status(StatusCode::kCrashed, "worker pid " + std::to_string(spawned_pid_) + " " + ReapAndDescribe());
  }
  // Corrupt or I/O error: the stream can no longer be trusted.
  Kill();
  return st;
}

// ---------------------------------------------------------------- WorkerPool

WorkerPool::WorkerPool(WorkerPoolOptions options)
    : options_(std::move(options)), path_(ResolveWorkerPath(options_.worker_path)) {
  if (options_.size < 1) options_.size = 1;
}

WorkerPool::~WorkerPool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : idle_) w->Shutdown();
  idle_.clear();
}

Expected<std::unique_ptr<WorkerProcess>> WorkerPool::Acquire() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty() || live_ < options_.size; });
    while (!idle_.empty()) {
      std::unique_ptr<WorkerProcess> w = std::move(idle_.back());
      idle_.pop_back();
      if (w->alive()) return w;
      --live_;
    }
    ++live_;  // reserve a slot, spawn outside the lock
  }
  auto w = WorkerProcess::Spawn(path_, options_.args, options_.env);
  if (!w.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    --live_;
    cv_.notify_one();
  }
  return w;
}

void WorkerPool::Release(std::unique_ptr<WorkerProcess> w) {
  std::lock_guard<std::mutex> lock(mu_);
  if (w && w->alive()) {
    idle_.push_back(std::move(w));
  } else {
    --live_;
    w.reset();  // a dead worker: already reaped, destructor only closes
  }
  cv_.notify_one();
}

Expected<worker::HelloReply> WorkerPool::Hello() {
  auto w = Acquire();
  if (!w.ok()) return w.status();
  std::unique_ptr<WorkerProcess> proc = std::move(*w);
  Status st = proc->Send(worker::EncodeHelloRequest());
  if (!st.ok()) {
    Release(std::move(proc));
    return st;
  }
  auto frame = proc->Receive(options_.startup_timeout_s);
  if (!frame.ok()) {
    Release(std::move(proc));
    return frame.status();
  }
  auto ev = worker::DecodeEvent(*frame);
  if (!ev.ok() || ev->type != worker::EventType::kHelloReply) {
    proc->Kill();
    Release(std::move(proc));
    return Status(StatusCode::kCorrupt, "worker answered hello with something else" +
                                            (ev.ok() ? std::string() : ": " + ev.status().message()));
  }
  Release(std::move(proc));
  return ev->hello;
}

namespace {

// One WorkerPool::Tune call's ledger: each item's result so far, what is
// known to have compiled, and the counts its progress callback hears.
class TuneLedger {
 public:
  TuneLedger(const worker::TuneRequest& request, const WorkerProgressCallback& on_progress)
      : request_(request), on_progress_(on_progress), results_(request.items.size()),
        done_(request.items.size(), false), compiled_(request.items.size(), false),
        remaining_(request.items.size()) {
    for (size_t i = 0; i < request.items.size(); ++i) {
      pos_[request.items[i].id] = i;
      results_[i].id = request.items[i].id;
    }
  }

  size_t remaining() const { return remaining_; }

  // Records `r` as item `id`'s result; the first one stays, unknown ids are ignored.
  void SetResult(int id, worker::CandidateResult r) {
    auto it = pos_.find(id);
    if (it == pos_.end() || done_[it->second]) return;
    const size_t i = it->second;
    r.id = id;
    if (IsCompiled(r.outcome)) compiled_[i] = true;
    results_[i] = std::move(r);
    done_[i] = true;
    --remaining_;
  }

  // A "progress" event: these items compiled (a resubmitted item may be named again).
  void MarkCompiled(const std::vector<int>& ids) {
    for (int id : ids) {
      auto it = pos_.find(id);
      if (it != pos_.end()) compiled_[it->second] = true;
    }
  }

  // Every item without a result gets `outcome` with `error`.
  void FinishRest(Outcome outcome, const std::string& error) {
    for (size_t i = 0; i < results_.size(); ++i) {
      if (done_[i]) continue;
      worker::CandidateResult r;
      r.outcome = outcome;
      r.error = error;
      SetResult(request_.items[i].id, std::move(r));
    }
  }

  // The request's items still without a result, in request order.
  std::vector<worker::TuneItem> OpenItems() const {
    std::vector<worker::TuneItem> open;
    for (size_t i = 0; i < results_.size(); ++i) {
      if (!done_[i]) open.push_back(request_.items[i]);
    }
    return open;
  }

  // Tells the callback (if any) the counts so far.
  void Notify(double baseline_us) const {
    if (!on_progress_) return;
    WorkerTuneProgress p;
    p.total = static_cast<int>(results_.size());
    p.baseline_us = baseline_us;
    for (size_t i = 0; i < results_.size(); ++i) {
      p.compiled += compiled_[i] ? 1 : 0;
      if (!done_[i]) continue;
      const worker::CandidateResult& r = results_[i];
      ++p.finished;
      if (r.time_us > 0) ++p.timed;
      if (!IsVerified(r.outcome)) continue;
      ++p.verified;
      if (r.time_us > 0 && (p.best_us <= 0 || r.time_us < p.best_us)) p.best_us = r.time_us;
    }
    on_progress_(p);
  }

  std::vector<worker::CandidateResult> TakeResults() { return std::move(results_); }

 private:
  const worker::TuneRequest& request_;
  const WorkerProgressCallback& on_progress_;
  std::unordered_map<int, size_t> pos_;  // item id -> index
  std::vector<worker::CandidateResult> results_;
  std::vector<bool> done_, compiled_;
  size_t remaining_;
};

// The baseline of one Tune call, measured by the first worker that gets to it.
struct Baseline {
  bool known = false;
  double us = 0;
  std::string error;
};

// How one worker's conversation about a batch ended.
struct BatchEnd {
  bool done = false;        // "done" arrived
  bool lost = false;        // the worker died, hung, sent garbage, or a fatal result
  bool fatal_seen = false;  // a fatal result: the worker exits by itself
  Status lost_status;
  int in_flight = -1;       // announced ("begin") and without a result when lost
};

// Sends `req` to `w` and reads its events into `ledger` and `baseline` until
// "done" or the worker is lost. A candidate in flight gets
// `candidate_timeout_s` seconds, everything else `setup_timeout_s`.
BatchEnd ConverseBatch(WorkerProcess& w, const worker::TuneRequest& req, double candidate_timeout_s,
                       double setup_timeout_s, TuneLedger& ledger, Baseline& baseline) {
  BatchEnd end;
  Status st = w.Send(worker::EncodeTuneRequest(req));
  if (!st.ok()) {
    end.lost = true;
    end.lost_status = st;
    return end;
  }
  while (!end.lost && !end.done) {
    auto frame = w.Receive(end.in_flight >= 0 ? candidate_timeout_s : setup_timeout_s);
    auto ev = frame.ok() ? worker::DecodeEvent(*frame) : Expected<worker::Event>(frame.status());
    if (!ev.ok()) {
      if (frame.ok()) w.Kill();  // garbage: the stream can no longer be trusted
      end.lost = true;
      end.lost_status = ev.status();
      break;
    }
    switch (ev->type) {
      case worker::EventType::kBegin:
        end.in_flight = ev->id;
        break;
      case worker::EventType::kResult:
        ledger.SetResult(ev->result.id, ev->result);
        if (end.in_flight == ev->result.id) end.in_flight = -1;
        if (ev->result.fatal) {
          // The worker's CUDA context is gone; it exits by itself.
          end.fatal_seen = true;
          end.lost = true;
          end.lost_status = Status(StatusCode::kCrashed, "worker exited after a fatal CUDA error");
          w.Kill();
        }
        ledger.Notify(baseline.us);
        break;
      case worker::EventType::kProgress:
        ledger.MarkCompiled(ev->compiled_ids);
        ledger.Notify(baseline.us);
        break;
      case worker::EventType::kBaseline:
        baseline.known = true;
        baseline.us = ev->baseline_us;
        baseline.error = ev->error;
        ledger.Notify(baseline.us);
        break;
      case worker::EventType::kDone:
        end.done = true;
        if (!ev->error.empty()) ledger.FinishRest(Outcome::kSkipped, "worker: " + ev->error);
        break;
      case worker::EventType::kHelloReply:
        break;  // not expected here; harmless
    }
  }
  return end;
}

// After a lost worker: the candidate in flight timed out or crashed; a loss
// outside any candidate (startup, compiles, reference, baseline) twice in a
// row ends the call.
void RecordLoss(const BatchEnd& end, double candidate_timeout_s, int* setup_failures, TuneLedger& ledger) {
  if (end.in_flight >= 0) {
    worker::CandidateResult r;
    if (end.lost_status.code() == StatusCode::kTimeout) {
      r.outcome = Outcome::kTimeout;
      r.error = "candidate exceeded the " + std::to_string(candidate_timeout_s) +
                " s timeout (hang or endless loop); " + end.lost_status.message();
    } else {
      r.outcome = Outcome::kCrashed;
      r.error = "the worker died while running this candidate: " + end.lost_status.message();
    }
    ledger.SetResult(end.in_flight, std::move(r));
  } else if (!end.fatal_seen && ++*setup_failures >= 2) {
    ledger.FinishRest(end.lost_status.code() == StatusCode::kTimeout ? Outcome::kTimeout : Outcome::kCrashed,
                      "the worker failed before running candidates: " + end.lost_status.ToString());
  }
}

}  // namespace

Expected<WorkerTuneResult> WorkerPool::Tune(const worker::TuneRequest& request, double candidate_timeout_s,
                                            double budget_s, const WorkerProgressCallback& on_progress) {
  const auto start = Clock::now();
  WorkerTuneResult out;
  TuneLedger ledger(request, on_progress);
  Baseline baseline;
  baseline.known = !request.measure_baseline;
  baseline.us = request.known_baseline_us;
  int setup_failures = 0;

  while (ledger.remaining() > 0) {
    const double elapsed = SecondsSince(start);
    if (elapsed >= budget_s) {
      ledger.FinishRest(Outcome::kSkipped, "tuning budget exhausted");
      break;
    }
    auto acquired = Acquire();
    if (!acquired.ok()) {
      if (acquired.status().code() == StatusCode::kNotFound) return acquired.status();
      ledger.FinishRest(Outcome::kCrashed, "could not start a worker: " + acquired.status().ToString());
      break;
    }
    std::unique_ptr<WorkerProcess> w = std::move(*acquired);

    worker::TuneRequest req = request;
    req.items = ledger.OpenItems();
    req.measure_baseline = request.measure_baseline && !baseline.known;
    req.known_baseline_us = baseline.us;
    req.budget_s = budget_s - elapsed;
    req.progress = request.progress || static_cast<bool>(on_progress);

    const BatchEnd end =
        ConverseBatch(*w, req, candidate_timeout_s, options_.startup_timeout_s, ledger, baseline);
    if (end.lost) {
      ++out.respawns;
      RecordLoss(end, candidate_timeout_s, &setup_failures, ledger);
      if (end.in_flight >= 0) ledger.Notify(baseline.us);
    } else if (end.done && ledger.remaining() > 0) {
      ledger.FinishRest(Outcome::kSkipped, "the worker finished the batch without a result for this candidate");
    }
    Release(std::move(w));
    if (end.done) break;
  }
  out.results = ledger.TakeResults();
  out.baseline_us = baseline.us;
  out.baseline_error = baseline.error;
  return out;
}

}  // namespace dice::runtime
