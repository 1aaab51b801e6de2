// tune_session.cc — one "tune" request inside dice-worker (tune_session.h):
// Setup -> CompileCandidates -> trials and baseline (verifier.h) -> one
// evaluate loop over the runnable candidates. Torch-free: the LibTorch side
// is verifier.cc.
#include "tune_session.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "dice/core/ir.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/extension_compiler.h"
#include "verifier.h"

namespace dice::runtime::worker_impl {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Returns true when the worker must exit: the parent is gone.
bool Emit(const SendFn& send, const std::string& message) { return !send(message).ok(); }

// Sends "done"; true when the parent is gone.
bool Finish(const SendFn& send, const std::string& error) { return Emit(send, worker::EncodeDone(error)); }

// Setup: the CUDA driver, the device (it must be the task's arch), the
// graph and its output specs. Errors name what is wrong; they end the request.
Expected<TaskSetup> Setup(const worker::TuneRequest& req) {
  TaskSetup s;
  s.req = &req;
  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  s.driver = *drv;
  auto info = QueryDevice(req.device);
  if (!info.ok()) return info.status();
  if (info->arch != req.arch) {
    return Status(StatusCode::kInvalidArgument, "the task targets " + req.arch + " but CUDA device " +
                                                    std::to_string(req.device) + " (" + info->name + ") is " +
                                                    info->arch);
  }
  auto graph = ir::Parse(req.graph_canonical);
  if (!graph.ok()) return graph.status();
  s.graph = std::move(*graph);
  auto outs = ir::InferOutputSpecs(s.graph, req.inputs);
  if (!outs.ok()) return outs.status();
  s.outputs = std::move(*outs);
  return s;
}

// What the compile phase produced: what runs, and a compile_error result
// for each candidate that did not compile (sent, then cleared, per batch).
struct Compiled {
  std::vector<Runnable> runnable;               ///< device form first, then extension form (request order within each)
  std::vector<worker::CandidateResult> failed;  ///< kCompileError, not yet sent
};

void AddFailure(const worker::TuneItem& item, const Status& st, Compiled* out) {
  worker::CandidateResult r;
  r.id = item.id;
  r.outcome = Outcome::kCompileError;
  r.error = ClipError(st.message());
  out->failed.push_back(std::move(r));
}

// Called after each compile batch with the runnables it added (the tail of
// out->runnable from `first`); true when the parent is gone.
using BatchDone = std::function<bool(size_t first)>;

// Device form: NVRTC, all in parallel (one batch).
bool CompileDevice(const std::vector<const worker::TuneItem*>& items, const worker::TuneRequest& req,
                   Compiled* out, const BatchDone& batch_done) {
  if (items.empty()) return false;
  const size_t first_runnable = out->runnable.size();
  std::vector<Candidate> sources;
  for (const auto* item : items) sources.push_back(item->candidate);
  std::vector<Expected<CompileResult>> cubins = CompileAll(sources, req.arch);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!cubins[i].ok()) {
      AddFailure(*items[i], cubins[i].status(), out);
      continue;
    }
    Runnable r;
    r.item = items[i];
    r.device = std::move(*cubins[i]);
    out->runnable.push_back(std::move(r));
  }
  return batch_done(first_runnable);
}

// Extension form: nvcc, several at a time (each takes tens of seconds and
// ~1-2 GB of memory), through the build cache (a configuration built before,
// for any shape, is a verified copy); each such batch is reported when built.
bool CompileExtensions(const std::vector<const worker::TuneItem*>& items, const worker::TuneRequest& req,
                       Compiled* out, const BatchDone& batch_done) {
  ExtensionCompileOptions eo;
  eo.timeout_s = req.extension_compile_timeout_s;
  const int n_in = static_cast<int>(req.inputs.size());
  const size_t parallel = std::max<size_t>(1, std::min<size_t>(8, std::thread::hardware_concurrency() / 2));
  for (size_t first = 0; first < items.size(); first += parallel) {
    const size_t end = std::min(items.size(), first + parallel);
    std::vector<std::optional<Expected<std::unique_ptr<ExtensionBuild>>>> builds(end - first);
    std::vector<std::thread> threads;
    for (size_t i = first; i < end; ++i) {
      threads.emplace_back(
          [&, i] { builds[i - first].emplace(CompileExtensionCached(items[i]->candidate, req.arch, n_in, eo)); });
    }
    for (auto& t : threads) t.join();
    const size_t first_runnable = out->runnable.size();
    for (size_t i = first; i < end; ++i) {
      auto& build = *builds[i - first];
      if (!build.ok()) {
        AddFailure(*items[i], build.status(), out);
        continue;
      }
      Runnable r;
      r.item = items[i];
      r.extension = std::move(*build);
      out->runnable.push_back(std::move(r));
    }
    if (batch_done(first_runnable)) return true;
  }
  return false;
}

