// The process's tuners (one per device) and background tune queue (tune_queue.h).
#include "tune_queue.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "dice/core/log.h"
#include "dice/generator/templates.h"
#include "dice/runtime/error_headline.h"
#include "dice/runtime/outcome.h"
#include "dice/runtime/prebuild.h"
#include "runtime_state.h"

namespace dice::torch_ext {
namespace {

using Clock = std::chrono::steady_clock;

// How often a job whose key another process has claimed looks again.
constexpr std::chrono::milliseconds kClaimPoll{1000};

struct TuneJob {
  Task task;
  std::vector<std::string> captured;
  TuneDone done;
  int device = -1;
  Clock::time_point not_before{};  // a job waiting on another process's claim
  bool told_waiting = false;       // its "being tuned by" line was logged
};

struct TunerState {
  std::mutex tune_mu;  // one Tune at a time; guards the fields up to `generators`
  std::map<int, std::unique_ptr<runtime::Tuner>> tuners;  // by CUDA device; each binds its worker there
  std::shared_ptr<cache::Store> tuner_store;  // the store the tuners read and write
  runtime::TuneOptions tuner_options;         // the options they were built with (before the device and claim)
  std::vector<std::shared_ptr<KernelGenerator>> generators;  // empty = TemplateGenerator only

  std::mutex queue_mu;  // guards queue, waiting, worker_started
  std::condition_variable queue_cv;
  std::deque<TuneJob> queue;
  std::deque<TuneJob> waiting;  // jobs whose key another process tunes, by not_before
  bool worker_started = false;
};

TunerState& T() {
  static TunerState* t = new TunerState;  // leaked: the tuner thread may outlive static destruction
  return *t;
}

// DICE_CLAIM_TTL_S (seconds, 0 = no claims) or DefaultClaimTtl.
double ClaimTtl(const runtime::TuneOptions& o) {
  if (o.claim_ttl_s > 0) return o.claim_ttl_s;
  const char* env = std::getenv("DICE_CLAIM_TTL_S");
  if (env != nullptr && env[0] != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v >= 0) return v;
    std::fprintf(stderr, "dice: warning: DICE_CLAIM_TTL_S='%s' is not a number of seconds; using the default\n", env);
  }
  return runtime::DefaultClaimTtl(o);
}

// The next job to run: the oldest queued one, else the first waiting one
// whose time has come. Blocks until there is one. REQUIRES: lock on queue_mu.
TuneJob NextJob(TunerState& t, std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (!t.queue.empty()) {
      TuneJob job = std::move(t.queue.front());
      t.queue.pop_front();
      return job;
    }
    if (t.waiting.empty()) {
      t.queue_cv.wait(lock);
      continue;
    }
    if (t.waiting.front().not_before <= Clock::now()) {
      TuneJob job = std::move(t.waiting.front());
      t.waiting.pop_front();
      return job;
    }
    t.queue_cv.wait_until(lock, t.waiting.front().not_before);
  }
}

void TunerThreadMain() {
  TunerState& t = T();
  for (;;) {
    TuneJob job;
    {
      std::unique_lock<std::mutex> lock(t.queue_mu);
      job = NextJob(t, lock);
    }
    auto rep = TuneNow(job.task, job.captured.empty() ? nullptr : &job.captured, {}, job.device);
    // Torch TUs cannot include spdlog (LibTorch ships its own fmt): plain
    // stderr, filtered by the process's log level (dice/core/log.h).
    if (rep.ok() && !rep->claimed_by.empty()) {
      // Another process tunes this key: the fallback keeps running; look
      // again later (its winner is then served from the cache).
      if (!job.told_waiting && LogEnabled(LogLevel::kInfo)) {
        std::fprintf(stderr, "dice: %s is being tuned by %s; the fallback runs until its winner is stored\n",
                     rep->description.c_str(), rep->claimed_by.c_str());
      }
      job.told_waiting = true;
      job.not_before = Clock::now() + kClaimPoll;
      std::lock_guard<std::mutex> lock(t.queue_mu);
      t.waiting.push_back(std::move(job));
      continue;
    }
    if (!rep.ok()) {
      if (LogEnabled(LogLevel::kWarn)) {
        std::fprintf(stderr, "dice: tuning %s failed: %s\n", job.task.Describe().c_str(),
                     rep.status().ToString().c_str());
      }
    } else if (LogEnabled(LogLevel::kInfo)) {
      std::fprintf(stderr, "dice: tuned %s: speedup %.2fx (%s)\n", rep->description.c_str(), rep->speedup,
                   rep->winner_origin.empty() ? "no winner" : rep->winner_origin.c_str());
    }
    if (job.done) job.done(rep);
  }
}

}  // namespace

