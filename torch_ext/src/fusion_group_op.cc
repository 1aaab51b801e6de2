// The dice::FusionGroup operator (TorchScript frontend) and the dice::run_group
// dispatcher op (torch.fx frontend, run_group.h): winner kernel or fallback,
// plus the process-wide group table, runtime options and background tuner.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/library.h>
#include <nlohmann/json.hpp>

#include "dice/cache/remote_cache.h"
#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/kernel_launcher.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"
#include "dice/runtime/worker_protocol.h"
#include "dice/torch_ext/fusion_pass.h"
#include "dice/torch_ext/optimize.h"
#include "dice/torch_ext/run_group.h"

namespace dice::torch_ext {
namespace {

// ---------------------------------------------------------------------------
// Process-wide state.

struct GroupRecord {
  int id = 0;
  CapturedGroup group;
  std::atomic<int64_t> calls{0}, hits{0}, fallbacks{0}, timed_calls{0}, total_ns{0};
  std::mutex mu;  // guards the fields below
  std::vector<std::string> input_specs;
  std::string task_key;
  std::vector<std::string> task_keys;
  std::map<std::string, int64_t> reasons;
  std::set<std::vector<int64_t>> captured_signatures;
};

// One input signature of one op instance: precomputed task key and kernel.
struct SigEntry {
  enum State : int { kUnknown = 0, kNoWinner, kPending, kLoaded, kFailed };
  std::vector<int64_t> signature;
  std::string key;
  std::string describe;
  std::unique_ptr<Task> task;  // null when the specs did not make a task
  std::string task_error;
  std::atomic<int> state{kUnknown};
  std::string failure;
  std::shared_ptr<LoadedKernel> kernel;
  ExtensionEntryFn extension = nullptr;  // an extension-form winner (the kernel is then null)
  std::vector<std::vector<int64_t>> out_shapes;
  std::vector<at::ScalarType> out_dtypes;
};

struct TuneJob {
  Task task;
  std::vector<std::string> captured;
  std::shared_ptr<SigEntry> entry;
};

struct Runtime {
  std::mutex mu;  // guards everything below except the atomics
  std::vector<std::unique_ptr<GroupRecord>> groups;  // id = index + 1
  Options options;
  bool options_set = false;
  std::atomic<int> mode{static_cast<int>(Mode::kOff)};
  std::atomic<bool> mode_loaded{false};
  std::atomic<bool> capture{false};
  std::vector<CapturedCall> captured;

  // Cache store and loaded kernels (shared across op instances by task key).
  std::mutex store_mu;
  // Shared: the tuner keeps the store it writes to open (tuner_store) after
  // a new cache dir replaces it here.
  std::shared_ptr<cache::Store> store;
  std::string store_dir;
  std::map<std::string, std::shared_ptr<LoadedKernel>> kernels;
  std::map<std::string, ExtensionEntryFn> extensions;  // loaded extension winners (never unloaded)

  // Shared cache server ($DICE_REMOTE_CACHE), asked on a local miss.
  std::once_flag remote_once;
  std::unique_ptr<cache::RemoteCache> remote;

