// tuner.cc — Tuner (tuner.h): task -> candidates -> worker (compile, verify,
// time) -> winner -> cache. The user's process never runs a candidate: all
// GPU work happens in a dice-worker (worker_pool.h). compile_only mode
// compiles in-process with NVRTC and needs no GPU and no worker.
#include "dice/runtime/tuner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "dice/runtime/compiler.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/worker_pool.h"
#include "dice/runtime/worker_protocol.h"

#ifndef DICE_VERSION_STRING
#define DICE_VERSION_STRING "0.1.0"
#endif

namespace dice {
namespace {

// Stores one candidate's outcome in the cache's attempt log (best effort:
// a failed write is logged, never fatal).
void RecordOutcome(cache::Store* store, const std::string& task_key, const CandidateOutcome& o) {
  cache::AttemptRecord a;
  a.task_key = task_key;
  a.candidate_hash = o.hash;
  a.origin = o.origin;
  a.outcome = o.outcome;
  a.error = o.error;
  a.time_us = o.time_us;
  Status st = store->RecordAttempt(std::move(a));
  if (!st.ok()) spdlog::warn("dice: could not record an attempt: {}", st.ToString());
}

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// First `max_lines` lines of a log / error text.
std::string FirstLines(const std::string& text, int max_lines = 12) {
  size_t pos = 0;
  for (int i = 0; i < max_lines; ++i) {
    pos = text.find('\n', pos);
    if (pos == std::string::npos) return text;
    ++pos;
  }
  return text.substr(0, pos) + "...";
}

// A file holding the captured inputs back to back, removed on destruction.
class CapturedFile {
 public:
  ~CapturedFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  // Writes `inputs` (already checked against the task) to /dev/shm (or /tmp).
  Status Write(const std::vector<std::string>& inputs) {
    struct stat st;
    std::string dir = (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
                          ? "/dev/shm"
                          : "/tmp";
    std::string tmpl = dir + "/dice-captured-XXXXXX";
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) return Status(StatusCode::kIoError, "mkstemp " + tmpl + ": " + strerror(errno));
    path_ = tmpl;
    for (const std::string& bytes : inputs) {
      const char* p = bytes.data();
      size_t left = bytes.size();
      while (left > 0) {
        ssize_t w = ::write(fd, p, left);
        if (w < 0) {
          if (errno == EINTR) continue;
          Status s(StatusCode::kIoError, "write " + path_ + ": " + strerror(errno));
          ::close(fd);
          return s;
        }
        p += w;
        left -= static_cast<size_t>(w);
        bytes_ += static_cast<uint64_t>(w);
      }
    }
    ::close(fd);
    return Status::Ok();
  }
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  uint64_t bytes_ = 0;
};

bool IsVerifiedOutcome(const std::string& o) { return o == "verified" || o == "slower" || o == "winner"; }
bool IsCompiledOutcome(const std::string& o) {
  return IsVerifiedOutcome(o) || o == "verify_failed" || o == "crashed" || o == "timeout";
}

}  // namespace

struct Tuner::Impl {
  cache::Store* store = nullptr;
  std::vector<std::shared_ptr<KernelGenerator>> generators;
  TuneOptions options;
  std::unique_ptr<WorkerPool> pool;
  std::optional<worker::HelloReply> hello;

