// `dice run` and `dice profile` (cli/model_commands.h), and what they share
// with `dice tune` (tune_command.cc): loading a TorchScript model with random
// inputs, timing, the cache check (model_common.h). Also the CLI's PyTorch
// boundary (RunAtTorchBoundary) and the --input checks (model_inputs.h),
// since this file includes LibTorch anyway.
#include "model_commands.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/store.h"
#include "dice/core/env.h"
#include "dice/core/log.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/torch_ext/optimize.h"
#include "model_common.h"
#include "model_inputs.h"
#include "progress.h"

namespace dice::cli {
namespace model_cmd {
namespace {

/// Why torch::jit::load refused `path`, for the two files people hand it
/// most often by mistake: a torch.save archive (a pickled nn.Module or state
/// dict: a zip with data.pkl but no TorchScript code), a zip archive
/// PyTorch did not write (named with the first line of its reader's
/// error), a file that is no zip archive at all, a directory (a models/ folder instead of its
/// model.pt) and a path that does not exist. "" when the file looks like a
/// TorchScript archive (then PyTorch's own first line is the cause).
std::string NotTorchScriptReason(const std::string& path) {
  const char* how = "save the model with torch.jit.save(torch.jit.script(model), path) or "
                    "torch.jit.save(torch.jit.trace(model, example_inputs), path)";
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reader.hasRecord("constants.pkl") || reader.hasRecord("code/__torch__.py")) return "";
    if (reader.hasRecord("data.pkl")) return std::string("a torch.save file (a pickled model or state dict), not a "
                                                         "TorchScript archive: ") + how;
    return "";
  } catch (const std::exception& e) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return "it is a directory, not a model file (give the .pt file in it)";
    if (!std::filesystem::exists(path, ec)) return "no such file";
    if (!std::filesystem::is_regular_file(path, ec)) return "";
    // A zip archive starts with the local file header signature "PK\3\4";
    // one PyTorch's reader refuses (e.g. files at its root, not in one
    // top-level folder) is a zip, just not a PyTorch archive.
    char magic[4] = {};
    std::ifstream in(path, std::ios::binary);
    const bool zip = in.read(magic, 4) && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
    if (zip) {
      std::string why = e.what();
      why = why.substr(0, why.find('\n'));
      return "a zip archive, but not one PyTorch wrote (its reader: " + why + "): " + how;
    }
    return std::string("not a TorchScript archive (not a zip file): ") + how;
  }
}

}  // namespace

std::string ModelRunError(const ModelArgs& args, const std::exception& e) {
  std::vector<InputSpec> specs;
  for (const std::string& text : args.input_specs) {
    if (auto spec = ParseInputFlag(text, text); spec.ok()) specs.push_back(*spec);
  }
  const std::string cause = TorchErrorCause(e);
  const std::string hint = RunFailureHint(specs, cause);
  return InputFlags(args.input_specs) + ": the model does not run on these inputs: " + cause +
         (hint.empty() ? "" : " (" + hint + ")");
}

bool ParseInputs(const ModelArgs& args, std::vector<InputSpec>* specs, std::string* error) {
  if (args.input_specs.empty()) {
    *error = "no --input given (one per forward() argument, e.g. --input 1024x8192:f32)";
    return false;
  }
  for (const auto& text : args.input_specs) {
    auto spec = ParseInputFlag(text, text);
    if (!spec.ok()) {
      *error = spec.status().message();
      return false;
    }
    specs->push_back(*spec);
  }
  return true;
}

bool LoadModel(const ModelArgs& args, bool want_gpu, LoadedModel* out, std::string* error) {
  std::vector<InputSpec> specs;
  if (!ParseInputs(args, &specs, error)) return false;
  out->on_gpu = want_gpu;
  const c10::Device device = want_gpu ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  try {
    out->module = torch::jit::load(args.model_path, device);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    const std::string why = NotTorchScriptReason(args.model_path);
    *error = "cannot load TorchScript model '" + args.model_path + "': " +
             (why.empty() ? what.substr(0, what.find('\n')) : why);
    return false;
  }
  out->module.eval();
  if (Status fits = CheckInputsFitForward(out->module, specs, InputFlags(args.input_specs)); !fits.ok()) {
    *error = fits.message();
    return false;
  }
  torch::manual_seed(args.seed);
  for (size_t k = 0; k < specs.size(); ++k) {
    try {
      out->inputs.emplace_back(RandomInput(specs[k], device));
    } catch (const std::exception& e) {  // e.g. more bytes than the device has
      *error = "--input '" + args.input_specs[k] + "': cannot allocate " + std::to_string(specs[k].nbytes()) +
               " bytes on " + device.str() + ": " + TorchErrorCause(e);
      return false;
    }
  }
  return true;
}

void Sync(bool gpu) {
  if (gpu) torch::cuda::synchronize();
}

int CpuTimingThreads() { return static_cast<int>(EnvInt("DICE_CPU_TIMING_THREADS", 1, 1, 256)); }

