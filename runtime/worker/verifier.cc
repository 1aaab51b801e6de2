// verifier.cc — trials, verification and timing inside dice-worker
// (verifier.h; DESIGN.md "Verification", "Timing", "Precision policy").
// The one file of the worker that uses LibTorch.
#include "verifier.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/headeronly/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

#include "dice/core/tensor_layout.h"
#include "dice/reference/device_compare.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/comparator.h"
#include "dice/runtime/kernel_launcher.h"
#include "trial_layout.h"

namespace dice::runtime::worker_impl {
namespace {

constexpr int kWarmupReps = 3;
constexpr int kMinTimedReps = 20;      // DESIGN.md "Timing": median of many
constexpr int kMaxTimedReps = 200;
constexpr double kTargetTimingMs = 300;  // aim for this much timed work per measurement
constexpr int64_t kMinFlushBytes = 256ll << 20;
constexpr double kReverifySpeedup = 10.0;  // speedups above this are re-verified
constexpr int kReverifyFactor = 3;         // ... with this many times the trials
constexpr double kReducedPrecisionToleranceFactor = 10.0;
constexpr size_t kMaxErrorChars = 4000;
constexpr uint64_t kSeedBase = 0x5eed0000ull;
// Above this many bytes of trial data (inputs + reference outputs, all
// trials together), random trials are rebuilt from their seeds when needed
// instead of being kept: a 6 GB-per-tensor task would otherwise hold ~70 GB.
constexpr int64_t kMaxResidentTrialBytes = 12ll << 30;

std::string Clip(std::string s) { return ClipError(std::move(s)); }

// One verification trial: inputs on the device in the task's layout and the
// reference outputs, on the device too. Candidates of one request share the
// trials, so each trial keeps fingerprints of what it owns (TrialData) and a
// candidate that writes into them is caught (ChangedTrialData).
struct Trial {
  std::string label;
  int random_index = -1;  // MakeRandomTrial's index; -1 = the captured inputs
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> refs;  // reference outputs, on the device
  std::vector<ir::DType> ref_dtypes;
  std::vector<at::Tensor> slack;  // per output; undefined = none (see FillReference)
  std::vector<reference::StorageFingerprint> prints;  // of TrialData(*this), in its order
};

// What a trial owns, with names for a message: inputs, reference outputs, slack.
std::vector<std::pair<std::string, at::Tensor>> TrialData(const Trial& t) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (size_t i = 0; i < t.inputs.size(); ++i) v.emplace_back("input " + std::to_string(i), t.inputs[i]);
  for (size_t k = 0; k < t.refs.size(); ++k) v.emplace_back("reference output " + std::to_string(k), t.refs[k]);
  for (size_t k = 0; k < t.slack.size(); ++k) {
    if (t.slack[k].defined()) v.emplace_back("slack of output " + std::to_string(k), t.slack[k]);
  }
  return v;
}

void TakeFingerprints(Trial* t) {
  t->prints.clear();
  for (const auto& [name, tensor] : TrialData(*t)) t->prints.push_back(reference::FingerprintStorage(tensor));
}

// Output buffers of one candidate: raw bytes (poisoned before every run) and
// typed views of them in the task's output layout; plus the workspace.
struct Buffers {
  std::vector<at::Tensor> bytes;
  std::vector<at::Tensor> typed;
  at::Tensor workspace;
};

// Everything a tune request shares between candidates.
struct Session {
  const CudaDriver* driver = nullptr;
  const worker::TuneRequest* req = nullptr;
  ir::Graph graph;
  std::vector<ir::TensorSpec> outputs;
  std::vector<bool> positive;  // input i feeds log/sqrt/rsqrt/pow: keep it > 0
  at::Device device{at::kCUDA, 0};
  at::Tensor flush;            // written between timed repetitions to evict L2
  std::vector<Trial> trials;   // random + captured
  std::optional<std::vector<Trial>> extra_trials;  // re-verification (built on demand)
  int lazy_first = 0, lazy_last = 0;  // random trials [first, last) rebuilt on demand (large tasks)
  double baseline_us = 0;
};


at::Tensor RandomInput(const Session& ss, const ir::TensorSpec& spec, bool positive, double scale) {
  const int64_t off = AlignmentOffset(spec);
  at::Tensor buf = at::randn({StorageNumel(spec) + off}, at::TensorOptions().device(ss.device).dtype(at::kFloat));
  buf.mul_(scale);
  if (positive) buf = buf.abs_().add_(0.1);
  buf = buf.to(reference::ToScalarType(spec.dtype));
  return buf.as_strided(spec.shape, spec.strides, off);
}

Status FillReference(const Session& ss, Trial* t) {
  auto ref = reference::Run(ss.graph, t->inputs);
  if (!ref.ok()) return ref.status().WithContext("reference executor (" + t->label + ")");
  if (ref->size() != ss.outputs.size()) {
    return Status(StatusCode::kInternal, "reference executor returned " + std::to_string(ref->size()) +
                                             " outputs, the task has " + std::to_string(ss.outputs.size()));
  }
  for (size_t k = 0; k < ref->size(); ++k) {
    const at::Tensor& r = (*ref)[k];
    if (r.sizes().vec() != ss.outputs[k].shape) {
      return Status(StatusCode::kInternal, "reference output " + std::to_string(k) + " has shape " +
                                               c10::str(r.sizes()) + ", the task says " + ss.outputs[k].ToString());
    }
    auto dt = reference::FromScalarType(r.scalar_type());
    if (!dt.ok()) return dt.status().WithContext("reference output " + std::to_string(k));
    t->refs.push_back(r.contiguous());
    t->ref_dtypes.push_back(*dt);
  }
  // The float64 second opinion (reference::SecondOpinionFor): norm-wise for
  // a group with a contraction, element-wise for reduction outputs and for
  // float16/bfloat16 outputs of op chains (PyTorch rounds each op, a fused
  // kernel keeps float32 between them); none for the rest.
  int64_t max_in = 0;
  for (const auto& in : t->inputs) max_in = std::max<int64_t>(max_in, in.numel());
  std::vector<reference::SecondOpinion> opinion;
  bool any = false;
  for (size_t k = 0; k < t->refs.size(); ++k) {
    opinion.push_back(reference::SecondOpinionFor(ss.graph, ss.outputs[k].dtype, t->refs[k].numel(), max_in));
    any = any || opinion.back() != reference::SecondOpinion::kNone;
  }
  t->slack.assign(t->refs.size(), at::Tensor());
  if (any) {
    auto ref64 = reference::Run(ss.graph, t->inputs, /*upcast=*/true);
    if (!ref64.ok()) return ref64.status().WithContext("float64 reference executor (" + t->label + ")");
    for (size_t k = 0; k < t->refs.size(); ++k) {
      if (opinion[k] == reference::SecondOpinion::kNormwise) {
        t->slack[k] = reference::NormwiseErrorSlack(t->refs[k], (*ref64)[k]);
      } else if (opinion[k] == reference::SecondOpinion::kElementwise) {
        t->slack[k] = reference::ReferenceErrorSlack(t->refs[k], (*ref64)[k]);
      }
    }
  }
  TakeFingerprints(t);
  return Status::Ok();
}

// Random trial number `index`: randn scaled by 1 (even) or 10 (odd).
Expected<Trial> MakeRandomTrial(const Session& ss, int index) {
  Trial t;
  t.random_index = index;
  const double scale = (index % 2 == 0) ? 1.0 : 10.0;
  t.label = "random trial " + std::to_string(index) + " (randn x" + std::to_string(static_cast<int>(scale)) + ")";
  at::manual_seed(kSeedBase + static_cast<uint64_t>(index));
  for (size_t i = 0; i < ss.req->inputs.size(); ++i) {
    t.inputs.push_back(RandomInput(ss, ss.req->inputs[i], ss.positive[i], scale));
  }
  DICE_RETURN_IF_ERROR(FillReference(ss, &t));
  return t;
}

// The captured real inputs, read from the request's file.
Expected<Trial> MakeCapturedTrial(const Session& ss) {
  const worker::TuneRequest& req = *ss.req;
  uint64_t expected = 0;
  for (const auto& s : req.inputs) expected += static_cast<uint64_t>(s.nbytes());
  if (expected != req.captured_bytes || req.captured_bytes > worker::kMaxCapturedBytes) {
    return Status(StatusCode::kInvalidArgument, "captured inputs: " + std::to_string(req.captured_bytes) +
                                                    " bytes, the task's inputs need " + std::to_string(expected));
  }
  std::ifstream in(req.captured_path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, "cannot open captured inputs '" + req.captured_path + "'");
  std::string bytes(static_cast<size_t>(req.captured_bytes), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return Status(StatusCode::kIoError, "short read of captured inputs '" + req.captured_path + "'");
  }
  Trial t;
  t.label = "captured inputs";
  size_t offset = 0;
  for (const auto& spec : req.inputs) {
    const auto dtype = reference::ToScalarType(spec.dtype);
    at::Tensor host = at::from_blob(bytes.data() + offset, spec.shape, at::TensorOptions().dtype(dtype));
    offset += static_cast<size_t>(spec.nbytes());
    const int64_t off = AlignmentOffset(spec);
    at::Tensor buf = at::zeros({StorageNumel(spec) + off}, at::TensorOptions().device(ss.device).dtype(dtype));
    at::Tensor dev = buf.as_strided(spec.shape, spec.strides, off);
    dev.copy_(host);  // throws for overlapping (stride-0) layouts; the caller skips the trial
    t.inputs.push_back(dev);
  }
  DICE_RETURN_IF_ERROR(FillReference(ss, &t));
  return t;
}

Buffers MakeBuffers(const Session& ss, const LaunchPlan& plan) {
  Buffers b;
  for (const auto& spec : ss.outputs) {
    const int64_t nbytes = StorageNumel(spec) * ir::DTypeSize(spec.dtype);
    at::Tensor raw = at::empty({std::max<int64_t>(nbytes, 16)}, at::TensorOptions().device(ss.device).dtype(at::kByte));
    // The kernel writes the spec's strides (channels_last outputs); compared by logical index.
    at::Tensor typed = raw.narrow(0, 0, nbytes).view(reference::ToScalarType(spec.dtype)).as_strided(spec.shape, spec.strides);
    b.bytes.push_back(raw);
    b.typed.push_back(typed);
  }
  if (plan.workspace_bytes > 0) {
    b.workspace = at::zeros({static_cast<int64_t>(plan.workspace_bytes)},
                            at::TensorOptions().device(ss.device).dtype(at::kByte));
  }
  return b;
}

// cuCtxSynchronize: an error here is sticky (illegal address, misaligned
// access, trap): the context is unusable and the worker must exit.
Status SyncContext(const Session& ss, const char* what) {
  CUresult_t rc = ss.driver->cuCtxSynchronize();
  if (rc != 0) return Status(StatusCode::kCrashed, ss.driver->ErrorText(what, rc));
  return Status::Ok();
}

// How a candidate runs: a device-form cubin launched through its plan, or
// an extension-form shared object called through dice_ext_forward.
class Runner {
 public:
  virtual ~Runner() = default;
  // Runs the candidate once on `t` (no synchronisation) leaving its outputs
  // in b.typed.
  virtual Status Run(const Trial& t, Buffers& b, void* stream) const = 0;
  // What is timed: one run without any copy the verifier needs.
  virtual Status RunForTiming(const Trial& t, Buffers& b, void* stream) const { return Run(t, b, stream); }
};

class CubinRunner : public Runner {
 public:
  explicit CubinRunner(const LoadedKernel& k) : k_(k) {}
  Status Run(const Trial& t, Buffers& b, void* stream) const override {
    std::vector<void*> ptrs;
    ptrs.reserve(t.inputs.size() + b.typed.size());
    for (const auto& x : t.inputs) ptrs.push_back(x.data_ptr());
    for (const auto& y : b.typed) ptrs.push_back(y.data_ptr());
    return k_.Launch(ptrs.data(), b.workspace.defined() ? b.workspace.data_ptr() : nullptr, stream);
  }