  Expected<worker::HelloReply> EnsureWorker() {
    if (hello) return *hello;
    if (!pool) {
      WorkerPoolOptions po;
      po.worker_path = options.worker_path;
      po.size = 1;
      // The setup phase includes the nvcc builds of extension-form candidates.
      po.startup_timeout_s = std::max(po.startup_timeout_s, 120 + 2 * options.extension_compile_timeout_s);
      pool = std::make_unique<WorkerPool>(po);
    }
    auto h = pool->Hello();
    if (!h.ok()) return h.status().WithContext("starting dice-worker");
    if (h->protocol_version != worker::kProtocolVersion) {
      return Status(StatusCode::kInternal, "dice-worker speaks protocol " + std::to_string(h->protocol_version) +
                                               ", this library " + std::to_string(worker::kProtocolVersion) +
                                               " (mismatched build?)");
    }
    if (!h->has_device) return Status(StatusCode::kNoDevice, "dice-worker found no GPU: " + h->no_device_reason);
    hello = *h;
    return *hello;
  }
};

Tuner::Tuner(cache::Store* store, std::vector<std::shared_ptr<KernelGenerator>> generators, TuneOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = store;
  impl_->generators = std::move(generators);
  impl_->options = std::move(options);
}

Tuner::~Tuner() = default;

Expected<TuneReport> Tuner::Tune(const Task& task, const std::vector<std::string>* captured_inputs) {
  const auto start = Clock::now();
  const TuneOptions& opt = impl_->options;
  TuneReport report;
  report.task_key = task.Key();
  report.description = task.Describe();

  if (captured_inputs != nullptr) {
    if (captured_inputs->size() != task.inputs.size()) {
      return Status(StatusCode::kInvalidArgument, "captured inputs: got " + std::to_string(captured_inputs->size()) +
                                                      " buffers for " + std::to_string(task.inputs.size()) +
                                                      " task inputs");
    }
    for (size_t i = 0; i < task.inputs.size(); ++i) {
      if (static_cast<int64_t>((*captured_inputs)[i].size()) != task.inputs[i].nbytes()) {
        return Status(StatusCode::kInvalidArgument,
                      "captured input " + std::to_string(i) + " holds " + std::to_string((*captured_inputs)[i].size()) +
                          " bytes, expected " + std::to_string(task.inputs[i].nbytes()) + " for " +
                          task.inputs[i].ToString());
      }
    }
  }

  // A cached winner is served as is: nothing generated, nothing compiled.
  if (!opt.compile_only && impl_->store != nullptr) {
    auto cached = impl_->store->GetWinner(report.task_key);
    if (!cached.ok()) return cached.status().WithContext("reading the kernel cache");
    if (cached->has_value() && (**cached).verified) {
      const cache::WinnerRecord& w = **cached;
      report.from_cache = true;
      report.winner_origin = w.origin;
      report.baseline_us = w.baseline_us;
      report.best_us = w.best_us;
      report.speedup = w.speedup;
      report.tune_seconds = SecondsSince(start);
      return report;
    }
  }

  // A pulled (unverified) entry is re-verified and re-timed here before it
  // is ever served: it becomes the only candidate (DESIGN.md "HTTP sharing").
  std::optional<cache::WinnerRecord> pulled;
  if (!opt.compile_only && impl_->store != nullptr) {
    auto cached = impl_->store->GetWinner(report.task_key);
    if (!cached.ok()) return cached.status().WithContext("reading the kernel cache");
    if (cached->has_value() && !(**cached).verified) pulled = std::move(**cached);
  }

  // The GPU check comes before generation so a GPU-less machine fails fast.
  std::optional<worker::HelloReply> hello;
  if (!opt.compile_only) {
    auto h = impl_->EnsureWorker();
    if (!h.ok()) return h.status();
    hello = *h;
    if (hello->device.arch != task.target.arch) {
      return Status(StatusCode::kInvalidArgument, "task '" + report.description + "' targets " + task.target.arch +
                                                      " but the worker's GPU " + hello->device.name + " is " +
                                                      hello->device.arch);
    }
  }

  // Generate, dedupe, and drop what the cache says was already attempted or
  // what the precision policy forbids.
  std::vector<Candidate> candidates;
  std::unordered_set<std::string> seen;
  if (pulled) {
    auto plan = LaunchPlan::FromJson(pulled->launch_plan_json);
    if (!plan.ok()) {
      CandidateOutcome o;
      o.origin = pulled->origin;
      o.hash = pulled->candidate_hash;
      o.outcome = "verify_failed";
      o.error = "pulled entry has a bad launch plan: " + plan.status().message();
      report.outcomes.push_back(std::move(o));
      auto removed = impl_->store->RemoveUnverifiedWinner(report.task_key);
      if (!removed.ok()) return removed.status();
      report.tune_seconds = SecondsSince(start);
      return report;
    }
    Candidate c;
    c.origin = pulled->origin;
    c.form = CandidateForm::kDevice;
    c.source = pulled->source;
    c.plan = *plan;
    c.reduced_precision = pulled->reduced_precision;
    candidates.push_back(std::move(c));
  }
  for (const auto& gen : impl_->generators) {
    if (pulled) break;  // re-verification only: the generators are not asked
    if (SecondsSince(start) >= opt.budget_s) break;
    auto generated = gen->Generate(task, opt.max_candidates);
    // Outputs that did not become candidates (a model answer without code):
    // failed attempts with their reason, identified by the text's hash.
    for (GenerationFailure& f : gen->TakeFailures()) {
      CandidateOutcome o;
      o.origin = f.origin;
      Candidate raw;
      raw.form = CandidateForm::kExtension;
      raw.source = f.text;
      o.hash = raw.Hash();
      o.outcome = "parse_error";
      o.error = f.reason;
      if (impl_->store != nullptr && !opt.compile_only) RecordOutcome(impl_->store, report.task_key, o);
      report.outcomes.push_back(std::move(o));
    }
    if (!generated.ok()) {
      CandidateOutcome o;
      o.origin = "generator:" + gen->name();
      o.outcome = "skipped";
      o.error = generated.status().ToString();
      report.outcomes.push_back(std::move(o));
      continue;
    }
    int taken = 0;
    for (Candidate& c : *generated) {
      if (taken >= opt.max_candidates) break;
      std::string hash = c.Hash();
      if (!seen.insert(hash).second) continue;  // the same kernel twice
      CandidateOutcome skip;
      skip.origin = c.origin;
      skip.hash = hash;
      skip.outcome = "skipped";
      if (impl_->store != nullptr && !opt.compile_only) {
        auto attempted = impl_->store->WasAttempted(report.task_key, hash);
        if (!attempted.ok()) return attempted.status().WithContext("reading the attempts table");
        if (*attempted) {
          skip.error = "already attempted for this task (cache attempts table)";
          report.outcomes.push_back(std::move(skip));
          continue;
        }
      }
      if (c.reduced_precision && !opt.allow_reduced_precision) {
        skip.error = "uses reduced precision (TF32 or lower) internally; not allowed by the precision policy";
        report.outcomes.push_back(std::move(skip));
        continue;
      }
      ++taken;
      candidates.push_back(std::move(c));
    }
  }
  report.tried = static_cast<int>(candidates.size());

  if (opt.compile_only) {
    // Device form with NVRTC (in parallel), extension form with nvcc (one at
    // a time: a LibTorch-header build takes ~1-2 GB and tens of seconds).
    std::vector<Candidate> device;
    for (const Candidate& c : candidates) {
      if (c.form == CandidateForm::kDevice) device.push_back(c);
    }
    auto compiled = CompileAll(device, task.target.arch);
    ExtensionCompileOptions eo;
    eo.timeout_s = opt.extension_compile_timeout_s;
    size_t next_device = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      CandidateOutcome o;
      o.origin = candidates[i].origin;
      o.hash = candidates[i].Hash();
      Status st;
      if (candidates[i].form == CandidateForm::kExtension && SecondsSince(start) >= opt.budget_s) {
        o.outcome = "skipped";
        o.error = "tuning budget exhausted";
        report.outcomes.push_back(std::move(o));
        continue;
      }
      if (candidates[i].form == CandidateForm::kDevice) {
        const auto& r = compiled[next_device++];
        if (r.ok()) o.compile_ms = r->compile_ms;
        st = r.status();
      } else {
        auto r = CompileExtension(candidates[i], task.target.arch, static_cast<int>(task.inputs.size()), eo);
        if (r.ok()) o.compile_ms = (*r)->compile_ms();
        st = r.status();
      }
      if (st.ok()) {
        o.outcome = "compiled";
        ++report.compiled;
      } else {
        o.outcome = "compile_error";
        o.error = FirstLines(st.message());
      }
      report.outcomes.push_back(std::move(o));
    }
    report.tune_seconds = SecondsSince(start);
    return report;
  }