std::string TimedOn(bool gpu, int threads) {
  if (gpu) return "GPU";
  return "CPU, " + std::to_string(threads) + " intra-op thread" + (threads == 1 ? "" : "s") +
         ", see DICE_CPU_TIMING_THREADS";
}

double TimeForward(torch::jit::Module& module, const std::vector<c10::IValue>& inputs, bool gpu, int reps,
                   const std::function<void()>& after_warmup) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) module.forward(inputs);
  Sync(gpu);
  if (after_warmup) after_warmup();
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    module.forward(inputs);
    Sync(gpu);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

bool CheckCache(const std::string& cache_dir, std::string* error) {
  const std::string dir = cache_dir.empty() ? dice::cache::DefaultCacheDir() : cache_dir;
  auto store = dice::cache::Store::Open(dice::cache::DatabasePath(dir));
  if (!store.ok()) {
    *error = "kernel cache unusable: " + store.status().message();
    // A damaged database is kept as it is (never modified): say how to go on.
    if (store.status().code() == dice::StatusCode::kCorrupt) {
      *error += " (move " + dice::cache::DatabasePath(dir) + " aside, or pass another --cache directory)";
    }
  }
  return store.ok();
}

dice::torch_ext::Options BaseOptions(const ModelArgs& args, const std::vector<c10::IValue>& inputs) {
  auto env = dice::torch_ext::Options::FromEnv();
  dice::torch_ext::Options o = env.ok() ? *env : dice::torch_ext::Options{};
  if (!args.cache_dir.empty()) o.cache_dir = args.cache_dir;
  if (auto f = dice::torch_ext::ParseMemoryFormat(args.memory_format); f.ok()) o.memory_format = *f;
  o.example_inputs = inputs;
  return o;
}

void AddModelArgs(CLI::App* cmd, ModelArgs* args) {
  cmd->add_option("model", args->model_path, "TorchScript model file (torch.jit.save)")->required();
  cmd->add_option("--input,-i", args->input_specs, "forward() argument spec DIMS:DTYPE, repeat per argument: 1024x8192:f32 (f32|f16|bf16: randn), "
                  "8x128:i64:0..50257 (i64|i32 drawn from [LOW, HIGH), default 0..2), 8x128:b8 (bool)");
  cmd->add_option("--cache", args->cache_dir, kCacheFlagHelp);
  cmd->add_option("--reps", args->reps, "timed repetitions for end-to-end times")->check(CLI::Range(1, 100000));
  cmd->add_option("--seed", args->seed, "seed for the random inputs");
  cmd->add_option("--json", args->json_path, "also write the report as JSON to this file (docs/CLI.md)");
}

}  // namespace model_cmd

namespace {

using namespace model_cmd;  // NOLINT(build/namespaces): this file's own helpers

int CmdRunOrProfile(const ModelArgs& args, bool profile) {
  const bool gpu = dice::runtime::QueryDevice(0).ok() && torch::cuda::is_available();
  LoadedModel m;
  std::string error;
  const int cpu_threads = gpu ? 0 : CpuTimingThreads();
  if (!LoadModel(args, gpu, &m, &error)) return Fail(kExitBadInput, error);
  try {  // bad inputs are the user's error (exit 2), found before any pass runs
    torch::NoGradGuard no_grad;
    m.module.forward(m.inputs);
  } catch (const std::exception& e) {
    return Fail(kExitBadInput, ModelRunError(args, e));
  }
  // The cache after the inputs: opening it creates it, and a rejected command leaves nothing behind.
  if (!profile && !CheckCache(args.cache_dir, &error)) return Fail(kExitBadInput, error);
  auto options = BaseOptions(args, m.inputs);
  options.mode = profile ? dice::torch_ext::Mode::kObserve : dice::torch_ext::Mode::kCache;
  auto report = dice::torch_ext::optimize(m.module, options);
  if (!report.ok()) return Fail(kExitFailure, report.status().message());
  for (const auto& w : report->warnings) Warn(w);
  dice::torch_ext::ResetGroupStats();
  double us = 0;
  try {
    CpuTimingScope timing(gpu, cpu_threads);  // the group times of observe mode are taken in here too
    // The group statistics count the timed calls only, not the warm-up (whose
    // first calls run TorchScript's profiling executor, several times slower).
    us = TimeForward(m.module, m.inputs, gpu, args.reps, dice::torch_ext::ResetGroupStats);
  } catch (const std::exception& e) {
    return Fail(kExitBadInput, ModelRunError(args, e));
  }
  auto stats = dice::torch_ext::GetGroupStats();
  if (profile) {
    std::printf("%s", dice::torch_ext::FormatProfile(stats).c_str());
    std::printf("step: %.1f µs median over %d runs (%s)\n", us, args.reps, TimedOn(gpu, cpu_threads).c_str());
    for (const auto& n : report->left_out) std::printf("  left with PyTorch: %s (%s)\n", n.kind.c_str(), n.reason.c_str());
    return kExitOk;
  }
  int hits = 0;
  std::printf("%-4s %-8s %-28s %s\n", "id", "cache", "detail", "group");
  for (const auto& s : stats) {
    const bool hit = s.hits > 0 && s.fallbacks == 0;
    hits += hit;
    std::string reason = s.fallback_reasons.empty() ? "" : s.fallback_reasons.front().first;
    std::printf("%-4d %-8s %-28s %s\n", s.id, hit ? "hit" : "miss", reason.c_str(), s.summary.c_str());
  }
  std::printf("%d/%zu groups served from the cache; step %.1f µs median (%s)\n", hits, stats.size(), us,
              TimedOn(gpu, cpu_threads).c_str());
  return kExitOk;
}

}  // namespace

