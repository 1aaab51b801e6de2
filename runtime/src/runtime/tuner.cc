// tuner.cc — Tuner (tuner.h): task -> candidates -> worker (compile, verify,
// time) -> winner -> cache. The user's process never runs a candidate: all
// GPU work happens in a dice-worker (worker_pool.h). compile_only mode
// compiles in-process with NVRTC and needs no GPU and no worker.
#include "dice/runtime/tuner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "dice/runtime/compiler.h"
#include "dice/runtime/device_binding.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/precision_policy.h"
#include "dice/runtime/select_winner.h"
#include "dice/runtime/winner_versions.h"
#include "dice/runtime/worker_pool.h"
#include "dice/runtime/worker_protocol.h"
#include "tune_claim.h"
#include "tune_progress.h"

#ifndef DICE_VERSION_STRING
#define DICE_VERSION_STRING "0.1.0"
#endif

namespace dice::runtime {
namespace {

// Stores one candidate's outcome in the cache's attempt log (best effort:
// a failed write is logged, never fatal).
void RecordOutcome(cache::Store* store, const std::string& task_key, const CandidateOutcome& o) {
  cache::AttemptRecord a;
  a.task_key = task_key;
  a.candidate_hash = o.hash;
  a.origin = o.origin;
  a.outcome = std::string(OutcomeName(o.outcome));
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

// What the generators (or the pulled cache entry) gave one Tune.
struct Generated {
  std::vector<Candidate> candidates;       ///< to compile / measure, in the generators' order
  std::vector<CandidateOutcome> outcomes;  ///< outputs that did not become candidates, and skips
  bool pulled_rejected = false;            ///< the pulled entry cannot even be read (bad launch plan)
};

// What CompileOnly or RunInWorker measured: one entry per candidate, in order.
struct Measured {
  double baseline_us = 0;                  ///< PyTorch on the same subgraph, median µs (0 = unknown)
  std::string baseline_error;              ///< why there is no baseline ("" = fine)
  std::vector<CandidateOutcome> outcomes;  ///< kind = the measured outcome (before SelectWinner)
  std::vector<std::string> binaries;       ///< cubin or extension .so bytes (verified only)
};

CandidateOutcome MakeOutcome(std::string origin, std::string hash, Outcome kind, std::string error) {
  CandidateOutcome o;
  o.origin = std::move(origin);
  o.hash = std::move(hash);
  o.outcome = kind;
  o.error = std::move(error);
  return o;
}

// The one place the precision policy (precision_policy.h) is applied to
// candidates (the worker trusts it): "" = allowed, else the skip's reason.
std::string PrecisionPolicyError(const Candidate& c, const std::string& refusal) {
  if (!c.reduced_precision || refusal.empty()) return "";
  return "uses reduced precision (TF32 or lower) internally; not allowed by the precision policy: " + refusal;
}

// Captured inputs must match the task: one buffer per input, nbytes each.
Status CheckCapturedInputs(const Task& task, const std::vector<std::string>* captured_inputs) {
  if (captured_inputs == nullptr) return Status::Ok();
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
  return Status::Ok();
}

// The pulled entry as the only candidate: re-verification asks no generator.
Generated FromPulled(const cache::WinnerRecord& pulled, const std::string& precision_refusal) {
  Generated g;
  auto plan = LaunchPlan::FromJson(pulled.launch_plan_json);
  if (!plan.ok()) {
    g.outcomes.push_back(MakeOutcome(pulled.origin, pulled.candidate_hash, Outcome::kVerifyFailed,
                                     "pulled entry has a bad launch plan: " + plan.status().message()));
    g.pulled_rejected = true;
    return g;
  }
  Candidate c;
  c.origin = pulled.origin;
  c.form = CandidateForm::kDevice;
  c.source = pulled.source;
  c.plan = *plan;
  c.reduced_precision = pulled.reduced_precision;
  if (std::string why = PrecisionPolicyError(c, precision_refusal); !why.empty()) {
    g.outcomes.push_back(MakeOutcome(c.origin, c.Hash(), Outcome::kSkipped, why));
  } else {
    g.candidates.push_back(std::move(c));
  }
  return g;
}

// SelectWinner's view of the measured candidates.
std::vector<Measurement> Measurements(const std::vector<Candidate>& candidates, const Measured& m) {
  std::vector<Measurement> v;
  v.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    v.push_back(Measurement{m.outcomes[i].outcome, m.outcomes[i].time_us, candidates[i].reduced_precision});
  }
  return v;
}

// Moves the measured outcomes into the report with SelectWinner's verdict,
// counts them, and fills the winner's fields.
void ApplySelection(const std::vector<Candidate>& candidates, const Selection& sel, Measured* m, TuneReport* report) {
  report->baseline_us = m->baseline_us;
  for (size_t i = 0; i < m->outcomes.size(); ++i) {
    CandidateOutcome& o = m->outcomes[i];
    o.outcome = sel.outcomes[i];
    if (o.outcome == Outcome::kVerified && m->baseline_us <= 0) {
      o.error = "no baseline to compare with" +
                (m->baseline_error.empty() ? std::string() : ": " + m->baseline_error);
    }
    if (IsCompiled(o.outcome)) ++report->compiled;
    if (IsVerified(o.outcome)) ++report->verified;
    report->outcomes.push_back(o);
  }
  if (sel.winner >= 0) {
    const CandidateOutcome& w = m->outcomes[static_cast<size_t>(sel.winner)];
    report->winner_origin = candidates[static_cast<size_t>(sel.winner)].origin;
    report->best_us = w.time_us;
    report->speedup = report->baseline_us / w.time_us;
  }
}

// The cache row of a winner verified and timed on this GPU just now.
cache::WinnerRecord MakeWinnerRecord(const Task& task, const Candidate& c, std::string binary,
                                     const TuneReport& report, const worker::HelloReply& hello,
                                     const std::optional<cache::WinnerRecord>& pulled) {
  cache::WinnerRecord w;
  w.task_key = report.task_key;
  w.graph_canonical = ir::Canonical(task.graph);
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (i) w.input_specs += ';';
    w.input_specs += task.inputs[i].ToString();
  }
  w.arch = task.target.arch;
  w.gpu_name = hello.device.name;
  w.origin = c.origin;
  w.candidate_hash = c.Hash();
  w.source = c.source;
  w.cubin = std::move(binary);
  w.launch_plan_json = c.plan.ToJson();
  w.verified = true;
  if (pulled) w.pulled_from = pulled->pulled_from;
  w.baseline_us = report.baseline_us;
  w.best_us = report.best_us;
  w.speedup = report.speedup;
  w.reduced_precision = c.reduced_precision;
  w.versions_json = nlohmann::json{{"driver", hello.device.driver_major},
                                   {"nvrtc", hello.nvrtc_version},
                                   {"abi", kRuntimeAbiVersion},
                                   {"torch", hello.torch_version},
                                   {"dice", DICE_VERSION_STRING},
                                   // extension form: `cubin` holds the nvcc-built shared object (winner_versions.h)
                                   {"cutlass", c.source.find("cutlass/") != std::string::npos ? CutlassVersion() : ""},
                                   {"cublas", CublasVersionFor(c)},
                                   {"form", CandidateFormName(c.form)}}
                        .dump();
  return w;
}

// A verified cached winner, served as is: nothing generated, nothing compiled.
void ServeCached(const cache::WinnerRecord& w, Clock::time_point start, const ProgressSink& progress,
                 TuneReport* report) {
  report->from_cache = true;
  report->winner_origin = w.origin;
  std::tie(report->baseline_us, report->best_us, report->speedup) = std::tie(w.baseline_us, w.best_us, w.speedup);
  report->tune_seconds = SecondsSince(start);
  TuneProgress served;
  served.best_us = w.best_us;
  progress.Send(TunePhase::kDone, served);
}

// A cached row a Tune serves as is: verified, and not refused (RefusedWinnerReason:
// TF32 the policy now refuses, or built against other library versions). A
// refused row is a miss, tuned again; it stays until a new winner replaces it.
bool Serves(const std::optional<cache::WinnerRecord>& row, const Task& task, const TuneOptions& opt) {
  return row && row->verified && RefusedWinnerReason(opt, task.graph, *row).empty();
}

// Tuners of one process are told apart in claims by a sequence number.
std::atomic<int> g_tuner_seq{0};

}  // namespace