  if (candidates.empty()) {
    report.tune_seconds = SecondsSince(start);
    return report;
  }

  // Captured real inputs go to the worker through a size-capped file.
  CapturedFile captured;
  if (captured_inputs != nullptr) {
    uint64_t total = 0;
    for (const auto& b : *captured_inputs) total += b.size();
    if (total > worker::kMaxCapturedBytes) {
      spdlog::warn("dice: captured inputs of {} bytes exceed the {} byte cap; verifying with random inputs only",
                   total, worker::kMaxCapturedBytes);
    } else {
      Status st = captured.Write(*captured_inputs);
      if (!st.ok()) spdlog::warn("dice: captured inputs not passed to the worker: {}", st.ToString());
    }
  }

  worker::TuneRequest req;
  req.graph_canonical = ir::Canonical(task.graph);
  req.inputs = task.inputs;
  req.arch = task.target.arch;
  req.device = opt.device;
  req.trials = std::max(opt.trials, 1);
  req.allow_reduced_precision = opt.allow_reduced_precision;
  req.measure_baseline = true;
  if (!captured.path().empty()) {
    req.captured_path = captured.path();
    req.captured_bytes = captured.bytes();
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    req.items.push_back(worker::TuneItem{static_cast<int>(i), candidates[i]});
  }
  const double budget_left = std::max(opt.budget_s - SecondsSince(start), 0.0);
  req.budget_s = budget_left;
  req.extension_compile_timeout_s = opt.extension_compile_timeout_s;
  auto run = impl_->pool->Tune(req, opt.candidate_timeout_s, budget_left);
  if (!run.ok()) return run.status();
  // The worker that served this call may have been replaced; its facts stay.

