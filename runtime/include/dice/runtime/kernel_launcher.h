// dice/runtime/kernel_launcher.h — loading a winner's cubin and launching it.
//
// The cache-hit path of the user's process: LoadedKernel::Load turns cubin
// bytes + a LaunchPlan into driver handles once (module load, function
// lookup, shared-memory opt-in); Launch then only fills the argument array
// and calls cuLaunchKernel for each kernel of the plan on the given stream.
// Launch allocates nothing and formats no strings on success (STYLE.md hot
// paths). Load must run with the target device's context current (the
// PyTorch primary context); a LoadedKernel belongs to that context.
// Thread-safety: Launch is safe from several threads (no mutable state).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/status.h"

namespace dice::runtime {

class LoadedKernel {
 public:
  /// Loads `cubin` into the current context (retaining the device's primary
  /// context when none is current). `num_inputs`/`num_outputs` fix the
  /// argument count. Errors: kNoDevice, kCudaError naming the call and the
  /// kernel (e.g. a cubin for another arch), kInvalidArgument when a kernel
  /// of the plan is missing from the cubin.
  static Expected<std::unique_ptr<LoadedKernel>> Load(const std::string& cubin, const LaunchPlan& plan,
                                                      int num_inputs, int num_outputs);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  /// Launches every kernel of the plan on `stream` (a cudaStream_t / CUstream).
  /// `ptrs` holds num_inputs input device pointers then num_outputs output
  /// pointers; `workspace` must be a device buffer of plan.workspace_bytes
  /// (zeroed by the caller) or null when the plan needs none.
  /// Errors: kCudaError naming cuLaunchKernel and the kernel.
  Status Launch(void* const* ptrs, void* workspace, void* stream) const;

  const LaunchPlan& plan() const { return plan_; }

 private:
  LoadedKernel() = default;
  const CudaDriver* driver_ = nullptr;
  CUmodule_t module_ = nullptr;
  std::vector<CUfunction_t> functions_;
  LaunchPlan plan_;
  int num_args_ = 0;
};

}  // namespace dice::runtime