  // Tuning.
  std::mutex tune_mu;  // one Tune at a time
  std::unique_ptr<Tuner> tuner;
  std::shared_ptr<cache::Store> tuner_store;  // the store `tuner` reads and writes
  TuneOptions tuner_options;                  // the options `tuner` was built with
  std::vector<std::shared_ptr<KernelGenerator>> generators;  // empty = TemplateGenerator only
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<TuneJob> queue;
  bool worker_started = false;
};

Runtime& R() {
  static Runtime* r = new Runtime;  // leaked: the tuner thread may outlive static destruction
  return *r;
}

Options EnvOptionsOrDefault() {
  auto o = Options::FromEnv();
  if (o.ok()) return *o;
  Options d;
  d.mode = Mode::kOff;
  return d;
}

Mode CurrentMode() {
  Runtime& r = R();
  if (!r.mode_loaded.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.options_set) {
      r.options = EnvOptionsOrDefault();
      r.options_set = true;
    }
    r.mode.store(static_cast<int>(r.options.mode));
    r.mode_loaded.store(true, std::memory_order_release);
  }
  return static_cast<Mode>(r.mode.load(std::memory_order_relaxed));
}

GroupRecord* FindRecord(int id) {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  if (id < 1 || static_cast<size_t>(id) > r.groups.size()) return nullptr;
  return r.groups[id - 1].get();
}

// Opens the store of the current cache dir (once per dir). REQUIRES store_mu.
Expected<cache::Store*> StoreLocked() {
  Runtime& r = R();
  std::string dir = GetRuntimeOptions().cache_dir;
  if (dir.empty()) dir = cache::DefaultCacheDir();
  if (!r.store || r.store_dir != dir) {
    auto s = cache::Store::Open(cache::DatabasePath(dir));
    if (!s.ok()) return s.status();
    r.store = std::move(s).value();
    r.store_dir = dir;
  }
  return r.store.get();
}

// The remote cache of $DICE_REMOTE_CACHE (null when unset or invalid; an
// invalid setting is reported once on stderr and ignored).
cache::RemoteCache* Remote() {
  Runtime& r = R();
  std::call_once(r.remote_once, [&r] {
    auto o = cache::RemoteCacheOptions::FromEnv();
    if (!o.ok()) {
      std::fprintf(stderr, "dice: remote cache disabled: %s\n", o.status().message().c_str());
      return;
    }
    if (!o->url.empty()) r.remote = std::make_unique<cache::RemoteCache>(*o);
  });
  return r.remote.get();
}

// Why tuning stored no winner, for fallback reasons and logs: counts, the
// baseline and the fastest verified candidate (µs), and the first failure.
// E.g. "no winner (tuned: 6 tried, 6 compiled, 6 verified; baseline 11400.0
// µs, best template:row/tile32x8/reg 11350.2 µs, needs < 0.95x of it)".
std::string NoWinnerText(const TuneReport& rep, double margin) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "no winner (tuned: %d tried, %d compiled, %d verified", rep.tried, rep.compiled,
                rep.verified);
  std::string out = buf;
  const CandidateOutcome* best = nullptr;
  const CandidateOutcome* failed = nullptr;
  for (const auto& o : rep.outcomes) {
    if (o.time_us > 0 && (best == nullptr || o.time_us < best->time_us)) best = &o;
    if (failed == nullptr && o.outcome != "slower" && o.outcome != "verified" && o.outcome != "winner" &&
        o.outcome != "compiled")
      failed = &o;
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
    out += "; first failure " + failed->origin + ": " + failed->outcome;
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

Expected<TuneReport> TuneTaskNow(const Task& task, const std::vector<std::string>* captured) {
  Runtime& r = R();
  std::lock_guard<std::mutex> tune_lock(r.tune_mu);
  std::shared_ptr<cache::Store> store;
  {
    std::lock_guard<std::mutex> lock(r.store_mu);
    auto s = StoreLocked();
    if (!s.ok()) return s.status();
    store = r.store;
  }
  // A tuner writes to the store of the cache dir it was built under, with
  // the tune options of that time. When either has changed since (a second
  // optimize() in this process with another cache_dir or other options), a
  // new tuner is built; the old store stays open until its tuner is gone.
  // (It used to be freed under the old tuner: a segfault in
  // Store::GetWinner on the H200.)
  const TuneOptions options = GetRuntimeOptions().tune;
  if (!r.tuner || r.tuner_store != store || r.tuner_options != options) {
    std::vector<std::shared_ptr<KernelGenerator>> gens = r.generators;
    if (gens.empty()) gens.push_back(std::make_shared<TemplateGenerator>());
    r.tuner = std::make_unique<Tuner>(store.get(), std::move(gens), options);
    r.tuner_store = store;
    r.tuner_options = options;
  }
  // The tuning worker is another process: blocks this process's caching
  // allocator keeps for reuse are invisible to it. On a model that fills the
  // GPU (a 7 GB activation, an Inductor workspace) the worker's reference run
  // then fails with CUDA out of memory and every candidate is skipped. Hand the
  // cached, unused blocks back to the driver first (live tensors stay).
  if (at::globalContext().hasCUDA()) c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache();
  return r.tuner->Tune(task, captured);
}

void TunerThreadMain() {
  Runtime& r = R();
  for (;;) {
    TuneJob job;
    {
      std::unique_lock<std::mutex> lock(r.queue_mu);
      r.queue_cv.wait(lock, [&] { return !r.queue.empty(); });
      job = std::move(r.queue.front());
      r.queue.pop_front();
    }
    auto rep = TuneTaskNow(job.task, job.captured.empty() ? nullptr : &job.captured);
    if (!rep.ok()) {
      // Torch TUs cannot include spdlog (LibTorch ships its own fmt): plain stderr.
      std::fprintf(stderr, "dice: tuning %s failed: %s\n", job.task.Describe().c_str(),
                   rep.status().ToString().c_str());
      job.entry->failure = "tuning failed: " + rep.status().message();
      job.entry->state.store(SigEntry::kFailed);
      continue;
    }
    std::fprintf(stderr, "dice: tuned %s: speedup %.2fx (%s)\n", rep->description.c_str(), rep->speedup,
                 rep->winner_origin.empty() ? "no winner" : rep->winner_origin.c_str());
    if (rep->winner_origin.empty()) job.entry->failure = NoWinnerText(*rep, GetRuntimeOptions().tune.margin);
    job.entry->state.store(rep->winner_origin.empty() ? SigEntry::kNoWinner : SigEntry::kUnknown);
  }
}

void Enqueue(TuneJob job) {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.queue_mu);
  if (!r.worker_started) {
    std::thread(TunerThreadMain).detach();
    r.worker_started = true;
  }
  r.queue.push_back(std::move(job));
  r.queue_cv.notify_one();
}

std::string DTypeText(at::ScalarType st) {
  switch (st) {
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kDouble: return "float64";
    case at::kBool: return "bool";
    default: return c10::toString(st);
  }
}