 private:
  const LoadedKernel& k_;
};

// Calls dice_forward (through the entry point extension_compiler.h adds) on
// PyTorch's current stream. The extension allocates its own outputs; before
// every verification run, blocks the size of each output are allocated,
// filled with the poison byte and released, so the caching allocator hands
// the extension poisoned memory, and stale results of an earlier run cannot
// pass for fresh ones. The results are checked for count, shape and dtype,
// then copied into the verifier's buffers.
class ExtensionRunner : public Runner {
 public:
  ExtensionRunner(ExtensionEntryFn fn, const std::vector<ir::TensorSpec>& outputs) : fn_(fn), outputs_(outputs) {}

  Status Call(const Trial& t, std::vector<at::Tensor>* out) const {
    char error[2048] = {0};
    const int rc = fn_(t.inputs.data(), static_cast<int>(t.inputs.size()), out, error, sizeof(error));
    if (rc != 0) return Status(StatusCode::kVerifyFailed, std::string("dice_forward failed: ") + error);
    return Status::Ok();
  }

  Status Run(const Trial& t, Buffers& b, void* /*stream*/) const override {
    {
      std::vector<at::Tensor> poison;
      for (const auto& raw : b.bytes) poison.push_back(at::empty_like(raw).fill_(static_cast<int64_t>(kPoisonByte)));
    }
    std::vector<at::Tensor> out;
    DICE_RETURN_IF_ERROR(Call(t, &out));
    if (out.size() != b.typed.size()) {
      return Status(StatusCode::kVerifyFailed, "dice_forward returned " + std::to_string(out.size()) +
                                                   " tensor(s), the task has " + std::to_string(b.typed.size()) +
                                                   " output(s)");
    }
    for (size_t o = 0; o < out.size(); ++o) {
      const at::Tensor& got = out[o];
      const ir::TensorSpec& spec = outputs_[o];
      if (!got.defined() || got.device() != b.typed[o].device() || got.sizes().vec() != spec.shape ||
          got.scalar_type() != b.typed[o].scalar_type()) {
        std::ostringstream what;
        if (!got.defined()) {
          what << "undefined";
        } else {
          what << got.scalar_type() << got.sizes() << " on " << got.device();
        }
        return Status(StatusCode::kVerifyFailed, "dice_forward output " + std::to_string(o) + " is " + what.str() +
                                                     ", the task expects " + spec.ToString() + " on " +
                                                     b.typed[o].device().str());
      }
      b.typed[o].copy_(got);
    }
    return Status::Ok();
  }

