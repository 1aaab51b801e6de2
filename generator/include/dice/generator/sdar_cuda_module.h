// dice/generator/sdar_cuda_module.h — one NVRTC-compiled CUDA module of the
// SDAR decoder's hand-written kernels, loaded in the model's context, with
// launches by kernel index. Torch-free: the runtime's public compiler and
// driver headers only (dice/runtime/compiler.h, dice/runtime/cuda_driver.h).
//
// The one loader of the decoder's kernel families (SdarAttention today;
// SdarFusedKernels' Build and BuildGemv do the same steps and can call it):
// compile the candidate for an arch (or the device's), make the current
// context or the device's primary one current (the one LibTorch uses), load
// the cubin, look every kernel up. Thread-safety: Launch is const and
// stateless; Load must run on the thread that will launch or with the
// model's device current.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"

namespace dice::generator {

/// A loaded CUDA module and its kernels, in candidate.plan.launches order.
/// Unloaded on destruction. Not copyable.
class SdarCudaModule {
 public:
  /// Compiles `candidate` (device form; its plan names the kernels) for
  /// `arch` ("sm_90"; "" = device `ordinal`'s, runtime::QueryDevice) and
  /// loads it on device `ordinal`. `who` prefixes driver errors ("SDAR
  /// split-KV attention"). Errors: kCompileError with the NVRTC log;
  /// kNoDevice; kCudaError naming the driver call (and the kernel).
  static Expected<std::unique_ptr<SdarCudaModule>> Build(const Candidate& candidate, const std::string& arch,
                                                         int ordinal, const std::string& who);
  ~SdarCudaModule();
  SdarCudaModule(const SdarCudaModule&) = delete;
  SdarCudaModule& operator=(const SdarCudaModule&) = delete;

  /// Wall time of the NVRTC compile, milliseconds.
  double compile_ms() const { return compile_ms_; }
  /// Multiprocessors of device `ordinal` (0 when Build was given an arch
  /// and did not query the device).
  int sm_count() const { return sm_count_; }

  /// Launches kernel `index` (plan order) with grid (gx, gy, gz), `block`
  /// threads and `smem` bytes of dynamic shared memory on `stream` (a
  /// CUstream / cudaStream_t; capturable). `args`: pointers to the
  /// arguments, as cuLaunchKernel takes them. No allocation on success.
  /// Errors: kCudaError naming cuLaunchKernel (prefixed by `who`).
  Status Launch(size_t index, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem, void** args,
                void* stream) const;

 private:
  SdarCudaModule() = default;
  const void* driver_ = nullptr;  // const runtime::CudaDriver*
  void* module_ = nullptr;        // CUmodule
  std::vector<void*> functions_;  // CUfunction, plan order
  std::string who_;
  double compile_ms_ = 0;
  int sm_count_ = 0;
};

}  // namespace dice::generator
