// dice/runtime/cuda_driver.h — the CUDA driver API, loaded with dlopen.
//
// Binaries never link libcuda at link time (DESIGN.md "Build and machines"):
// CudaDriver::Get() dlopens libcuda.so.1 once and resolves the entry points
// the runtime uses. On a machine without a driver or without a device it
// returns kNoDevice with a message saying which ("libcuda.so.1 not found",
// "cuInit failed: CUDA_ERROR_NO_DEVICE"), so every binary starts and says so.
// Thread-safe: Get() is initialised once; the function pointers are plain.
#pragma once

#include <cstddef>
#include <string>

#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice::runtime {

// Opaque driver handles (ABI-compatible with cuda.h's typedefs).
using CUresult_t = int;
using CUdevice_t = int;
using CUcontext_t = struct CUctx_st*;
using CUmodule_t = struct CUmod_st*;
using CUfunction_t = struct CUfunc_st*;
using CUstream_t = struct CUstream_st*;
using CUdeviceptr_t = unsigned long long;

/// Entry points resolved from libcuda.so.1 (the _v2 variants where they exist).
struct CudaDriver {
  CUresult_t (*cuInit)(unsigned int);
  CUresult_t (*cuDriverGetVersion)(int*);
  CUresult_t (*cuDeviceGetCount)(int*);
  CUresult_t (*cuDeviceGet)(CUdevice_t*, int);
  CUresult_t (*cuDeviceGetName)(char*, int, CUdevice_t);
  CUresult_t (*cuDeviceGetAttribute)(int*, int, CUdevice_t);
  CUresult_t (*cuDevicePrimaryCtxRetain)(CUcontext_t*, CUdevice_t);
  CUresult_t (*cuCtxGetCurrent)(CUcontext_t*);
  CUresult_t (*cuCtxSetCurrent)(CUcontext_t);
  CUresult_t (*cuCtxSynchronize)();
  CUresult_t (*cuModuleLoadData)(CUmodule_t*, const void*);
  CUresult_t (*cuModuleUnload)(CUmodule_t);
  CUresult_t (*cuModuleGetFunction)(CUfunction_t*, CUmodule_t, const char*);
  CUresult_t (*cuFuncSetAttribute)(CUfunction_t, int, int);
  CUresult_t (*cuLaunchKernel)(CUfunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, CUstream_t, void**, void**);
  CUresult_t (*cuGetErrorName)(CUresult_t, const char**);
  CUresult_t (*cuGetErrorString)(CUresult_t, const char**);
  /// cuDeviceGetUuid_v2 (else cuDeviceGetUuid): 16 bytes; null on a driver without either.
  CUresult_t (*cuDeviceGetUuid)(unsigned char*, CUdevice_t);

  /// The process-wide driver, loaded and cuInit'ed on first use.
  /// Errors: kNoDevice (no libcuda, cuInit failed, zero devices).
  static Expected<const CudaDriver*> Get();

  /// "cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access...)".
  std::string ErrorText(const char* call, CUresult_t rc) const;
};

/// Facts about device `ordinal`: the task-key ones (arch, name, driver) and
/// the ones templates size their schedules with (cuDeviceGetAttribute). The
/// worker's hello reply carries arch .. max_smem_per_block_optin only.
struct DeviceInfo {
  std::string arch;       ///< "sm_90"
  std::string name;       ///< "NVIDIA H200"
  int driver_major = 0;   ///< 13 for driver API 13.0
  int sm_count = 0;       ///< multiprocessors (132 on H100/H200 SXM, 114 on H100 PCIe)
  int max_smem_per_block_optin = 0;  ///< bytes
  int max_smem_per_sm = 0;           ///< bytes
  int l2_bytes = 0;                  ///< L2 cache, bytes
  int max_threads_per_sm = 0;        ///< resident threads per multiprocessor
  bool cluster_launch = false;       ///< thread-block cluster launch supported
  std::string uuid;                  ///< "GPU-8c6f3a9e-..." (device_binding.h FormatGpuUuid); "" without cuDeviceGetUuid
};
/// Errors: kNoDevice, kCudaError (naming the call or attribute that failed).
/// A driver without CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH reports no clusters.
Expected<DeviceInfo> QueryDevice(int ordinal);

/// The TargetInfo of CUDA device `ordinal`: arch, name and driver major
/// (task key) and SM count, L2 size, shared memory per SM and per block
/// (opt-in), threads per SM and cluster support (device facts, not in the
/// key) from the driver; the NVRTC version of this build. Without a GPU:
/// TargetInfo's defaults (sm_90, 132 SMs: the compile-only target) with the
/// NVRTC version filled in. Never fails; not cached (QueryDevice is cheap
/// after the first call).
TargetInfo TargetForDevice(int ordinal);

}  // namespace dice::runtime