  report.baseline_us = run->baseline_us;
  // Winner: the fastest verified candidate that beats the baseline by the margin.
  const double threshold = report.baseline_us * (1.0 - opt.margin);
  int best = -1;
  for (size_t i = 0; i < run->results.size(); ++i) {
    const auto& r = run->results[i];
    if (r.outcome != "verified" || r.time_us <= 0) continue;
    if (best < 0 || r.time_us < run->results[best].time_us) best = static_cast<int>(i);
  }
  const bool have_winner = best >= 0 && report.baseline_us > 0 && run->results[best].time_us < threshold;

  for (size_t i = 0; i < run->results.size(); ++i) {
    const auto& r = run->results[i];
    const Candidate& c = candidates[static_cast<size_t>(r.id)];
    CandidateOutcome o;
    o.origin = c.origin;
    o.hash = c.Hash();
    o.outcome = r.outcome;
    o.error = FirstLines(r.error);
    o.compile_ms = r.compile_ms;
    o.time_us = r.time_us;
    if (r.outcome == "verified") {
      if (have_winner && static_cast<int>(i) == best) {
        o.outcome = "winner";
      } else if (report.baseline_us <= 0) {
        o.error = "no baseline to compare with" +
                  (run->baseline_error.empty() ? std::string() : ": " + run->baseline_error);
      } else if (r.time_us >= threshold) {
        o.outcome = "slower";
      }
    }
    if (IsCompiledOutcome(o.outcome)) ++report.compiled;
    if (IsVerifiedOutcome(o.outcome)) ++report.verified;
    if (impl_->store != nullptr && o.outcome != "skipped") RecordOutcome(impl_->store, report.task_key, o);
    report.outcomes.push_back(std::move(o));
  }

  if (have_winner) {
    const auto& r = run->results[best];
    const Candidate& c = candidates[static_cast<size_t>(r.id)];
    report.winner_origin = c.origin;
    report.best_us = r.time_us;
    report.speedup = report.baseline_us / r.time_us;
    if (impl_->store != nullptr) {
      cache::WinnerRecord w;
      w.task_key = report.task_key;
      w.graph_canonical = req.graph_canonical;
      for (size_t i = 0; i < task.inputs.size(); ++i) {
        if (i) w.input_specs += ';';
        w.input_specs += task.inputs[i].ToString();
      }
      w.arch = task.target.arch;
      w.gpu_name = hello->device.name;
      w.origin = c.origin;
      w.candidate_hash = c.Hash();
      w.source = c.source;
      w.cubin = r.cubin;
      w.launch_plan_json = c.plan.ToJson();
      w.verified = true;  // verified and timed on this GPU just now
      if (pulled) w.pulled_from = pulled->pulled_from;
      w.baseline_us = report.baseline_us;
      w.best_us = r.time_us;
      w.speedup = report.speedup;
      w.reduced_precision = c.reduced_precision;
      w.versions_json = nlohmann::json{{"driver", hello->device.driver_major},
                                       {"nvrtc", hello->nvrtc_version},
                                       {"abi", kRuntimeAbiVersion},
                                       {"torch", hello->torch_version},
                                       {"dice", DICE_VERSION_STRING},
                                       // extension form: `cubin` holds the nvcc-built shared object
                                       {"form", c.form == CandidateForm::kExtension ? "extension" : "device"}}
                            .dump();
      auto put = impl_->store->PutWinner(std::move(w));
      if (!put.ok()) return put.status().WithContext("storing the winner");
    }
  }
  if (pulled && !have_winner) {
    // Failed re-verification (wrong, crashed, or not faster here): recorded
    // above as an attempt and never served.
    auto removed = impl_->store->RemoveUnverifiedWinner(report.task_key);
    if (!removed.ok()) return removed.status().WithContext("dropping a pulled kernel that failed re-verification");
  }
  report.tune_seconds = SecondsSince(start);
  return report;
}

}  // namespace dice