// Host copies of the inputs (contiguous bytes); empty when together they
// exceed the worker's cap (worker::kMaxCapturedBytes, 2 GiB): then the
// verifier uses random trials only and nothing multi-GB is copied.
std::vector<std::string> HostBytes(const std::vector<at::Tensor>& inputs) {
  std::vector<std::string> out;
  uint64_t total = 0;
  for (const auto& t : inputs) total += static_cast<uint64_t>(t.nbytes());
  if (total > worker::kMaxCapturedBytes) return out;
  for (const auto& t : inputs) {
    at::Tensor c = t.contiguous().cpu();
    out.emplace_back(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

// ---------------------------------------------------------------------------
// The operator.

class GroupOp {
 public:
  explicit GroupOp(const torch::jit::Node* node) {
    TORCH_CHECK(node->hasAttribute(IrAttr()) && node->hasAttribute(GroupIdAttr()),
                "dice::FusionGroup node without dice_ir/dice_group_id attributes");
    auto g = ir::Parse(node->s(IrAttr()));
    TORCH_CHECK(g.ok(), "dice::FusionGroup: bad IR attribute: ", g.status().ToString());
    graph_ = std::move(g).value();
    record_ = FindRecord(static_cast<int>(node->i(GroupIdAttr())));
    TORCH_CHECK(record_ != nullptr, "dice::FusionGroup: unknown group id ", node->i(GroupIdAttr()));
    n_in_ = node->inputs().size();
    n_out_ = node->outputs().size();
    TORCH_CHECK(n_in_ == graph_.inputs.size() && n_out_ == graph_.outputs.size(),
                "dice::FusionGroup: node arity does not match its IR");
    code_ = std::make_shared<torch::jit::Code>(node->g(c10::attr::Subgraph)->copy(), "dice_fusion_group_fallback");
  }

  // A group called through dice::run_group: the fallback is the reference
  // executor (the IR run with ATen ops) instead of a TorchScript subgraph.
  GroupOp(ir::Graph graph, GroupRecord* record)
      : graph_(std::move(graph)), record_(record), n_in_(graph_.inputs.size()), n_out_(graph_.outputs.size()) {}

  const ir::Graph& graph() const { return graph_; }
  int record_id() const { return record_->id; }

  void Run(torch::jit::Stack& stack) {
    Mode mode = CurrentMode();
    record_->calls.fetch_add(1, std::memory_order_relaxed);
    if (n_in_ == 0) {
      Fallback(stack);
      CountFallback("group without tensor inputs");
      return;
    }
    const char* reason = nullptr;
    std::string reason_text;
    bool typed = false;
    bool eligible = Eligible(stack, &reason, &reason_text, &typed);
    if (R().capture.load(std::memory_order_relaxed)) Capture(stack);
    // Inputs of the captured dtypes/ranks: record specs and task key for reports.
    if (typed && !eligible) Entry(stack);

    if (mode == Mode::kObserve) {
      if (eligible) Entry(stack);
      Timed(stack);
      CountFallback("observe mode");
      return;
    }
    if (mode == Mode::kOff) {
      Fallback(stack);
      CountFallback("mode off");
      return;
    }
    if (!eligible) {
      Fallback(stack);
      CountFallback(reason ? std::string(reason) : reason_text);
      return;
    }
    std::string why;
    if (TryKernel(stack, mode, &why)) {
      record_->hits.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Fallback(stack);
    CountFallback(why);
  }

 private:
  // Checks every input against the kernel path's requirements.
  // `typed` is set when every input is a tensor of the captured dtype and rank.
  bool Eligible(const torch::jit::Stack& stack, const char** reason, std::string* text, bool* typed) const {
    size_t base = stack.size() - n_in_;
    for (size_t i = 0; i < n_in_; ++i) {
      const c10::IValue& iv = stack[base + i];
      if (!iv.isTensor()) {
        *text = "input " + std::to_string(i) + " is not a tensor";
        return false;
      }
      const at::Tensor& t = iv.toTensor();
      auto dt = reference::FromScalarType(t.scalar_type());
      if (!dt.ok()) {
        *text = "unsupported dtype " + DTypeText(t.scalar_type());
        return false;
      }
      if (*dt != graph_.inputs[i].dtype || t.dim() != graph_.inputs[i].rank) {
        *text = "input " + std::to_string(i) + " is " + ir::DTypeName(*dt) + " rank " + std::to_string(t.dim()) +
                ", captured as " + ir::DTypeName(graph_.inputs[i].dtype) + " rank " +
                std::to_string(graph_.inputs[i].rank);
        return false;
      }
    }
    *typed = true;
    for (size_t i = 0; i < n_in_; ++i) {
      if (!stack[base + i].toTensor().is_cuda()) {
        *reason = "no GPU";
        return false;
      }
    }
    for (size_t i = 0; i < n_in_; ++i) {
      const at::Tensor& t = stack[base + i].toTensor();
      if (!t.is_contiguous()) {
        *text = "non-contiguous input " + std::to_string(i);
        return false;
      }
      if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) {
        *text = "misaligned input " + std::to_string(i);
        return false;
      }
    }
    return true;
  }

  void CountFallback(const std::string& reason) {
    record_->fallbacks.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(record_->mu);
    ++record_->reasons[reason];
  }

  void Fallback(torch::jit::Stack& stack) const {
    if (code_) {
      // The subgraph takes exactly the node's inputs and leaves its outputs.
      torch::jit::InterpreterState state(*code_);
      state.run(stack);
      return;
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(n_in_);
    for (size_t i = stack.size() - n_in_; i < stack.size(); ++i) inputs.push_back(stack[i].toTensor());
    auto outs = reference::Run(graph_, inputs);
    TORCH_CHECK(outs.ok(), "dice::run_group fallback: ", outs.status().ToString());
    torch::jit::drop(stack, n_in_);
    for (auto& o : *outs) stack.emplace_back(std::move(o));
  }

  // Observe mode: time the fallback with CUDA events (GPU) or wall time (CPU).
  void Timed(torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    bool cuda = n_in_ > 0 && stack[base].isTensor() && stack[base].toTensor().is_cuda();
    double us = 0;
    if (cuda) {
      c10::Device dev = stack[base].toTensor().device();
      auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
      c10::Stream s = impl->getStream(dev);
      c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      c10::Event end(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      start.record(s);
      Fallback(stack);
      end.record(s);
      end.synchronize();
      us = start.elapsedTime(end) * 1000.0;
    } else {
      auto t0 = std::chrono::steady_clock::now();
      Fallback(stack);
      us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    record_->timed_calls.fetch_add(1, std::memory_order_relaxed);
    record_->total_ns.fetch_add(static_cast<int64_t>(us * 1000.0), std::memory_order_relaxed);
  }

  void Capture(const torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    std::vector<at::Tensor> ts;
    std::vector<ir::TensorSpec> specs;
    std::vector<int64_t> sig;
    for (size_t i = 0; i < n_in_; ++i) {
      if (!stack[base + i].isTensor()) return;
      const at::Tensor& t = stack[base + i].toTensor();
      auto spec = reference::SpecOf(t);
      if (!spec.ok()) return;
      ts.push_back(t);
      sig.push_back(static_cast<int64_t>(spec->dtype));
      sig.insert(sig.end(), spec->shape.begin(), spec->shape.end());
      sig.push_back(-1);
      specs.push_back(*spec);
    }
    {
      std::lock_guard<std::mutex> lock(record_->mu);
      if (!record_->captured_signatures.insert(sig).second) return;
    }
    CapturedCall call;
    call.group_id = record_->id;
    call.graph = graph_;
    call.inputs = std::move(specs);
    call.input_bytes = HostBytes(ts);
    std::lock_guard<std::mutex> lock(R().mu);
    R().captured.push_back(std::move(call));
  }

  // The signature entry for these inputs (created on first sight).
  std::shared_ptr<SigEntry> Entry(const torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) {
      size_t k = 0;
      bool same = true;
      for (size_t i = 0; i < n_in_ && same; ++i) {
        const at::Tensor& t = stack[base + i].toTensor();
        if (e->signature[k++] != static_cast<int64_t>(t.scalar_type())) same = false;
        for (int64_t d : t.sizes()) {
          if (!same) break;
          if (e->signature[k++] != d) same = false;
        }
      }
      if (same) return e;
    }
    auto e = std::make_shared<SigEntry>();
    std::vector<ir::TensorSpec> specs;
    for (size_t i = 0; i < n_in_; ++i) {
      const at::Tensor& t = stack[base + i].toTensor();
      e->signature.push_back(static_cast<int64_t>(t.scalar_type()));
      e->signature.insert(e->signature.end(), t.sizes().begin(), t.sizes().end());
      specs.push_back(*reference::SpecOf(t));
    }
    int device = stack[base].toTensor().device().index();
    auto task = Task::Make(graph_, specs, CurrentTarget(device < 0 ? 0 : device));
    if (!task.ok()) {
      e->task_error = "task: " + task.status().message();
      e->state.store(SigEntry::kFailed);
      e->failure = e->task_error;
    } else {
      e->key = task->Key();
      e->describe = task->Describe();
      for (const auto& o : task->outputs) {
        e->out_shapes.push_back(o.shape);
        e->out_dtypes.push_back(reference::ToScalarType(o.dtype));
      }
      e->task = std::make_unique<Task>(std::move(task).value());
    }
    {
      std::lock_guard<std::mutex> rl(record_->mu);
      record_->task_key = e->key;
      if (!e->key.empty() &&
          std::find(record_->task_keys.begin(), record_->task_keys.end(), e->key) == record_->task_keys.end())
        record_->task_keys.push_back(e->key);
      record_->input_specs.clear();
      for (const auto& s : specs) record_->input_specs.push_back(s.ToString());
    }
    entries_.push_back(e);
    return e;
  }

  // Looks up / loads the winner; returns false (with why) when none serves.
  bool TryKernel(torch::jit::Stack& stack, Mode mode, std::string* why) {
    std::shared_ptr<SigEntry> e = Entry(stack);
    int state = e->state.load(std::memory_order_acquire);
    if (state == SigEntry::kUnknown) state = Resolve(*e, stack, mode);
    if (state == SigEntry::kNoWinner && mode == Mode::kTune) state = Queue(e, stack);
    switch (state) {
      case SigEntry::kLoaded: return Launch(*e, stack, why);
      case SigEntry::kPending: *why = "tuning in progress"; return false;
      case SigEntry::kFailed: *why = e->failure; return false;
      default: *why = e->failure.empty() ? std::string("no winner") : e->failure; return false;
    }
  }

  int Resolve(SigEntry& e, const torch::jit::Stack& stack, Mode mode) {
    Runtime& r = R();
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<cache::WinnerRecord> rec;
      cache::Store* local = nullptr;  // valid while the cache dir stays the same
      {
        std::lock_guard<std::mutex> lock(r.store_mu);
        auto it = r.kernels.find(e.key);
        if (it != r.kernels.end()) {
          e.kernel = it->second;
          e.state.store(SigEntry::kLoaded);
          return SigEntry::kLoaded;
        }
        auto ext = r.extensions.find(e.key);
        if (ext != r.extensions.end()) {
          e.extension = ext->second;
          e.state.store(SigEntry::kLoaded);
          return SigEntry::kLoaded;
        }
        auto store = StoreLocked();
        if (!store.ok()) {
          e.failure = "cache: " + store.status().message();
          e.state.store(SigEntry::kFailed);
          return SigEntry::kFailed;
        }
        auto w = (*store)->GetWinner(e.key);
        if (!w.ok()) {
          e.failure = "cache: " + w.status().message();
          e.state.store(SigEntry::kFailed);
          return SigEntry::kFailed;
        }
        rec = std::move(w).value();
        local = *store;
      }
      // Local miss: ask the shared server (short timeout, back-off when it
      // is down; outside store_mu); a found entry is stored locally,
      // unverified unless trusted.
      if (!rec && attempt == 0 && Remote() != nullptr) rec = Remote()->Lookup(e.key, local);
      if (rec && !rec->verified && GetRuntimeOptions().tune.compile_only) {
        e.failure = "kernel from " + rec->pulled_from + " not served: re-verification needs a GPU (compile-only run)";
        e.state.store(SigEntry::kFailed);
        return SigEntry::kFailed;
      }
      if (rec && !rec->verified) {
        // Pulled or imported, not yet proven on this GPU: re-verify (the
        // tuner verifies and times only this kernel) before first use.
        auto rep = TuneTaskNow(*e.task, nullptr);
        if (!rep.ok() || rep->winner_origin.empty()) {
          e.failure = "kernel from " + rec->pulled_from + " not served: " +
                      (rep.ok() ? std::string("it failed re-verification on this GPU")
                                : "re-verification needs a GPU: " + rep.status().message());
          e.state.store(SigEntry::kFailed);
          return SigEntry::kFailed;
        }
        std::lock_guard<std::mutex> lock(r.store_mu);
        auto store = StoreLocked();
        auto w = store.ok() ? (*store)->GetWinner(e.key) : Expected<std::optional<cache::WinnerRecord>>(store.status());
        if (!w.ok() || !w->has_value() || !(**w).verified) {
          e.failure = "cache: re-verified winner for " + e.key + " cannot be read back";
          e.state.store(SigEntry::kFailed);
          return SigEntry::kFailed;
        }
        rec = std::move(**w);
      }
      if (rec) {
        {
          std::lock_guard<std::mutex> lock(r.store_mu);
          auto store = StoreLocked();
          if (store.ok()) (void)(*store)->RecordHit(e.key);  // once per process and key; best effort
        }
        return Load(e, *rec, stack);
      }
      if (mode != Mode::kTuneSync || attempt == 1) break;
      size_t base = stack.size() - n_in_;
      std::vector<at::Tensor> ts;
      for (size_t i = 0; i < n_in_; ++i) ts.push_back(stack[base + i].toTensor());
      auto bytes = HostBytes(ts);
      auto rep = TuneTaskNow(*e.task, bytes.empty() ? nullptr : &bytes);
      if (!rep.ok()) {
        e.failure = "tuning failed: " + rep.status().message();
        e.state.store(SigEntry::kFailed);
        return SigEntry::kFailed;
      }
      if (rep->winner_origin.empty()) {
        e.failure = NoWinnerText(*rep, GetRuntimeOptions().tune.margin);
        std::fprintf(stderr, "dice: tuned %s: %s\n", rep->description.c_str(), e.failure.c_str());
      }
    }
    e.state.store(SigEntry::kNoWinner);
    return SigEntry::kNoWinner;
  }

  // An extension-form winner (versions "form":"extension"; the cubin field
  // holds the shared object nvcc built and the worker verified): written to
  // a private temporary file, dlopen'ed, its entry point kept; the library
  // stays loaded for the process's lifetime.
  int LoadExtension(SigEntry& e, const cache::WinnerRecord& rec) {
    auto fail = [&](const std::string& why) {
      e.failure = "extension load failed: " + why;
      e.state.store(SigEntry::kFailed);
      return SigEntry::kFailed;
    };
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/dice-winner-XXXXXX.so";
    int fd = ::mkstemps(path.data(), 3);
    if (fd < 0) return fail("mkstemps " + path);
    size_t off = 0;
    while (off < rec.cubin.size()) {
      ssize_t w = ::write(fd, rec.cubin.data() + off, rec.cubin.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(fd);
    if (off != rec.cubin.size()) {
      ::unlink(path.c_str());
      return fail("writing " + path);
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ::unlink(path.c_str());
    if (handle == nullptr) return fail(std::string("dlopen: ") + ::dlerror());
    auto fn = reinterpret_cast<ExtensionEntryFn>(::dlsym(handle, kExtensionEntryName));
    if (fn == nullptr) return fail(std::string("no ") + kExtensionEntryName + " in the cached library");
    {
      std::lock_guard<std::mutex> lock(R().store_mu);
      R().extensions[e.key] = fn;
    }
    e.extension = fn;
    e.state.store(SigEntry::kLoaded, std::memory_order_release);
    return SigEntry::kLoaded;
  }

  int Load(SigEntry& e, const cache::WinnerRecord& rec, const torch::jit::Stack& stack) {
    if (rec.versions_json.find("\"form\":\"extension\"") != std::string::npos) return LoadExtension(e, rec);
    auto plan = LaunchPlan::FromJson(rec.launch_plan_json);
    if (!plan.ok()) {
      e.failure = "bad launch plan: " + plan.status().message();
      e.state.store(SigEntry::kFailed);
      return SigEntry::kFailed;
    }
    c10::DeviceGuard guard(stack[stack.size() - n_in_].toTensor().device());
    auto k = LoadedKernel::Load(rec.cubin, *plan, static_cast<int>(n_in_), static_cast<int>(n_out_));
    if (!k.ok()) {
      e.failure = "kernel load failed: " + k.status().message();
      e.state.store(SigEntry::kFailed);
      return SigEntry::kFailed;
    }
    std::shared_ptr<LoadedKernel> shared(std::move(k).value());
    {
      std::lock_guard<std::mutex> lock(R().store_mu);
      R().kernels[e.key] = shared;
    }
    e.kernel = shared;
    e.state.store(SigEntry::kLoaded, std::memory_order_release);
    return SigEntry::kLoaded;
  }

  int Queue(const std::shared_ptr<SigEntry>& e, const torch::jit::Stack& stack) {
    int expected = SigEntry::kNoWinner;
    if (!e->state.compare_exchange_strong(expected, SigEntry::kPending)) return e->state.load();
    size_t base = stack.size() - n_in_;
    std::vector<at::Tensor> ts;
    for (size_t i = 0; i < n_in_; ++i) ts.push_back(stack[base + i].toTensor());
    Enqueue(TuneJob{*e->task, HostBytes(ts), e});
    return SigEntry::kPending;
  }

  // Calls an extension winner's dice_forward; its outputs must match the
  // task's (count, shape, dtype), else the group falls back from now on.
  bool LaunchExtension(SigEntry& e, torch::jit::Stack& stack, std::string* why) {
    size_t base = stack.size() - n_in_;
    std::vector<at::Tensor> ins;
    ins.reserve(n_in_);
    for (size_t i = 0; i < n_in_; ++i) ins.push_back(stack[base + i].toTensor());
    std::vector<at::Tensor> outs;
    char error[1024] = {0};
    c10::DeviceGuard guard(ins.front().device());
    int rc = e.extension(ins.data(), static_cast<int>(ins.size()), &outs, error, sizeof(error));
    std::string bad = rc != 0 ? std::string("dice_forward failed: ") + error : std::string();
    if (bad.empty() && outs.size() != n_out_) bad = "dice_forward returned a wrong number of outputs";
    for (size_t o = 0; bad.empty() && o < outs.size(); ++o) {
      if (!outs[o].defined() || outs[o].sizes().vec() != e.out_shapes[o] || outs[o].scalar_type() != e.out_dtypes[o]) {
        bad = "dice_forward output " + std::to_string(o) + " has the wrong shape or dtype";
      }
    }
    if (!bad.empty()) {
      e.failure = bad;
      e.state.store(SigEntry::kFailed);
      *why = e.failure;
      return false;
    }
    torch::jit::drop(stack, n_in_);
    for (auto& o : outs) stack.emplace_back(std::move(o));
    return true;
  }

  bool Launch(SigEntry& e, torch::jit::Stack& stack, std::string* why) {
    if (e.extension != nullptr) return LaunchExtension(e, stack, why);
    size_t base = stack.size() - n_in_;
    const at::Tensor& first = stack[base].toTensor();
    c10::Device dev = first.device();
    void* ptrs[64];
    if (n_in_ + n_out_ > 64) {
      *why = "too many arguments";
      return false;
    }
    std::vector<at::Tensor> outs;
    outs.reserve(n_out_);
    for (size_t i = 0; i < n_in_; ++i) ptrs[i] = stack[base + i].toTensor().data_ptr();
    for (size_t o = 0; o < n_out_; ++o) {
      outs.push_back(at::empty(e.out_shapes[o], at::TensorOptions().dtype(e.out_dtypes[o]).device(dev)));
      ptrs[n_in_ + o] = outs.back().data_ptr();
    }
    at::Tensor workspace;
    uint64_t ws = e.kernel->plan().workspace_bytes;
    if (ws > 0) workspace = at::zeros({static_cast<int64_t>(ws)}, at::TensorOptions().dtype(at::kByte).device(dev));
    c10::DeviceGuard guard(dev);
    void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
    Status st = e.kernel->Launch(ptrs, ws > 0 ? workspace.data_ptr() : nullptr, stream);
    if (!st.ok()) {
      e.failure = "launch failed: " + st.message();
      e.state.store(SigEntry::kFailed);
      *why = e.failure;
      return false;
    }
    torch::jit::drop(stack, n_in_);
    for (auto& o : outs) stack.emplace_back(std::move(o));
    return true;
  }

  ir::Graph graph_;
  GroupRecord* record_ = nullptr;
  size_t n_in_ = 0, n_out_ = 0;
  std::shared_ptr<torch::jit::Code> code_;
  std::mutex mu_;
  std::vector<std::shared_ptr<SigEntry>> entries_;
};

// ---------------------------------------------------------------------------
// dice::run_group: groups keyed by IR text (run_group.h).

struct IrGroupTable {
  std::shared_mutex mu;
  std::deque<std::string> texts;  // owns the keys below (deque: stable addresses)
  std::unordered_map<std::string_view, std::shared_ptr<GroupOp>> by_text;  // given text and canonical text
};

IrGroupTable& IrGroups() {
  static IrGroupTable* t = new IrGroupTable;  // leaked like Runtime
  return *t;
}

// The op for `ir_text`, registering it on first sight.
Expected<std::shared_ptr<GroupOp>> IrGroup(std::string_view ir_text, const std::vector<std::string>* torch_ops) {
  IrGroupTable& t = IrGroups();
  {
    // Hot path (every call): no allocation, a reader lock.
    std::shared_lock<std::shared_mutex> lock(t.mu);
    auto it = t.by_text.find(ir_text);
    if (it != t.by_text.end()) return it->second;
  }
  auto g = ir::Parse(ir_text);
  if (!g.ok()) return g.status().WithContext("dice IR");
  CapturedGroup group;
  group.canonical = ir::Canonical(*g);
  group.summary = ir::Summary(*g);
  if (torch_ops) group.torch_ops = *torch_ops;
  group.graph = *g;
  std::unique_lock<std::shared_mutex> lock(t.mu);
  auto it = t.by_text.find(group.canonical);
  if (it == t.by_text.end()) {
    t.texts.push_back(group.canonical);
    int id = RegisterGroup(group);
    auto op = std::make_shared<GroupOp>(std::move(group.graph), FindRecord(id));
    it = t.by_text.emplace(std::string_view(t.texts.back()), std::move(op)).first;
  }
  std::shared_ptr<GroupOp> op = it->second;
  if (t.by_text.find(ir_text) == t.by_text.end()) {
    t.texts.emplace_back(ir_text);
    t.by_text.emplace(std::string_view(t.texts.back()), op);
  }
  return op;
}

std::string DescribeInput(const at::Tensor& t) {
  return DTypeText(t.scalar_type()) + " rank " + std::to_string(t.dim());
}

// Inputs against the IR's declarations: count, dtype, rank.
Status CheckInputs(const ir::Graph& graph, const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != graph.inputs.size()) {
    return Status(StatusCode::kInvalidArgument, "dice::run_group: the IR declares " +
                                                    std::to_string(graph.inputs.size()) + " inputs, got " +
                                                    std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined()) return Status(StatusCode::kInvalidArgument, "dice::run_group: input " + std::to_string(i) + " is undefined");
    auto dt = reference::FromScalarType(t.scalar_type());
    if (!dt.ok() || *dt != graph.inputs[i].dtype || t.dim() != graph.inputs[i].rank) {
      return Status(StatusCode::kInvalidArgument,
                    "dice::run_group: input " + std::to_string(i) + " is " + DescribeInput(t) + ", the IR declares " +
                        ir::DTypeName(graph.inputs[i].dtype) + " rank " + std::to_string(graph.inputs[i].rank));
    }
  }
  return Status::Ok();
}

std::vector<at::Tensor> ThrowIfError(Expected<std::vector<at::Tensor>> r) {
  TORCH_CHECK(r.ok(), r.status().ToString());
  return std::move(r).value();
}

std::vector<at::Tensor> RunGroupKernel(c10::string_view ir, at::TensorList inputs) {
  return ThrowIfError(RunGroup(std::string_view(ir.data(), ir.size()), inputs.vec()));
}

std::vector<at::Tensor> RunGroupMeta(c10::string_view ir, at::TensorList inputs) {
  return ThrowIfError(MetaOutputs(std::string_view(ir.data(), ir.size()), inputs.vec()));
}

int64_t RegisterGroupOp(c10::string_view ir, std::vector<std::string> torch_ops) {
  auto id = RegisterIrGroup(std::string_view(ir.data(), ir.size()), torch_ops);
  TORCH_CHECK(id.ok(), id.status().ToString());
  return *id;
}

void SetOptionsOp(c10::string_view mode, c10::string_view cache_dir) {
  Options o = GetRuntimeOptions();
  if (!mode.empty()) {
    auto m = ParseMode(std::string_view(mode.data(), mode.size()));
    TORCH_CHECK(m.ok(), m.status().ToString());
    o.mode = *m;
  }
  o.cache_dir = std::string(cache_dir.data(), cache_dir.size());
  SetRuntimeOptions(o);
}

std::string GetModeOp() { return ModeName(CurrentMode()); }

std::string GroupStatsOp() { return GroupStatsJson(); }

TORCH_LIBRARY(dice, m) {
  m.def("run_group(str ir, Tensor[] inputs) -> Tensor[]");
  m.impl("run_group", c10::DispatchKey::CPU, TORCH_FN(RunGroupKernel));
  m.impl("run_group", c10::DispatchKey::CUDA, TORCH_FN(RunGroupKernel));
  m.impl("run_group", c10::DispatchKey::Meta, TORCH_FN(RunGroupMeta));
  m.def("register_group(str ir, str[] torch_ops) -> int", TORCH_FN(RegisterGroupOp));
  m.def("set_options(str mode, str cache_dir) -> ()", TORCH_FN(SetOptionsOp));
  m.def("get_mode() -> str", TORCH_FN(GetModeOp));
  m.def("group_stats() -> str", TORCH_FN(GroupStatsOp));
}

torch::jit::Operation CreateGroupOp(const torch::jit::Node* node) {
  auto op = std::make_shared<GroupOp>(node);
  return [op](torch::jit::Stack& stack) { op->Run(stack); };
}

const torch::jit::RegisterOperators kFusionGroupOp({
    torch::jit::Operator(FusionGroupSymbol(), CreateGroupOp, c10::AliasAnalysisKind::PURE_FUNCTION),
});

}  // namespace

// ---------------------------------------------------------------------------
// Group table, options, capture (declared in fusion_pass.h / optimize.h).

int RegisterGroup(const CapturedGroup& group) {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  auto rec = std::make_unique<GroupRecord>();
  rec->id = static_cast<int>(r.groups.size()) + 1;
  rec->group = group;
  r.groups.push_back(std::move(rec));
  return r.groups.back()->id;
}

Expected<CapturedGroup> GetRegisteredGroup(int id) {
  GroupRecord* rec = FindRecord(id);
  if (!rec) return Status(StatusCode::kNotFound, "no fusion group with id " + std::to_string(id));
  return rec->group;
}

void SetGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators) {
  Runtime& r = R();
  std::lock_guard<std::mutex> tune_lock(r.tune_mu);
  r.generators = std::move(generators);
  r.tuner.reset();  // the next tune builds a Tuner with them
}

void SetRuntimeOptions(const Options& options) {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  r.options = options;
  r.options.example_inputs.clear();
  r.options_set = true;
  r.mode.store(static_cast<int>(options.mode));
  r.mode_loaded.store(true, std::memory_order_release);
}

Options GetRuntimeOptions() {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.options_set) {
    r.options = EnvOptionsOrDefault();
    r.options_set = true;
  }
  return r.options;
}

std::vector<GroupStats> GetGroupStats() {
  Runtime& r = R();
  std::vector<GroupRecord*> recs;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& g : r.groups) recs.push_back(g.get());
  }
  std::vector<GroupStats> out;
  for (GroupRecord* g : recs) {
    GroupStats s;
    s.id = g->id;
    s.summary = g->group.summary;
    s.canonical = g->group.canonical;
    s.calls = g->calls.load();
    s.hits = g->hits.load();
    s.fallbacks = g->fallbacks.load();
    s.timed_calls = g->timed_calls.load();
    s.total_us = static_cast<double>(g->total_ns.load()) / 1000.0;
    std::lock_guard<std::mutex> lock(g->mu);
    s.input_specs = g->input_specs;
    s.task_key = g->task_key;
    s.task_keys = g->task_keys;
    for (const auto& [reason, n] : g->reasons) s.fallback_reasons.emplace_back(reason, n);
    std::sort(s.fallback_reasons.begin(), s.fallback_reasons.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    out.push_back(std::move(s));
  }
  return out;
}

void ResetGroupStats() {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& g : r.groups) {
    g->calls = 0;
    g->hits = 0;
    g->fallbacks = 0;
    g->timed_calls = 0;
    g->total_ns = 0;
    std::lock_guard<std::mutex> gl(g->mu);
    g->reasons.clear();
    g->captured_signatures.clear();
  }
}

void SetCaptureInputs(bool enabled) {
  Runtime& r = R();
  if (enabled) {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& g : r.groups) {
      std::lock_guard<std::mutex> gl(g->mu);
      g->captured_signatures.clear();
    }
  }
  r.capture.store(enabled);
}