  Status RunForTiming(const Trial& t, Buffers& /*b*/, void* /*stream*/) const override {
    std::vector<at::Tensor> out;
    return Call(t, &out);
  }

 private:
  ExtensionEntryFn fn_;
  const std::vector<ir::TensorSpec>& outputs_;
};

// Launches the candidate once (no synchronisation).
Status LaunchOnce(const Runner& k, const Trial& t, Buffers& b, void* stream) { return k.Run(t, b, stream); }

// Poisons the outputs (0xFF: NaN in every dtype), zeroes the workspace,
// launches, and waits. kCrashed = sticky CUDA error (fatal).
Status RunOnce(const Session& ss, const Runner& k, const Trial& t, Buffers& b) {
  for (auto& raw : b.bytes) raw.fill_(static_cast<int64_t>(kPoisonByte));
  if (b.workspace.defined()) b.workspace.zero_();
  Status st = LaunchOnce(k, t, b, at::cuda::getCurrentCUDAStream().stream());
  DICE_RETURN_IF_ERROR(SyncContext(ss, "kernel execution"));
  return st;
}

Tolerance ToleranceFor(const worker::TuneRequest& req, const Candidate& c, ir::DType got, ir::DType ref) {
  Tolerance tol = Tolerance::ForDTypes(got, ref);
  if (c.reduced_precision && req.allow_reduced_precision) tol = tol.Scaled(kReducedPrecisionToleranceFactor);
  return tol;
}

// Runs the candidate on every trial: every element against the reference,
// then a repeat run that must agree with the first (races, uninitialised reads).
Status VerifyTrial(const Session& ss, const Candidate& c, const Runner& k, const Trial& t, Buffers& b);

// Verifies on the resident `trials`, then on random trials [lazy_first,
// lazy_last) rebuilt one at a time from their seeds (same inputs as if kept).
Status VerifyOn(const Session& ss, const Candidate& c, const Runner& k, const std::vector<Trial>& trials,
                Buffers& b, int lazy_first = 0, int lazy_last = 0) {
  for (const Trial& t : trials) DICE_RETURN_IF_ERROR(VerifyTrial(ss, c, k, t, b));
  for (int i = lazy_first; i < lazy_last; ++i) {
    auto t = MakeRandomTrial(ss, i);
    if (!t.ok()) return t.status().WithContext("rebuilding random trial " + std::to_string(i));
    DICE_RETURN_IF_ERROR(VerifyTrial(ss, c, k, *t, b));
  }
  return Status::Ok();
}

Status VerifyTrial(const Session& ss, const Candidate& c, const Runner& k, const Trial& t, Buffers& b) {
  {
    Status st = RunOnce(ss, k, t, b);
    if (!st.ok()) return st.WithContext(t.label);
    // Every element is compared on the device (CompareTensors: the rule of
    // CompareBuffers, run with ATen), so multi-GB outputs stay on the GPU.
    std::vector<at::Tensor> first;
    for (size_t o = 0; o < b.typed.size(); ++o) {
      first.push_back(b.typed[o].clone());
      const ir::TensorSpec& spec = ss.outputs[o];
      CompareResult r = reference::CompareTensors(first[o], t.refs[o],
                                                  ToleranceFor(*ss.req, c, spec.dtype, t.ref_dtypes[o]), &t.slack[o]);
      if (!r.ok) {
        return Status(StatusCode::kVerifyFailed,
                      t.label + ", output " + std::to_string(o) + " " + spec.ToString() + ": " + r.reason);
      }
    }
    st = RunOnce(ss, k, t, b);
    if (!st.ok()) return st.WithContext(t.label + " (repeat run)");
    for (size_t o = 0; o < b.typed.size(); ++o) {
      const ir::TensorSpec& spec = ss.outputs[o];
      CompareResult r = reference::CompareTensors(b.typed[o], first[o], ToleranceFor(*ss.req, c, spec.dtype, spec.dtype));
      if (!r.ok) {
        return Status(StatusCode::kVerifyFailed, t.label + ", output " + std::to_string(o) + " " + spec.ToString() +
                                                     ": repeat run disagrees: " + r.reason);
      }
    }
  }
  return Status::Ok();
}

// Median time of `fn` in µs: CUDA events around each call on the current
// stream, warm-up first, the L2 flushed (a write of >= 2x L2) before every
// repetition, at least kMinTimedReps repetitions.
Expected<double> MedianMicros(Session& ss, const std::function<Status()>& fn) {
  auto stream = at::cuda::getCurrentCUDAStream();
  for (int i = 0; i < kWarmupReps; ++i) DICE_RETURN_IF_ERROR(fn());
  DICE_RETURN_IF_ERROR(SyncContext(ss, "warm-up"));
  // One probe repetition sizes the run.
  at::cuda::CUDAEvent probe_start(cudaEventDefault), probe_end(cudaEventDefault);
  ss.flush.zero_();
  probe_start.record(stream);
  DICE_RETURN_IF_ERROR(fn());
  probe_end.record(stream);
  DICE_RETURN_IF_ERROR(SyncContext(ss, "timing probe"));
  const double probe_ms = std::max<double>(probe_start.elapsed_time(probe_end), 1e-3);
  const int reps = std::clamp(static_cast<int>(kTargetTimingMs / probe_ms), kMinTimedReps, kMaxTimedReps);

  std::vector<at::cuda::CUDAEvent> starts, ends;
  starts.reserve(reps);
  ends.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    starts.emplace_back(cudaEventDefault);
    ends.emplace_back(cudaEventDefault);
  }
  for (int i = 0; i < reps; ++i) {
    ss.flush.zero_();
    starts[i].record(stream);
    DICE_RETURN_IF_ERROR(fn());
    ends[i].record(stream);
  }
  DICE_RETURN_IF_ERROR(SyncContext(ss, "timed repetitions"));
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) us[i] = 1000.0 * starts[i].elapsed_time(ends[i]);
  std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
  return us[reps / 2];
}