// Sends the compile errors collected so far and, when the request asks for
// progress, the ids of the runnables from `first`; true when the parent is gone.
bool SendBatch(const SendFn& send, const worker::TuneRequest& req, size_t first, Compiled* c) {
  for (const auto& r : c->failed) {
    if (Emit(send, worker::EncodeResult(r))) return true;
  }
  c->failed.clear();
  if (!req.progress) return false;
  std::vector<int> ids;
  for (size_t i = first; i < c->runnable.size(); ++i) ids.push_back(c->runnable[i].item->id);
  return Emit(send, worker::EncodeProgress(ids));
}

// The compile phase. The items already obey the precision policy (the Tuner
// applied it). Device-form errors are sent before the (slow) nvcc builds.
// Returns true when the parent is gone.
bool CompileCandidates(const worker::TuneRequest& req, const SendFn& send, Compiled* out) {
  std::vector<const worker::TuneItem*> device, extension;
  for (const auto& item : req.items) {
    (item.candidate.form == CandidateForm::kExtension ? extension : device).push_back(&item);
  }
  const BatchDone batch_done = [&](size_t first) { return SendBatch(send, req, first, out); };
  return CompileDevice(device, req, out, batch_done) || CompileExtensions(extension, req, out, batch_done);
}

// What a request does after a phase.
enum class Next { kGoOn, kDone, kExit };

// Done after an error that ends the request; exit when the parent is gone
// or the CUDA context is unusable (kCrashed).
Next EndWith(const SendFn& send, const Status& st) {
  return Finish(send, st.ToString()) || st.code() == StatusCode::kCrashed ? Next::kExit : Next::kDone;
}

// Trials, then the baseline (measured, or the one an earlier worker sent).
Next Prepare(Verifier& v, const worker::TuneRequest& req, const SendFn& send) {
  Status st = v.BuildTrials();
  if (!st.ok()) return EndWith(send, st);
  if (!req.measure_baseline) {
    v.SetKnownBaseline(req.known_baseline_us);
    return Next::kGoOn;
  }
  auto us = v.MeasureBaseline();
  if (Emit(send, worker::EncodeBaseline(us.ok() ? *us : 0, us.ok() ? "" : us.status().ToString()))) return Next::kExit;
  if (!us.ok() && us.status().code() == StatusCode::kCrashed) return EndWith(send, us.status());
  return Next::kGoOn;  // without a baseline the candidates are still verified
}

bool RunTuneRequestImpl(const worker::TuneRequest& req, const SendFn& send) {
  const auto start = Clock::now();
  auto setup = Setup(req);
  if (!setup.ok()) return Finish(send, setup.status().ToString());
  Compiled compiled;
  if (CompileCandidates(req, send, &compiled)) return true;

  Verifier verifier(std::move(*setup));
  const Next next = Prepare(verifier, req, send);
  if (next != Next::kGoOn) return next == Next::kExit;

  for (Runnable& run : compiled.runnable) {
    if (SecondsSince(start) >= req.budget_s) {
      worker::CandidateResult r;
      r.id = run.item->id;
      r.outcome = Outcome::kSkipped;
      r.error = "tuning budget exhausted";
      r.compile_ms = run.compile_ms();
      if (Emit(send, worker::EncodeResult(r))) return true;
      continue;
    }
    if (Emit(send, worker::EncodeBegin(run.item->id))) return true;
    worker::CandidateResult r = verifier.Evaluate(run);
    run.extension.reset();  // the build's files go; a loaded library stays mapped
    Status guard = verifier.GuardTrialData(r);
    if (Emit(send, worker::EncodeResult(r))) return true;
    if (!guard.ok()) return EndWith(send, guard) == Next::kExit;
    if (r.fatal) return true;
  }
  return Finish(send, "");
}

}  // namespace

bool RunTuneRequest(const worker::TuneRequest& req, const SendFn& send) {
  const bool exit_now = RunTuneRequestImpl(req, send);
  // The session's trials (inputs, references: GBs for large tasks) are freed;
  // hand the memory back to the driver so the user's process can use it.
  if (!exit_now) Verifier::ReleaseDeviceMemory();
  return exit_now;
}

}  // namespace dice::runtime::worker_impl