std::vector<CapturedCall> TakeCapturedCalls() {
  Runtime& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<CapturedCall> out = std::move(r.captured);
  r.captured.clear();
  return out;
}

TargetInfo CurrentTarget(int ordinal) {
  static std::mutex mu;
  static std::map<int, TargetInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(ordinal);
  if (it != cache.end()) return it->second;
  TargetInfo t = TargetForDevice(ordinal);
  cache[ordinal] = t;
  return t;
}

Expected<TuneReport> TuneCapturedCall(const CapturedCall& call, const Options& options) {
  SetRuntimeOptions(options);
  auto task = Task::Make(call.graph, call.inputs, CurrentTarget(options.tune.device));
  if (!task.ok()) return task.status();
  return TuneTaskNow(*task, call.input_bytes.empty() ? nullptr : &call.input_bytes);
}

// ---------------------------------------------------------------------------
// run_group.h

Expected<int> RegisterIrGroup(std::string_view ir_text, const std::vector<std::string>& torch_ops) {
  auto op = IrGroup(ir_text, &torch_ops);
  if (!op.ok()) return op.status();
  return (*op)->record_id();
}

Expected<std::vector<at::Tensor>> RunGroup(std::string_view ir_text, const std::vector<at::Tensor>& inputs) {
  auto op = IrGroup(ir_text, nullptr);
  if (!op.ok()) return op.status();
  DICE_RETURN_IF_ERROR(CheckInputs((*op)->graph(), inputs));
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  try {
    (*op)->Run(stack);
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInvalidArgument, e.what_without_backtrace());
  }
  std::vector<at::Tensor> outs;
  outs.reserve(stack.size());
  for (auto& v : stack) {
    at::Tensor t = v.toTensor();
    bool aliases = false;
    for (const auto& in : inputs) aliases = aliases || t.is_alias_of(in);
    outs.push_back(aliases ? t.clone(at::MemoryFormat::Contiguous) : t.contiguous());
  }
  return outs;
}