// Verifies and times one compiled candidate: a cubin or, for extension
// form, the shared object of its build (dlopen'ed here and kept open
// for the worker's lifetime: unloading CUDA code mid-process is not worth
// the risk in a short-lived worker).
worker::CandidateResult Evaluate(Session& ss, const Runnable& runnable) {
  worker::CandidateResult r;
  r.id = runnable.item->id;
  r.compile_ms = runnable.compile_ms();
  const Candidate& c = runnable.item->candidate;
  const ExtensionBuild* ext = runnable.extension.get();
  const CompileResult& compiled = runnable.device;
  auto fail = [&](const Status& st, const std::string& context) {
    if (st.code() == StatusCode::kCrashed) {
      r.outcome = Outcome::kCrashed;
      r.fatal = true;
    } else {
      r.outcome = Outcome::kVerifyFailed;
    }
    r.error = Clip(context.empty() ? st.message() : context + ": " + st.message());
    return r;
  };
  try {
    std::unique_ptr<LoadedKernel> loaded;
    std::unique_ptr<Runner> runner;
    std::string binary;  // what a winner stores: the cubin, or the shared object's bytes
    if (ext != nullptr) {
      void* handle = ::dlopen(ext->library_path().c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        r.outcome = Outcome::kCompileError;
        r.error = Clip(std::string("dlopen of the compiled extension failed: ") + ::dlerror());
        return r;
      }
      auto fn = reinterpret_cast<ExtensionEntryFn>(::dlsym(handle, kExtensionEntryName));
      if (fn == nullptr) {
        r.outcome = Outcome::kCompileError;
        r.error = std::string("the compiled extension has no ") + kExtensionEntryName;
        return r;
      }
      std::ifstream so(ext->library_path(), std::ios::binary);
      binary.assign(std::istreambuf_iterator<char>(so), std::istreambuf_iterator<char>());
      runner = std::make_unique<ExtensionRunner>(fn, ss.outputs);
    } else {
      auto k = LoadedKernel::Load(compiled.cubin, c.plan, static_cast<int>(ss.req->inputs.size()),
                                  static_cast<int>(ss.outputs.size()));
      if (!k.ok()) return fail(k.status(), "loading the cubin");
      loaded = std::move(*k);
      runner = std::make_unique<CubinRunner>(*loaded);
      binary = compiled.cubin;
    }
    const Runner* k = runner.get();
    Buffers b = MakeBuffers(ss, c.plan);
    Status st = VerifyOn(ss, c, *k, ss.trials, b, ss.lazy_first, ss.lazy_last);
    if (!st.ok()) return fail(st, "");

    void* stream = at::cuda::getCurrentCUDAStream().stream();
    const Trial& t0 = ss.trials.front();
    auto us = MedianMicros(ss, [&] {
      if (b.workspace.defined()) b.workspace.zero_();
      return k->RunForTiming(t0, b, stream);
    });
    if (!us.ok()) return fail(us.status(), "timing");

    if (ss.baseline_us > 0 && ss.baseline_us / *us > kReverifySpeedup) {
      const int first = ss.req->trials, last = kReverifyFactor * ss.req->trials;
      if (ss.lazy_last > 0) {
        st = VerifyOn(ss, c, *k, {}, b, first, last);  // large task: rebuilt one at a time
      } else if (!ss.extra_trials) {
        std::vector<Trial> extra;
        for (int i = first; i < last; ++i) {
          auto t = MakeRandomTrial(ss, i);
          if (!t.ok()) return fail(t.status(), "building re-verification trials");
          extra.push_back(std::move(*t));
        }
        ss.extra_trials = std::move(extra);
      }
      if (ss.lazy_last == 0) st = VerifyOn(ss, c, *k, *ss.extra_trials, b);
      if (!st.ok()) {
        return fail(st, "re-verification with " + std::to_string(kReverifyFactor) + "x the trials (speedup " +
                            std::to_string(ss.baseline_us / *us) + "x > " + std::to_string(kReverifySpeedup) + "x)");
      }
    }
    r.outcome = Outcome::kVerified;
    r.time_us = *us;
    r.cubin = std::move(binary);
    return r;
  } catch (const c10::Error& e) {
    // A torch call failed: after a sticky CUDA error every call does.
    Status sync = SyncContext(ss, "after a PyTorch error");
    if (!sync.ok()) return fail(sync, e.what_without_backtrace());
    return fail(Status(StatusCode::kVerifyFailed, e.what_without_backtrace()), "PyTorch error");
  } catch (const std::exception& e) {
    return fail(Status(StatusCode::kVerifyFailed, e.what()), "exception");
  }
}

