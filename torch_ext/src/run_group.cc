// The fusion-group operator and the two ops that run it: dice::FusionGroup
// (a TorchScript node, fusion_pass.h) and dice::run_group with its helper
// ops (the dispatcher op of graph frontends that pass IR text, run_group.h).
// One GroupOp per group: eligibility checks, the winner kernel on a cache
// hit, otherwise the fallback, and the group's statistics. Finding and
// loading winners (winner_resolution.h), the tuner (tune_queue.h), the
// process-wide state (runtime_state.h, group_record.h) are torch-free
// modules, as are the served layouts and output strides (core's
// dice/core/tensor_layout.h); a call's checks against its IR and the shapes
// of its meta function are call_checks.h.
#include "dice/torch_ext/run_group.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/library.h>

#include "dice/core/task.h"
#include "dice/core/tensor_layout.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/worker_protocol.h"
#include "dice/torch_ext/fusion_pass.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/optimize.h"
#include "call_checks.h"
#include "group_record.h"
#include "ir_group_table.h"
#include "prebuild_collect.h"
#include "runtime_state.h"
#include "tune_queue.h"
#include "winner_resolution.h"

namespace dice::torch_ext {

void ReleaseFrameworkCachedMemory() {
  if (at::globalContext().hasCUDA()) c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache();
}

namespace {

TensorLayout LayoutOf(const at::Tensor& t) {
  return ClassifyLayout(t.sizes().data(), t.strides().data(), static_cast<size_t>(t.dim()));
}

// Host copies of the inputs (contiguous bytes); empty when together they
// exceed the worker's cap (runtime::worker::kMaxCapturedBytes, 2 GiB): then the
// verifier uses random trials only and nothing multi-GB is copied.
std::vector<std::string> HostBytes(const torch::jit::Stack& stack, size_t n_in) {
  std::vector<std::string> out;
  const size_t base = stack.size() - n_in;
  uint64_t total = 0;
  for (size_t i = 0; i < n_in; ++i) total += static_cast<uint64_t>(stack[base + i].toTensor().nbytes());
  if (total > runtime::worker::kMaxCapturedBytes) return out;
  for (size_t i = 0; i < n_in; ++i) {
    at::Tensor c = stack[base + i].toTensor().contiguous().cpu();
    out.emplace_back(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

// One input signature of one op instance on one device: precomputed task
// key and the kernel loaded into that device's context.
struct SigEntry {
  enum State : int { kUnknown = 0, kNoWinner, kPending, kLoaded, kFailed };
  int device = -1;  // CUDA device of the inputs (a model moved to another device gets new entries)
  std::vector<int64_t> signature;
  std::string key;
  std::unique_ptr<Task> task;  // null when the specs did not make a task
  std::atomic<int> state{kUnknown};
  std::string failure;
  std::shared_ptr<runtime::LoadedKernel> kernel;
  runtime::ExtensionEntryFn extension = nullptr;  // an extension-form winner (the kernel is then null)
  std::vector<std::vector<int64_t>> out_shapes;
  std::vector<std::vector<int64_t>> out_strides;  // the task's (channels_last follows the inputs)
  std::vector<at::ScalarType> out_dtypes;

  // The one way an entry fails: the group falls back from now on, `why` is
  // its reason.
  int Fail(std::string why) {
    failure = std::move(why);
    state.store(kFailed, std::memory_order_release);
    return kFailed;
  }

  // A resolution's result: loaded, no winner, or failed.
  int Apply(const Expected<LoadedWinner>& w) {
    if (!w.ok()) return Fail(w.status().message());
    if (!w->found()) {
      if (!w->no_winner.empty()) failure = w->no_winner;
      state.store(kNoWinner, std::memory_order_release);
      return kNoWinner;
    }
    kernel = w->kernel;
    extension = w->extension;
    state.store(kLoaded, std::memory_order_release);
    return kLoaded;
  }

  // A background tune's result: the next call resolves again when it stored
  // a winner.
  void TuneFinished(const Expected<runtime::TuneReport>& rep) {
    if (!rep.ok()) {
      Fail("tuning failed: " + rep.status().message());
      return;
    }
    if (rep->winner_origin.empty()) failure = NoWinnerText(*rep, GetRuntimeSettings().tune.margin);
    state.store(rep->winner_origin.empty() ? kNoWinner : kUnknown, std::memory_order_release);
  }
};

}  // namespace

class GroupOp {
 public:
  // A dice::FusionGroup node: the fallback is the node's TorchScript subgraph.
  explicit GroupOp(const torch::jit::Node* node) {
    TORCH_CHECK(node->hasAttribute(IrAttr()) && node->hasAttribute(GroupIdAttr()),
                "dice::FusionGroup node without dice_ir/dice_group_id attributes");
    auto g = ir::Parse(node->s(IrAttr()));
    TORCH_CHECK(g.ok(), "dice::FusionGroup: bad IR attribute: ", g.status().ToString());
    graph_ = std::move(g).value();
    record_ = FindGroupRecord(static_cast<int>(node->i(GroupIdAttr())));
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

  // Replaces the node's inputs on `stack` with its outputs.
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
    if (CapturingInputs()) Capture(stack);
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
      const TensorLayout layout = LayoutOf(t);
      if (!Servable(layout)) {
        *text = LayoutRefusal(layout, i);
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

  // Input capture: the first call per input signature keeps host copies.
  void Capture(const torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    std::vector<ir::TensorSpec> specs;
    std::vector<int64_t> sig;
    for (size_t i = 0; i < n_in_; ++i) {
      if (!stack[base + i].isTensor()) return;
      auto spec = reference::SpecOf(stack[base + i].toTensor());
      if (!spec.ok()) return;
      sig.push_back(static_cast<int64_t>(spec->dtype));
      sig.insert(sig.end(), spec->shape.begin(), spec->shape.end());
      const TensorLayout layout = LayoutOf(stack[base + i].toTensor());
      sig.push_back(-1 - static_cast<int64_t>(layout));
      specs.push_back(ServedInputSpec(*spec, layout));
    }
    {
      std::lock_guard<std::mutex> lock(record_->mu);
      if (!record_->captured_signatures.insert(sig).second) return;
    }
    CapturedCall call;
    call.group_id = record_->id;
    call.graph = graph_;
    call.inputs = std::move(specs);
    call.input_bytes = HostBytes(stack, n_in_);
    const at::Tensor& first = stack[base].toTensor();
    call.device = first.is_cuda() ? first.device().index() : -1;
    AddCapturedCall(std::move(call));
  }

  // The signature entry for these inputs (created on first sight).
  std::shared_ptr<SigEntry> Entry(const torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    const int device = stack[base].toTensor().device().index();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) {
      if (e->device != device) continue;
      size_t k = 0;
      bool same = true;
      for (size_t i = 0; i < n_in_ && same; ++i) {
        const at::Tensor& t = stack[base + i].toTensor();
        if (e->signature[k++] != static_cast<int64_t>(t.scalar_type())) same = false;
        for (int64_t d : t.sizes()) {
          if (!same) break;
          if (e->signature[k++] != d) same = false;
        }
        if (same && e->signature[k++] != static_cast<int64_t>(LayoutOf(t))) same = false;
      }
      if (same) return e;
    }
    auto e = NewEntry(stack);
    entries_.push_back(e);
    return e;
  }

  // A new signature: its task (key, output shapes and dtypes), noted in the
  // group's record for reports.
  std::shared_ptr<SigEntry> NewEntry(const torch::jit::Stack& stack) {
    size_t base = stack.size() - n_in_;
    auto e = std::make_shared<SigEntry>();
    std::vector<ir::TensorSpec> specs;
    for (size_t i = 0; i < n_in_; ++i) {
      const at::Tensor& t = stack[base + i].toTensor();
      e->signature.push_back(static_cast<int64_t>(t.scalar_type()));
      e->signature.insert(e->signature.end(), t.sizes().begin(), t.sizes().end());
      const TensorLayout layout = LayoutOf(t);
      e->signature.push_back(static_cast<int64_t>(layout));  // a layout is its own entry and task key
      specs.push_back(ServedInputSpec(*reference::SpecOf(t), layout));
    }
    int device = stack[base].toTensor().device().index();
    e->device = device;
    auto task = MakeServedTask(graph_, specs, CurrentTarget(device < 0 ? 0 : device));
    if (!task.ok()) {
      e->Fail("task: " + task.status().message());
    } else {
      e->key = task->Key();
      for (const auto& o : task->outputs) {
        e->out_shapes.push_back(o.shape);
        e->out_strides.push_back(o.strides);
        e->out_dtypes.push_back(reference::ToScalarType(o.dtype));
      }
      e->task = std::make_unique<Task>(std::move(task).value());
    }
    std::lock_guard<std::mutex> rl(record_->mu);
    record_->task_key = e->key;
    if (!e->key.empty() &&
        std::find(record_->task_keys.begin(), record_->task_keys.end(), e->key) == record_->task_keys.end())
      record_->task_keys.push_back(e->key);
    record_->input_specs.clear();
    for (const auto& s : specs) record_->input_specs.push_back(s.ToString());
    return e;
  }

  // Serves the winner; returns false (with why) when none serves.
  bool TryKernel(torch::jit::Stack& stack, Mode mode, std::string* why) {
    std::shared_ptr<SigEntry> e = Entry(stack);
    int state = e->state.load(std::memory_order_acquire);
    if (state == SigEntry::kUnknown && mode == Mode::kTuneSync && e->task && PrebuildCollecting()) {
      CollectForPrebuild(*e->task, e->device);  // resolved by the next forward (prebuild_collect.h)
      *why = "collected for the prebuild";
      return false;
    }
    if (state == SigEntry::kUnknown) state = Resolve(*e, stack, mode);
    if (state == SigEntry::kNoWinner && mode == Mode::kTune) state = Queue(e, stack);
    switch (state) {
      case SigEntry::kLoaded: return Launch(*e, stack, why);
      case SigEntry::kPending: *why = "tuning in progress"; return false;
      case SigEntry::kFailed: *why = e->failure; return false;
      default: *why = e->failure.empty() ? std::string("no winner") : e->failure; return false;
    }
  }

  // First call of a signature (or after a background tune stored a winner).
  int Resolve(SigEntry& e, const torch::jit::Stack& stack, Mode mode) {
    // A device-form cubin loads into the current context: the inputs' device's.
    c10::DeviceGuard guard(stack[stack.size() - n_in_].toTensor().device());
    WinnerRequest req;
    req.task = e.task.get();
    req.key = e.key;
    req.num_inputs = static_cast<int>(n_in_);
    req.num_outputs = static_cast<int>(n_out_);
    req.device = e.device;
    req.tune_on_miss = mode == Mode::kTuneSync;
    req.captured_inputs = [&] { return HostBytes(stack, n_in_); };
    auto w = ResolveWinner(req);
    if (w.ok() && w->found()) NoteWinnerTimes(record_, e.key, w->baseline_us, w->best_us);
    return e.Apply(w);
  }

  // Tune mode: hands a missed signature to the background tuner once.
  int Queue(const std::shared_ptr<SigEntry>& e, const torch::jit::Stack& stack) {
    int expected = SigEntry::kNoWinner;
    if (!e->state.compare_exchange_strong(expected, SigEntry::kPending)) return e->state.load();
    EnqueueTune(*e->task, HostBytes(stack, n_in_), [e](const Expected<runtime::TuneReport>& rep) { e->TuneFinished(rep); },
                e->device);
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
      *why = bad;
      e.Fail(std::move(bad));
      return false;
    }
    torch::jit::drop(stack, n_in_);
    for (auto& o : outs) stack.emplace_back(std::move(o));
    return true;
  }

  // The cache-hit path: outputs allocated, the kernel launched on the
  // current stream. No global lock, no string formatting.
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
      outs.push_back(at::empty_strided(e.out_shapes[o], e.out_strides[o],
                                       at::TensorOptions().dtype(e.out_dtypes[o]).device(dev)));
      ptrs[n_in_ + o] = outs.back().data_ptr();
    }
    at::Tensor workspace;
    uint64_t ws = e.kernel->plan().workspace_bytes;
    if (ws > 0) workspace = at::zeros({static_cast<int64_t>(ws)}, at::TensorOptions().dtype(at::kByte).device(dev));
    c10::DeviceGuard guard(dev);
    void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
    Status st = e.kernel->Launch(ptrs, ws > 0 ? workspace.data_ptr() : nullptr, stream);
    if (!st.ok()) {
      *why = "launch failed: " + st.message();
      e.Fail(*why);
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
  std::mutex mu_;  // guards entries_
  std::vector<std::shared_ptr<SigEntry>> entries_;
};

namespace {

std::shared_ptr<GroupOp> MakeIrGroupOp(ir::Graph graph, GroupRecord* record) {
  return std::make_shared<GroupOp>(std::move(graph), record);
}

// ---------------------------------------------------------------------------
// Op registration: the dispatcher ops (run_group.h) and dice::FusionGroup.

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

void PrebuildBeginOp() { BeginPrebuildCollection(); }

std::string PrebuildFinishOp() { return FinishPrebuild(); }

TORCH_LIBRARY(dice, m) {
  m.def("run_group(str ir, Tensor[] inputs) -> Tensor[]");
  m.impl("run_group", c10::DispatchKey::CPU, TORCH_FN(RunGroupKernel));
  m.impl("run_group", c10::DispatchKey::CUDA, TORCH_FN(RunGroupKernel));
  m.impl("run_group", c10::DispatchKey::Meta, TORCH_FN(RunGroupMeta));
  m.def("register_group(str ir, str[] torch_ops) -> int", TORCH_FN(RegisterGroupOp));
  m.def("set_options(str mode, str cache_dir) -> ()", TORCH_FN(SetOptionsOp));
  m.def("get_mode() -> str", TORCH_FN(GetModeOp));
  m.def("group_stats() -> str", TORCH_FN(GroupStatsOp));
  m.def("prebuild_begin() -> ()", TORCH_FN(PrebuildBeginOp));
  m.def("prebuild_finish() -> str", TORCH_FN(PrebuildFinishOp));
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
// run_group.h

Expected<int> RegisterIrGroup(std::string_view ir_text, const std::vector<std::string>& torch_ops) {
  auto op = FindOrAddIrGroup(ir_text, &torch_ops, MakeIrGroupOp);
  if (!op.ok()) return op.status();
  return (*op)->record_id();
}

Expected<std::vector<at::Tensor>> RunGroup(std::string_view ir_text, const std::vector<at::Tensor>& inputs) {
  auto op = FindOrAddIrGroup(ir_text, nullptr, MakeIrGroupOp);
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
  auto op = FindOrAddIrGroup(ir_text, nullptr, MakeIrGroupOp);
  if (!op.ok()) return op.status();
  const ir::Graph& graph = (*op)->graph();
  DICE_RETURN_IF_ERROR(CheckInputs(graph, inputs));
  auto types = ir::InferTypes(graph);
  if (!types.ok()) return types.status();
  auto shapes = SymbolicShapes(graph, inputs);
  if (!shapes.ok()) return shapes.status();
  at::TensorOptions base = inputs.empty() ? at::TensorOptions().device(at::kMeta) : inputs[0].options();
  std::vector<at::Tensor> outs;
  for (int32_t v : graph.outputs) {
    outs.push_back(at::empty_symint((*shapes)[v], base.dtype(reference::ToScalarType((*types)[v].dtype))));
  }
  return outs;
}

}  // namespace dice::torch_ext