struct Tuner::Impl {
  cache::Store* store = nullptr;
  std::vector<std::shared_ptr<KernelGenerator>> generators;
  TuneOptions options;
  std::unique_ptr<WorkerPool> pool;
  std::optional<worker::HelloReply> hello;
  cache::ClaimOwner owner;       // this Tuner as a claim owner (tuning_claim.h)
  int worker_ordinal = -1;       // options.device inside the bound worker (-1: not bound, use options.device)
  std::string bound_uuid;        // the GPU the worker is bound to ("" = not bound)

  // Binds the pool's workers to options.device by UUID (device_binding.h).
  // No driver (a CPU-only machine): unbound, the worker says so in its hello.
  // A driver without UUIDs: unbound, by ordinal. Errors: the ordinal is not
  // a device of this process.
  Status BindDevice(WorkerPoolOptions* po) {
    auto table = QueryDeviceTable();
    if (!table.ok()) return Status::Ok();
    auto b = BindWorkerToDevice(*table, options.device);
    if (!b.ok() && b.status().code() == StatusCode::kInvalidArgument) {
      spdlog::warn("dice: {}; the worker uses CUDA device {} by ordinal", b.status().message(), options.device);
      return Status::Ok();
    }
    if (!b.ok()) return b.status().WithContext("binding the tuning worker");
    po->env = b->env;
    worker_ordinal = b->worker_ordinal;
    bound_uuid = b->device.uuid;
    return Status::Ok();
  }