// The first trial tensor (inputs, reference outputs, slack; resident and
// re-verification trials) whose bytes no longer match its fingerprint, e.g.
// "random trial 4 (randn x1): reference output 0 f32[2048,4096]"; nullopt
// when all are intact. Candidates get only input and output pointers, so a
// change is a candidate writing into its inputs or out of its outputs'
// bounds. Throws c10::Error when the CUDA context is broken.
std::optional<std::string> ChangedTrialData(const Session& ss) {
  auto check = [](const std::vector<Trial>& trials) -> std::optional<std::string> {
    for (const Trial& t : trials) {
      const auto data = TrialData(t);
      for (size_t i = 0; i < data.size() && i < t.prints.size(); ++i) {
        if (reference::FingerprintStorage(data[i].second) != t.prints[i]) {
          return t.label + ": " + data[i].first + " " + c10::str(data[i].second.scalar_type(), data[i].second.sizes());
        }
      }
    }
    return std::nullopt;
  };
  if (auto c = check(ss.trials)) return c;
  if (ss.extra_trials) return check(*ss.extra_trials);
  return std::nullopt;
}

// Rebuilds every resident trial from its seed (or the captured inputs' file)
// and drops the re-verification trials (built again on demand): what the
// candidates after one that wrote into the trial data are verified on.
Status RebuildTrials(Session& ss) {
  std::vector<Trial> fresh;
  for (const Trial& old : ss.trials) {
    auto t = old.random_index >= 0 ? MakeRandomTrial(ss, old.random_index) : MakeCapturedTrial(ss);
    if (!t.ok()) return t.status().WithContext("rebuilding " + old.label);
    fresh.push_back(std::move(*t));
  }
  ss.trials = std::move(fresh);
  ss.extra_trials.reset();
  return Status::Ok();
}