void RegisterRun(CLI::App& app, CommandTable& table) {
  auto a = std::make_shared<ModelArgs>();
  auto* run = app.add_subcommand("run", "run with cached winners only (never tunes); report hit/miss per group");
  AddModelArgs(run, a.get());
  table.Add(run, [a] { return CmdRunOrProfile(*a, /*profile=*/false); });
}

void RegisterProfile(CLI::App& app, CommandTable& table) {
  auto a = std::make_shared<ModelArgs>();
  auto* profile = app.add_subcommand("profile", "which fusion groups cost what (µs, calls)");
  AddModelArgs(profile, a.get());
  table.Add(profile, [a] { return CmdRunOrProfile(*a, /*profile=*/true); });
}

// ------------------------------------------------ --input checks (model_inputs.h) ----

at::Tensor RandomInput(const InputSpec& spec, const c10::Device& device) {
  const auto options = torch::TensorOptions().device(device);
  switch (spec.element) {
    case InputElement::kFloat:
      return torch::randn(spec.shape(), options.dtype(dice::reference::ToScalarType(spec.tensor.dtype)));
    case InputElement::kInt64: return torch::randint(spec.low, spec.high, spec.shape(), options.dtype(torch::kInt64));
    case InputElement::kInt32: return torch::randint(spec.low, spec.high, spec.shape(), options.dtype(torch::kInt32));
    case InputElement::kBool: return torch::randint(0, 2, spec.shape(), options.dtype(torch::kBool));
  }
  return torch::Tensor();
}

std::string InputFlags(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) out += (out.empty() ? "--input '" : " --input '") + v + "'";
  return out.empty() ? "--input" : out;
}

Status CheckInputsFitForward(const torch::jit::Module& module, const std::vector<InputSpec>& specs,
                             const std::string& flags) {
  auto misfit = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, flags + ": the model does not run on these inputs: " + why);
  };
  auto forward = module.find_method("forward");
  if (!forward) return misfit("it has no forward() method");
  const std::vector<c10::Argument>& all = forward->function().getSchema().arguments();
  // The module itself comes first, whatever forward names it (self, s, ...): its type is the module's class.
  const size_t first = !all.empty() && all[0].type()->cast<c10::ClassType>() ? 1 : 0;
  std::string signature;
  size_t required = 0;
  for (size_t i = first; i < all.size(); ++i) {
    signature += (signature.empty() ? "" : ", ") + all[i].name();
    if (!all[i].default_value()) required = i - first + 1;
  }
  const size_t total = all.size() - first;
  if (specs.size() < required || specs.size() > total) {
    const std::string takes = required == total ? std::to_string(total) : std::to_string(required) + " to " +
                                                                              std::to_string(total);
    return misfit("forward(" + signature + ") takes " + takes + " argument(s), " + std::to_string(specs.size()) +
                  " input spec(s) given");
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    const c10::Argument& arg = all[first + k];
    if (!c10::TensorType::get()->isSubtypeOf(*arg.type())) {
      return misfit("forward's argument '" + arg.name() + "' is " + arg.type()->annotation_str() +
                    ", not a Tensor (--input gives tensors only)");
    }
    if (auto tensor = arg.type()->cast<c10::TensorType>()) {
      if (auto rank = tensor->dim(); rank && *rank != specs[k].shape().size()) {
        return misfit("forward's argument '" + arg.name() + "' is a rank-" + std::to_string(*rank) +
                      " tensor, input " + std::to_string(k + 1) + " has rank " + std::to_string(specs[k].shape().size()));
      }
    }
  }
  return Status::Ok();
}

std::string TorchErrorCause(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const size_t nl = text.rfind('\n');
  std::string cause = nl == std::string::npos ? text : text.substr(nl + 1);
  // "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ...":
  // the source location and the failed condition say nothing to a user.
  if (cause.rfind("[enforce fail at ", 0) == 0) {
    const size_t bracket = cause.find("] ");
    const size_t sentence = bracket == std::string::npos ? std::string::npos : cause.find(". ", bracket + 2);
    if (sentence != std::string::npos) cause = cause.substr(sentence + 2);
  }
  return cause;
}

int RunAtTorchBoundary(const std::function<int()>& run) {
  torch_ext::EnsureRegistered();
  try {
    return run();
  } catch (const c10::Error& e) {
    return Fail(kExitFailure, std::string("PyTorch error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Fail(kExitFailure, e.what());
  }
}

}  // namespace dice::cli