namespace {

// The tuner of `device` (-1: the settings' device), built or rebuilt for the
// current store and tune options. Call with t.tune_mu held.
Expected<runtime::Tuner*> TunerFor(TunerState& t, int device) {
  std::shared_ptr<cache::Store> store;
  {
    auto locked = LockStore();
    if (!locked.ok()) return locked.status();
    store = locked->store;
  }
  // The tuners write to the store of the cache dir they were built under,
  // with the tune options of that time. When either has changed since (a
  // second optimize() in this process with another cache_dir or other
  // options), new tuners are built; the old store stays open until its
  // tuners are gone. (It used to be freed under the old tuner: a segfault
  // in Store::GetWinner on the H200.) PyTorch's TF32 switches are part of
  // the options, read now: flipping one rebuilds the tuners.
  const runtime::TuneOptions options = CurrentTuneOptions();
  if (t.tuner_store != store || t.tuner_options != options) {
    t.tuners.clear();
    t.tuner_store = store;
    t.tuner_options = options;
  }
  // One tuner per device: its worker is bound to that GPU (by UUID), never
  // to cuda:0 by default; claims tell the processes sharing the cache apart.
  if (device < 0) device = options.device;
  std::unique_ptr<runtime::Tuner>& tuner = t.tuners[device];
  if (!tuner) {
    std::vector<std::shared_ptr<KernelGenerator>> gens = t.generators;
    if (gens.empty()) gens.push_back(std::make_shared<generator::TemplateGenerator>());
    runtime::TuneOptions on_device = options;
    on_device.device = device;
    on_device.claim_ttl_s = ClaimTtl(options);
    tuner = std::make_unique<runtime::Tuner>(store.get(), std::move(gens), on_device);
  }
  return tuner.get();
}

}  // namespace

Expected<runtime::TuneReport> TuneNow(const Task& task, const std::vector<std::string>* captured,
                                      const runtime::TuneProgressCallback& on_progress, int device) {
  TunerState& t = T();
  std::lock_guard<std::mutex> tune_lock(t.tune_mu);
  auto tuner = TunerFor(t, device);
  if (!tuner.ok()) return tuner.status();
  // The tuning worker is another process: blocks this process's caching
  // allocator keeps for reuse are invisible to it. On a model that fills the
  // GPU (a 7 GB activation, an Inductor workspace) the worker's reference run
  // then fails with CUDA out of memory and every candidate is skipped.
  ReleaseFrameworkCachedMemory();
  return (*tuner)->Tune(task, captured, on_progress);
}

Expected<runtime::PrebuildReport> PrebuildNow(const std::vector<std::pair<Task, int>>& tasks) {
  // Compile-only tunes (no GPU) build within their budget, one at a time:
  // nothing to gain from building ahead there.
  const int jobs = GetRuntimeSettings().tune.compile_only ? 0 : runtime::DefaultPrebuildJobs();
  std::vector<runtime::PrebuildItem> items;
  if (jobs > 0) {
    TunerState& t = T();
    std::lock_guard<std::mutex> tune_lock(t.tune_mu);  // the generators are asked one task at a time
    for (const auto& [task, device] : tasks) {
      auto tuner = TunerFor(t, device);
      if (!tuner.ok()) return tuner.status();
      auto pending = (*tuner)->PendingExtensionCandidates(task);
      if (!pending.ok()) return pending.status();
      for (Candidate& c : *pending)
        items.push_back({std::move(c), task.target.arch, static_cast<int>(task.inputs.size())});
    }
  }
  if (items.empty()) return runtime::PrebuildReport();
  return runtime::PrebuildExtensions(items, jobs);  // no lock held: tunes may run meanwhile
}

void EnqueueTune(Task task, std::vector<std::string> captured, TuneDone done, int device) {
  TunerState& t = T();
  std::lock_guard<std::mutex> lock(t.queue_mu);
  if (!t.worker_started) {
    std::thread(TunerThreadMain).detach();
    t.worker_started = true;
  }
  TuneJob job;
  job.task = std::move(task);
  job.captured = std::move(captured);
  job.done = std::move(done);
  job.device = device;
  t.queue.push_back(std::move(job));
  t.queue_cv.notify_one();
}

void SetTunerGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators) {
  TunerState& t = T();
  std::lock_guard<std::mutex> tune_lock(t.tune_mu);
  t.generators = std::move(generators);
  t.tuners.clear();  // the next tune builds tuners with them
}
std::string NoWinnerText(const runtime::TuneReport& rep, double margin) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "no winner (tuned: %d tried, %d compiled, %d verified", rep.tried, rep.compiled,
                rep.verified);
  std::string out = buf;
  const runtime::CandidateOutcome* best = nullptr;
  const runtime::CandidateOutcome* failed = nullptr;
  for (const auto& o : rep.outcomes) {
    if (o.time_us > 0 && (best == nullptr || o.time_us < best->time_us)) best = &o;
    if (failed == nullptr && !runtime::IsVerified(o.outcome) && o.outcome != runtime::Outcome::kCompiled) failed = &o;
  }
  if (rep.baseline_us > 0) {
    std::snprintf(buf, sizeof(buf), "; baseline %.1f µs", rep.baseline_us);
    out += buf;
  }
  if (best != nullptr) {
    char b2[256];
    std::snprintf(b2, sizeof(b2), ", best %s %.1f µs, needs < %.2fx of it", best->origin.c_str(), best->time_us,
                  1.0 - margin);
    out += b2;
  }
  if (failed != nullptr) {
    out += "; first failure " + failed->origin + ": " + std::string(runtime::OutcomeName(failed->outcome));
    if (!failed->error.empty()) {
      // The cause (a compile log or verifier message can run to kilobytes).
      out += " (" + runtime::ErrorHeadline(failed->error, /*max_chars=*/200) + ")";
    }
  }
  return out + ")";
}

}  // namespace dice::torch_ext