// After candidate `r` ran: when it wrote into the shared trial data, it is
// rejected (verify_failed, naming the changed tensor; a candidate that failed
// anyway keeps its error with this added) and the trials are rebuilt, so
// no later candidate is judged against changed inputs or references.
Status GuardTrialData(Session& ss, worker::CandidateResult& r) {
  if (r.fatal) return Status::Ok();  // the context is gone; the worker exits
  std::optional<std::string> changed;
  try {
    changed = ChangedTrialData(ss);
  } catch (const c10::Error& e) {
    return Status(StatusCode::kCrashed, std::string("checking the trial data: ") + e.what_without_backtrace());
  }
  if (!changed) return Status::Ok();
  const std::string what = "wrote outside its outputs: " + *changed + " changed after it ran";
  if (r.outcome == Outcome::kVerified) {
    r.outcome = Outcome::kVerifyFailed;
    r.error = what;
    r.time_us = 0;
    r.cubin.clear();
  } else {
    r.error = Clip(r.error + "; it also " + what);
  }
  return RebuildTrials(ss);
}

// Trials: fresh random inputs (all resident, or rebuilt on demand for large
// tasks), then the captured real inputs when they are usable.
Status BuildTrialSet(Session& ss) {
  const TrialResidency plan = PlanResidency(ss.req->inputs, ss.outputs, ss.req->trials, kMaxResidentTrialBytes);
  ss.lazy_first = plan.lazy_first;
  ss.lazy_last = plan.lazy_last;
  for (int i = 0; i < plan.resident; ++i) {
    auto t = MakeRandomTrial(ss, i);
    if (!t.ok()) return t.status();
    ss.trials.push_back(std::move(*t));
  }
  if (!ss.req->captured_path.empty()) {
    try {
      auto t = MakeCapturedTrial(ss);
      if (t.ok()) {
        ss.trials.push_back(std::move(*t));
      } else {
        fprintf(stderr, "dice-worker: captured inputs not used: %s\n", t.status().ToString().c_str());
      }
    } catch (const c10::Error& e) {
      fprintf(stderr, "dice-worker: captured inputs not used: %s\n", e.what_without_backtrace());
    }
  }
  const int64_t l2 = at::cuda::getCurrentDeviceProperties()->l2CacheSize;
  ss.flush = at::empty({std::max<int64_t>(kMinFlushBytes, 2 * l2)},
                       at::TensorOptions().device(ss.device).dtype(at::kByte));
  return Status::Ok();
}

