// The process's tuner and background tune queue (tune_queue.h).
#include "tune_queue.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "dice/core/log.h"
#include "dice/generator/templates.h"
#include "dice/runtime/outcome.h"
#include "runtime_state.h"

namespace dice::torch_ext {
namespace {

struct TuneJob {
  Task task;
  std::vector<std::string> captured;
  TuneDone done;
};

struct TunerState {
  std::mutex tune_mu;  // one Tune at a time; guards the fields up to `generators`
  std::unique_ptr<runtime::Tuner> tuner;
  std::shared_ptr<cache::Store> tuner_store;  // the store `tuner` reads and writes
  runtime::TuneOptions tuner_options;                  // the options `tuner` was built with
  std::vector<std::shared_ptr<KernelGenerator>> generators;  // empty = TemplateGenerator only

  std::mutex queue_mu;  // guards queue, worker_started
  std::condition_variable queue_cv;
  std::deque<TuneJob> queue;
  bool worker_started = false;
};

TunerState& T() {
  static TunerState* t = new TunerState;  // leaked: the tuner thread may outlive static destruction
  return *t;
}

void TunerThreadMain() {
  TunerState& t = T();
  for (;;) {
    TuneJob job;
    {
      std::unique_lock<std::mutex> lock(t.queue_mu);
      t.queue_cv.wait(lock, [&] { return !t.queue.empty(); });
      job = std::move(t.queue.front());
      t.queue.pop_front();
    }
    auto rep = TuneNow(job.task, job.captured.empty() ? nullptr : &job.captured);
    // Torch TUs cannot include spdlog (LibTorch ships its own fmt): plain
    // stderr, filtered by the process's log level (dice/core/log.h).
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

Expected<runtime::TuneReport> TuneNow(const Task& task, const std::vector<std::string>* captured,
                             const runtime::TuneProgressCallback& on_progress) {
  TunerState& t = T();
  std::lock_guard<std::mutex> tune_lock(t.tune_mu);
  std::shared_ptr<cache::Store> store;
  {
    auto locked = LockStore();
    if (!locked.ok()) return locked.status();
    store = locked->store;
  }
  // A tuner writes to the store of the cache dir it was built under, with
  // the tune options of that time. When either has changed since (a second
  // optimize() in this process with another cache_dir or other options), a
  // new tuner is built; the old store stays open until its tuner is gone.
  // (It used to be freed under the old tuner: a segfault in
  // Store::GetWinner on the H200.)
  const runtime::TuneOptions options = GetRuntimeSettings().tune;
  if (!t.tuner || t.tuner_store != store || t.tuner_options != options) {
    std::vector<std::shared_ptr<KernelGenerator>> gens = t.generators;
    if (gens.empty()) gens.push_back(std::make_shared<generator::TemplateGenerator>());
    t.tuner = std::make_unique<runtime::Tuner>(store.get(), std::move(gens), options);
    t.tuner_store = store;
    t.tuner_options = options;
  }
  // The tuning worker is another process: blocks this process's caching
  // allocator keeps for reuse are invisible to it. On a model that fills the
  // GPU (a 7 GB activation, an Inductor workspace) the worker's reference run
  // then fails with CUDA out of memory and every candidate is skipped.
  ReleaseFrameworkCachedMemory();
  return t.tuner->Tune(task, captured, on_progress);
}

void EnqueueTune(Task task, std::vector<std::string> captured, TuneDone done) {
  TunerState& t = T();
  std::lock_guard<std::mutex> lock(t.queue_mu);
  if (!t.worker_started) {
    std::thread(TunerThreadMain).detach();
    t.worker_started = true;
  }
  t.queue.push_back(TuneJob{std::move(task), std::move(captured), std::move(done)});
  t.queue_cv.notify_one();
}

void SetTunerGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators) {
  TunerState& t = T();
  std::lock_guard<std::mutex> tune_lock(t.tune_mu);
  t.generators = std::move(generators);
  t.tuner.reset();  // the next tune builds a Tuner with them
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
      constexpr size_t kMaxError = 200;
      std::string e = failed->error.substr(0, failed->error.find('\n'));
      if (e.size() > kMaxError) e = e.substr(0, kMaxError) + "...";
      out += " (" + e + ")";
    }
  }
  return out + ")";
}

}  // namespace dice::torch_ext