Expected<std::vector<at::Tensor>> MetaOutputs(std::string_view ir_text, const std::vector<at::Tensor>& inputs) {
  auto op = IrGroup(ir_text, nullptr);
  if (!op.ok()) return op.status();
  const ir::Graph& graph = (*op)->graph();
  DICE_RETURN_IF_ERROR(CheckInputs(graph, inputs));
  auto types = ir::InferTypes(graph);
  if (!types.ok()) return types.status();
  // ir::InferShapes' rules on symbolic sizes.
  std::vector<c10::SymDimVector> shapes;
  shapes.reserve(graph.num_values());
  for (const auto& t : inputs) shapes.emplace_back(t.sym_sizes().begin(), t.sym_sizes().end());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const ir::Op& o = graph.ops[i];
    c10::SymDimVector out;
    switch (ir::GetOpInfo(o.kind).category) {
      case ir::OpCategory::kConstant: break;
      case ir::OpCategory::kUnary:
      case ir::OpCategory::kNormalization: out = shapes[o.args[0]]; break;
      case ir::OpCategory::kBinary:
        try {
          out = at::infer_size_symdimvector(shapes[o.args[0]], shapes[o.args[1]]);
        } catch (const c10::Error& e) {
          return Status(StatusCode::kInvalidArgument, "op " + std::to_string(i) + " (" + ir::GetOpInfo(o.kind).name +
                                                          "): " + e.what_without_backtrace());
        }
        break;
      case ir::OpCategory::kReduction: {
        const auto& x = shapes[o.args[0]];
        for (size_t d = 0; d < x.size(); ++d) {
          const bool reduced = o.dims.empty() || std::find(o.dims.begin(), o.dims.end(), (int64_t)d) != o.dims.end();
          if (!reduced) out.push_back(x[d]);
          else if (o.keepdim) out.push_back(1);
        }
        break;
      }
    }
    shapes.push_back(std::move(out));
  }
  at::TensorOptions base = inputs.empty() ? at::TensorOptions().device(at::kMeta) : inputs[0].options();
  std::vector<at::Tensor> outs;
  for (int32_t v : graph.outputs) {
    outs.push_back(at::empty_symint(shapes[v], base.dtype(reference::ToScalarType((*types)[v].dtype))));
  }
  return outs;
}

std::string GroupStatsJson() {
  nlohmann::json arr = nlohmann::json::array();
  for (const GroupStats& s : GetGroupStats()) {
    nlohmann::json reasons = nlohmann::json::object();
    for (const auto& [reason, n] : s.fallback_reasons) reasons[reason] = n;
    auto g = GetRegisteredGroup(s.id);
    arr.push_back({{"id", s.id},
                   {"summary", s.summary},
                   {"canonical", s.canonical},
                   {"torch_ops", g.ok() ? g->torch_ops : std::vector<std::string>{}},
                   {"input_specs", s.input_specs},
                   {"task_key", s.task_key},
                   {"task_keys", s.task_keys},
                   {"calls", s.calls},
                   {"hits", s.hits},
                   {"fallbacks", s.fallbacks},
                   {"timed_calls", s.timed_calls},
                   {"total_us", s.total_us},
                   {"fallback_reasons", reasons}});
  }
  return arr.dump();
}

}  // namespace dice::torch_ext