// A PyTorch error outside any candidate (trials, reference, baseline):
// kCrashed when the context is gone with it, else kInternal.
Status FromTorchError(const Session& ss, const c10::Error& e) {
  Status sync = SyncContext(ss, "CUDA context");
  return Status(sync.ok() ? StatusCode::kInternal : StatusCode::kCrashed,
                std::string("PyTorch error: ") + e.what_without_backtrace());
}

}  // namespace

std::string ClipError(std::string s) {
  if (s.size() > kMaxErrorChars) {
    s.resize(kMaxErrorChars);
    s += "...";
  }
  return s;
}

struct Verifier::Impl {
  std::optional<c10::cuda::CUDAGuard> guard;  // first: released after the trials
  Session ss;
};

Verifier::Verifier(TaskSetup setup) : impl_(std::make_unique<Impl>()) {
  Session& ss = impl_->ss;
  ss.driver = setup.driver;
  ss.req = setup.req;
  ss.graph = std::move(setup.graph);
  ss.outputs = std::move(setup.outputs);
  ApplyOutputLayouts(ss.graph, ss.req->inputs, &ss.outputs);  // the layouts of serving's task (tensor_layout.h)
  ss.positive = PositiveDomainInputs(ss.graph);
  ss.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(ss.req->device));
}