  bool persists() const { return store != nullptr && !options.compile_only; }

  Expected<worker::HelloReply> EnsureWorker() {
    if (hello) return *hello;
    if (!pool) {
      WorkerPoolOptions po;
      po.worker_path = options.worker_path;
      po.size = 1;
      // The setup phase includes the nvcc builds of extension-form candidates.
      po.startup_timeout_s = std::max(po.startup_timeout_s, 120 + 2 * options.extension_compile_timeout_s);
      DICE_RETURN_IF_ERROR(BindDevice(&po));
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
    if (!bound_uuid.empty() && h->device.uuid != bound_uuid) {
      return Status(StatusCode::kInternal, "dice-worker runs on " + h->device.uuid + ", not on " + bound_uuid +
                                               " (CUDA device " + std::to_string(options.device) + ")");
    }
    hello = *h;
    return *hello;
  }

  // LookupCache: the task's winner row, read once per Tune (none in
  // compile-only or without a store). A verified row is served as is; an
  // unverified (pulled) one is re-verified (DESIGN.md "HTTP sharing").
  Expected<std::optional<cache::WinnerRecord>> LookupCache(const std::string& task_key) const {
    if (!persists()) return std::optional<cache::WinnerRecord>();
    auto cached = store->GetWinner(task_key);
    if (!cached.ok()) return cached.status().WithContext("reading the kernel cache");
    return std::move(*cached);
  }

  // The worker's GPU must be the task's target; checked before generation (a GPU-less machine fails fast).
  Expected<worker::HelloReply> CheckDevice(const Task& task, const std::string& description) {
    auto h = EnsureWorker();
    if (!h.ok()) return h.status();
    if (h->device.arch != task.target.arch) {
      return Status(StatusCode::kInvalidArgument, "task '" + description + "' targets " + task.target.arch +
                                                      " but the worker's GPU " + h->device.name + " is " +
                                                      h->device.arch);
    }
    return *h;
  }

  // Generate: asks the generators in order (within the budget), dedupes, and
  // drops what the attempts table says was tried or what the precision policy
  // forbids; a pulled entry is the only candidate instead.
  Expected<Generated> Generate(const Task& task, const std::string& task_key,
                               const std::optional<cache::WinnerRecord>& pulled, Clock::time_point start) {
    const std::string precision_refusal = ReducedPrecisionRefusal(options, task.graph);
    if (pulled) return FromPulled(*pulled, precision_refusal);
    Generated g;
    std::unordered_set<std::string> seen;
    for (const auto& gen : generators) {
      if (SecondsSince(start) >= options.budget_s) break;
      auto generated = gen->Generate(task, options.max_candidates);
      // Outputs that did not become candidates (a model answer without code):
      // failed attempts with their reason, identified by the text's hash.
      for (GenerationFailure& f : gen->TakeFailures()) {
        Candidate raw;
        raw.form = CandidateForm::kExtension;
        raw.source = f.text;
        g.outcomes.push_back(MakeOutcome(f.origin, raw.Hash(), Outcome::kParseError, f.reason));
      }
      if (!generated.ok()) {
        g.outcomes.push_back(MakeOutcome("generator:" + gen->name(), "", Outcome::kSkipped,
                                         generated.status().ToString()));
        continue;
      }
      int taken = 0;
      for (Candidate& c : *generated) {
        if (taken >= options.max_candidates) break;
        std::string hash = c.Hash();
        if (!seen.insert(hash).second) continue;  // the same kernel twice
        if (persists()) {
          auto attempted = store->WasAttempted(task_key, hash);
          if (!attempted.ok()) return attempted.status().WithContext("reading the attempts table");
          if (*attempted) {
            g.outcomes.push_back(MakeOutcome(c.origin, hash, Outcome::kSkipped,
                                             "already attempted for this task (cache attempts table)"));
            continue;
          }
        }
        if (std::string why = PrecisionPolicyError(c, precision_refusal); !why.empty()) {
          g.outcomes.push_back(MakeOutcome(c.origin, hash, Outcome::kSkipped, why));
          continue;
        }
        ++taken;
        g.candidates.push_back(std::move(c));
      }
    }
    return g;
  }

  // CompileOnly: device form with NVRTC (in parallel), extension form with
  // nvcc (one at a time: a LibTorch-header build takes ~1-2 GB and tens of
  // seconds). Nothing runs; outcomes are kCompiled / kCompileError.
  // `on_compiled(n)`: n candidates compiled so far, after the NVRTC batch and
  // after each nvcc build.
  Measured CompileOnly(const Task& task, const std::vector<Candidate>& candidates, Clock::time_point start,
                       const std::function<void(int)>& on_compiled) const {
    Measured m;
    std::vector<Candidate> device;
    for (const Candidate& c : candidates) {
      if (c.form == CandidateForm::kDevice) device.push_back(c);
    }
    auto compiled = CompileAll(device, task.target.arch);
    int compiled_ok = 0;
    for (const auto& r : compiled) compiled_ok += r.ok() ? 1 : 0;
    if (!device.empty()) on_compiled(compiled_ok);
    ExtensionCompileOptions eo;
    eo.timeout_s = options.extension_compile_timeout_s;
    size_t next_device = 0;
    for (const Candidate& c : candidates) {
      CandidateOutcome o = MakeOutcome(c.origin, c.Hash(), Outcome::kSkipped, "");
      Status st;
      if (c.form == CandidateForm::kDevice) {
        const auto& r = compiled[next_device++];
        if (r.ok()) o.compile_ms = r->compile_ms;
        st = r.status();
      } else if (SecondsSince(start) >= options.budget_s) {
        o.error = "tuning budget exhausted";
        m.outcomes.push_back(std::move(o));
        m.binaries.emplace_back();
        continue;
      } else if (const double left = options.budget_s - SecondsSince(start);
                 left < kMinUncachedNvccBudgetS &&
                 !ExtensionBuildCached(c, task.target.arch, static_cast<int>(task.inputs.size()), eo)) {
        o.error = fmt::format("tuning budget exhausted: an uncached nvcc build (30-90 s) starts only with >= {:.0f} s "
                              "of the group's budget left ({:.1f} s left; --budget-s)", kMinUncachedNvccBudgetS, left);
        m.outcomes.push_back(std::move(o));
        m.binaries.emplace_back();
        continue;
      } else {
        auto r = CompileExtensionCached(c, task.target.arch, static_cast<int>(task.inputs.size()), eo);
        if (r.ok()) o.compile_ms = (*r)->compile_ms();
        st = r.status();
        compiled_ok += st.ok() ? 1 : 0;
        on_compiled(compiled_ok);
      }
      o.outcome = st.ok() ? Outcome::kCompiled : Outcome::kCompileError;
      if (!st.ok()) o.error = FirstLines(st.message());
      m.outcomes.push_back(std::move(o));
      m.binaries.emplace_back();
    }
    return m;
  }

  // RunInWorker: one tune request to the worker pool (compile, verify, time,
  // baseline); captured real inputs travel through a size-capped file.
  // `on_progress` hears the pool's live counts (worker_pool.h).
  Expected<Measured> RunInWorker(const Task& task, const std::vector<Candidate>& candidates,
                                 const std::vector<std::string>* captured_inputs, Clock::time_point start,
                                 const WorkerProgressCallback& on_progress) {
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
    req.device = worker_ordinal >= 0 ? worker_ordinal : options.device;
    req.trials = std::max(options.trials, 1);
    req.allow_reduced_precision = AllowsReducedPrecision(options, task.graph);
    req.measure_baseline = true;
    if (!captured.path().empty()) {
      req.captured_path = captured.path();
      req.captured_bytes = captured.bytes();
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
      req.items.push_back(worker::TuneItem{static_cast<int>(i), candidates[i]});
    }
    const double budget_left = std::max(options.budget_s - SecondsSince(start), 0.0);
    req.budget_s = budget_left;
    req.extension_compile_timeout_s = options.extension_compile_timeout_s;
    auto run = pool->Tune(req, options.candidate_timeout_s, budget_left, on_progress);
    if (!run.ok()) return run.status();
    // The worker that served this call may have been replaced; its facts stay.
    Measured m;
    m.baseline_us = run->baseline_us;
    m.baseline_error = run->baseline_error;
    m.outcomes.resize(candidates.size());
    m.binaries.resize(candidates.size());
    for (auto& r : run->results) {
      if (r.id < 0 || static_cast<size_t>(r.id) >= candidates.size()) continue;
      const Candidate& c = candidates[static_cast<size_t>(r.id)];
      CandidateOutcome& o = m.outcomes[static_cast<size_t>(r.id)];
      o = MakeOutcome(c.origin, c.Hash(), r.outcome, FirstLines(r.error));
      o.compile_ms = r.compile_ms;
      o.time_us = r.time_us;
      m.binaries[static_cast<size_t>(r.id)] = std::move(r.cubin);
    }
    return m;
  }

  // Persist, part 1: the attempts table, each outcome with its cause (the
  // generators' parse errors included). Skips are not attempts. Compile-only
  // records only the failures (compile_error, parse_error): a candidate that
  // merely compiled was never tried, and a GPU tune of the key must still
  // verify and time it (Generate skips what the table holds).
  void RecordAttempts(const TuneReport& report) const {
    if (store == nullptr) return;
    for (const CandidateOutcome& o : report.outcomes) {
      if (o.outcome == Outcome::kSkipped) continue;
      if (options.compile_only && o.outcome == Outcome::kCompiled) continue;
      RecordOutcome(store, report.task_key, o);
    }
  }

  // Persist: the attempts, then (never in compile-only, which verifies
  // nothing) the winner, verified, with its binary, and a pulled entry that
  // did not win here is removed so it is never served. `replaces_refused`:
  // the cached row is a winner the precision policy refused; a new winner
  // replaces it even when slower (PutWinner alone keeps the faster row).
  Status Persist(const Task& task, const std::vector<Candidate>& candidates, Measured& m, const Selection& sel,
                 const std::optional<worker::HelloReply>& device, const std::optional<cache::WinnerRecord>& pulled,
                 bool replaces_refused, const TuneReport& report) {
    RecordAttempts(report);
    if (!persists() || !device) return Status::Ok();
    if (sel.winner >= 0) {
      const size_t w = static_cast<size_t>(sel.winner);
      if (replaces_refused) {
        auto removed = store->RemoveWinner(report.task_key);
        if (!removed.ok()) return removed.status().WithContext("dropping the winner the precision policy refused");
      }
      auto put = store->PutWinner(MakeWinnerRecord(task, candidates[w], std::move(m.binaries[w]), report, *device,
                                                   pulled));
      if (!put.ok()) return put.status().WithContext("storing the winner");
    } else if (pulled) {
      // Failed re-verification (wrong, crashed, not faster here, or not
      // allowed by the precision policy): never served.
      auto removed = store->RemoveUnverifiedWinner(report.task_key);
      if (!removed.ok()) return removed.status().WithContext("dropping a pulled kernel that failed re-verification");
    }
    return Status::Ok();
  }
};

Tuner::Tuner(cache::Store* store, std::vector<std::shared_ptr<KernelGenerator>> generators, TuneOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = store;
  impl_->generators = std::move(generators);
  impl_->options = std::move(options);
  impl_->owner = cache::ThisProcessOwner("tuner " + std::to_string(g_tuner_seq.fetch_add(1) + 1) + ", device " +
                                         std::to_string(impl_->options.device));
}

Tuner::~Tuner() = default;

Expected<std::vector<Candidate>> Tuner::PendingExtensionCandidates(const Task& task) {
  const std::string key = task.Key();
  auto cached = impl_->LookupCache(key);
  if (!cached.ok()) return cached.status();
  if (Serves(*cached, task, impl_->options)) return std::vector<Candidate>();
  auto generated = impl_->Generate(task, key, std::nullopt, Clock::now());
  if (!generated.ok()) return generated.status();
  std::vector<Candidate> out;
  for (Candidate& c : generated->candidates)
    if (c.form == CandidateForm::kExtension) out.push_back(std::move(c));
  return out;
}

// LookupCache -> Generate -> (CompileOnly | RunInWorker) -> SelectWinner -> Persist.
Expected<TuneReport> Tuner::Tune(const Task& task, const std::vector<std::string>* captured_inputs,
                                 const TuneProgressCallback& on_progress) {
  const auto start = Clock::now();
  const TuneOptions& opt = impl_->options;
  TuneReport report;
  report.task_key = task.Key();
  report.description = task.Describe();
  const ProgressSink progress(on_progress, report, start);
  DICE_RETURN_IF_ERROR(CheckCapturedInputs(task, captured_inputs));

  auto cached = impl_->LookupCache(report.task_key);
  if (!cached.ok()) return cached.status();
  progress.Send(TunePhase::kLookupCache);
  if (Serves(*cached, task, opt)) {
    ServeCached(**cached, start, progress, &report);
    return report;
  }
  // Claim: of the processes sharing the cache, one tunes the key; the others
  // are told who (claimed_by). A winner stored between the lookup and the
  // claim is served. Released when `claim` goes: after Persist, or on error.
  TuneClaim claim;
  if (impl_->persists() && opt.claim_ttl_s > 0) {
    auto c = TuneClaim::Take(impl_->store, report.task_key, impl_->owner, opt.claim_ttl_s);
    if (!c.ok()) return c.status();
    if (!c->held()) {
      report.claimed_by = c->holder();
      report.tune_seconds = SecondsSince(start);
      progress.Send(TunePhase::kDone);
      return report;
    }
    claim = std::move(*c);
    cached = impl_->LookupCache(report.task_key);
    if (!cached.ok()) return cached.status();
    if (Serves(*cached, task, opt)) {
      ServeCached(**cached, start, progress, &report);
      return report;
    }
  }
  // A verified row here is a winner the precision policy refuses: tuned
  // again, the refusal reported as the first (skipped) outcome.
  const bool refused_row = cached->has_value() && (**cached).verified;
  std::vector<CandidateOutcome> refused;
  if (refused_row) {
    refused.push_back(MakeOutcome((**cached).origin, (**cached).candidate_hash, Outcome::kSkipped,
                                  RefusedWinnerReason(opt, task.graph, **cached) + "; tuned again"));
  }
  std::optional<cache::WinnerRecord> pulled;  // an unverified row, re-verified
  if (cached->has_value() && !refused_row) pulled = std::move(**cached);

  std::optional<worker::HelloReply> device;
  if (!opt.compile_only) {
    auto h = impl_->CheckDevice(task, report.description);
    if (!h.ok()) return h.status();
    device = std::move(*h);
    report.worker_device_uuid = device->device.uuid;
  }

  auto generated = impl_->Generate(task, report.task_key, pulled, start);
  if (!generated.ok()) return generated.status();
  const std::vector<Candidate>& candidates = generated->candidates;
  report.outcomes = std::move(refused);
  for (CandidateOutcome& o : generated->outcomes) report.outcomes.push_back(std::move(o));
  report.tried = static_cast<int>(candidates.size());
  progress.Send(TunePhase::kGenerate);
  if (generated->pulled_rejected) {
    impl_->RecordAttempts(report);  // remembered, so the same entry is not pulled again
    if (auto removed = impl_->store->RemoveUnverifiedWinner(report.task_key); !removed.ok()) return removed.status();
    report.tune_seconds = SecondsSince(start);
    progress.Send(TunePhase::kDone);
    return report;
  }

  Measured measured;
  if (opt.compile_only) {
    if (!candidates.empty()) progress.Send(TunePhase::kCompile);  // before a build of up to ~40 s (nvcc)
    measured = impl_->CompileOnly(task, candidates, start, [&progress](int compiled) {
      TuneProgress p;
      p.compiled = compiled;
      progress.Send(TunePhase::kCompile, p);
    });
  } else if (!candidates.empty()) {
    progress.Send(TunePhase::kMeasure);
    WorkerProgressCallback live;  // per compile batch, baseline and result while the worker works
    if (progress.active()) {
      live = [&progress](const WorkerTuneProgress& w) { progress.Send(TunePhase::kMeasure, FromWorkerProgress(w)); };
    }
    auto run = impl_->RunInWorker(task, candidates, captured_inputs, start, live);
    if (!run.ok()) {
      impl_->RecordAttempts(report);  // the generators' failures are attempts all the same
      return run.status();
    }
    measured = std::move(*run);
    TuneProgress answered = CountOutcomes(measured.outcomes);
    answered.finished = static_cast<int>(candidates.size());
    answered.baseline_us = measured.baseline_us;
    progress.Send(TunePhase::kMeasure, answered);
  }

  const Selection selection = SelectWinner(measured.baseline_us, Measurements(candidates, measured),
                                           SelectionPolicy{opt.margin, AllowsReducedPrecision(opt, task.graph)});
  ApplySelection(candidates, selection, &measured, &report);
  const TuneProgress counts = CountOutcomes(report.outcomes);
  progress.Send(TunePhase::kSelectWinner, counts);
  progress.Send(TunePhase::kPersist, counts);
  DICE_RETURN_IF_ERROR(impl_->Persist(task, candidates, measured, selection, device, pulled, refused_row, report));
  report.tune_seconds = SecondsSince(start);
  progress.Send(TunePhase::kDone, counts);
  return report;
}

}  // namespace dice::runtime
