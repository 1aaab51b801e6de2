// cli/model_common.h (private to the CLI) — what `dice tune` (tune_command.cc)
// and `dice run` / `dice profile` (model_commands.cc) share: the model flags,
// loading a TorchScript model with random --input tensors, the CPU timing
// threads, timing a forward, the cache check and the fusion pass's base
// options. Defined in model_commands.cc; includes LibTorch.
#pragma once

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "dice/torch_ext/optimize.h"
#include "input_spec.h"

namespace dice::cli::model_cmd {

/// The flags of `tune`, `run` and `profile` about the model (AddModelArgs).
struct ModelArgs {
  std::string model_path;
  std::vector<std::string> input_specs;
  std::string cache_dir;
  int reps = 20;
  uint64_t seed = 0;
  std::string json_path;
  std::string report_path;  ///< tune only: --report FILE.html
  std::string save_path;    ///< tune only: --save FILE.pt (the captured model, for serving)
  std::string memory_format;  ///< tune only: --memory-format (empty: auto, i.e. DICE_MEMORY_FORMAT or measured)
};

/// A loaded TorchScript module and its random inputs (LoadModel).
struct LoadedModel {
  torch::jit::Module module;
  std::vector<c10::IValue> inputs;
  bool on_gpu = false;
};

/// "--input 'a' ...: the model does not run on these inputs: <PyTorch's
/// cause>" for an exception of a forward() on the user's inputs (a c10::Error,
/// or the TorchScript interpreter's own exception with its ~19-line
/// traceback: only the cause line is kept, TorchErrorCause), plus "(<hint>)"
/// naming the likely fix (RunFailureHint: a dtype no op takes, or integer
/// inputs drawn from the default range).
std::string ModelRunError(const ModelArgs& args, const std::exception& e);

/// The --input values as specs (their own syntax and sizes, ParseInputFlag;
/// no model needed); fills `error` and returns false on bad input.
bool ParseInputs(const ModelArgs& args, std::vector<InputSpec>* specs, std::string* error);

/// Loads the module and builds random inputs; fills `error` and returns false on bad input.
bool LoadModel(const ModelArgs& args, bool want_gpu, LoadedModel* out, std::string* error);

/// Waits for the GPU's work when `gpu` (torch::cuda::synchronize).
void Sync(bool gpu);

/// Intra-op threads of the timed CPU regions: $DICE_CPU_TIMING_THREADS, an
/// integer 1..256, default 1; any other value is the default after one
/// warning naming the variable (EnvInt, dice/core/env.h).
///
/// Why 1: ATen's intra-op pool (OpenMP) splits each op across its threads
/// and waits for the slowest. On a machine whose cores other processes use
/// too (this project's 2-core CPU machine), one of them is often
/// descheduled, and the op then waits for the scheduler to run it again:
/// CPU times came out as multiples of ~4 ms (the kernel's tick at 250 Hz)
/// and moved by 2x between runs (dice profile, 256x24576 gelu: 8.0 ms with
/// the default 2 threads, 4.2-4.6 ms with one). One thread measures each
/// op's own cost; both sides of every comparison (before/after, eager/
/// tuned) are timed with the same count, and the output says which. On an
/// idle machine more threads are faster (the same gelu: 1.7 ms with 2), so
/// DICE_CPU_TIMING_THREADS=2 is the choice there.
int CpuTimingThreads();

/// While alive on a CPU run, ATen runs `threads` intra-op threads
/// (at::set_num_threads); the previous count comes back on destruction.
/// Does nothing on a GPU run (GPU work is timed as it runs).
class CpuTimingScope {
 public:
  CpuTimingScope(bool gpu, int threads) {
    if (gpu || threads <= 0) return;
    previous_ = at::get_num_threads();
    if (previous_ != threads) at::set_num_threads(threads);
  }
  ~CpuTimingScope() {
    if (previous_ > 0 && previous_ != at::get_num_threads()) at::set_num_threads(previous_);
  }
  CpuTimingScope(const CpuTimingScope&) = delete;
  CpuTimingScope& operator=(const CpuTimingScope&) = delete;

 private:
  int previous_ = 0;
};

/// "GPU", or "CPU, N intra-op thread(s)" for the timing lines.
std::string TimedOn(bool gpu, int threads);

/// Median wall time of module.forward(inputs) in µs after 3 warm-up calls
/// (TorchScript's profiling runs among them); GPU work is synchronised.
/// `after_warmup` (may be empty) runs between the two, e.g. to reset the
/// group statistics so that they count the timed calls only.
double TimeForward(torch::jit::Module& module, const std::vector<c10::IValue>& inputs, bool gpu, int reps,
                   const std::function<void()>& after_warmup = nullptr);

/// Opens the cache once up front so a broken cache directory or file is a
/// clear bad-input error before any work (the file is never modified).
bool CheckCache(const std::string& cache_dir, std::string* error);

/// The fusion pass's options from the environment (Options::FromEnv), with the
/// --cache directory, --memory-format and the inputs as example inputs.
dice::torch_ext::Options BaseOptions(const ModelArgs& args, const std::vector<c10::IValue>& inputs);

/// Adds the flags `tune`, `run` and `profile` share (the model, --input, --cache,
/// --reps, --seed, --json) to `cmd`.
void AddModelArgs(CLI::App* cmd, ModelArgs* args);

}  // namespace dice::cli::model_cmd