Verifier::~Verifier() = default;

Status Verifier::BuildTrials() {
  try {
    impl_->guard.emplace(static_cast<c10::DeviceIndex>(impl_->ss.req->device));
    return BuildTrialSet(impl_->ss);
  } catch (const c10::Error& e) {
    return FromTorchError(impl_->ss, e);
  }
}

Expected<double> Verifier::MeasureBaseline() {
  Session& ss = impl_->ss;
  try {
    const Trial& t0 = ss.trials.front();
    auto us = MedianMicros(ss, [&] {
      auto out = reference::Run(ss.graph, t0.inputs);
      return out.ok() ? Status::Ok() : out.status();
    });
    if (us.ok()) ss.baseline_us = *us;
    return us;
  } catch (const c10::Error& e) {
    return FromTorchError(ss, e);
  }
}

void Verifier::SetKnownBaseline(double baseline_us) { impl_->ss.baseline_us = baseline_us; }

worker::CandidateResult Verifier::Evaluate(const Runnable& r) { return worker_impl::Evaluate(impl_->ss, r); }

Status Verifier::GuardTrialData(worker::CandidateResult& r) {
  try {
    return worker_impl::GuardTrialData(impl_->ss, r);
  } catch (const c10::Error& e) {
    return FromTorchError(impl_->ss, e);
  }
}

void Verifier::ReleaseDeviceMemory() { c10::cuda::CUDACachingAllocator::emptyCache(); }

std::string LinkedTorchVersion() { return TORCH_VERSION; }

}  // namespace dice::runtime::worker_impl
