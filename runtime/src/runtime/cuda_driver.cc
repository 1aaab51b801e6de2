// cuda_driver.cc — loads libcuda.so.1 with dlopen and resolves the driver API.
//
// cuda.h is deliberately not included: it #defines several entry points to
// versioned names (cuMemAlloc -> cuMemAlloc_v2, and under per-thread default
// stream cuLaunchKernel -> cuLaunchKernel_ptsz), which would rename the
// members of CudaDriver. Instead the exported symbol for each entry point is
// spelt out below, following cuda.h of CUDA 13: none of the entry points
// the runtime uses is redirected to a _v2 name there (cuDevicePrimaryCtxRelease
// and cuCtxCreate are, but they are not used), so the plain names are resolved.
// The few enum values needed are copied from cuda.h with their names.
#include "dice/runtime/cuda_driver.h"

#include "dice/runtime/device_binding.h"

#include "dice/runtime/compiler.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace dice::runtime {
namespace {

// From cuda.h (CUdevice_attribute / CUresult).
constexpr int kAttrMultiprocessorCount = 16;        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrL2CacheSize = 38;                // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
constexpr int kAttrMaxThreadsPerSm = 39;            // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
constexpr int kAttrComputeCapabilityMajor = 75;     // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrComputeCapabilityMinor = 76;     // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kAttrMaxSharedMemPerSm = 81;          // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
constexpr int kAttrMaxSharedMemPerBlockOptin = 97;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kAttrClusterLaunch = 120;             // CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH (CUDA 11.8+)
constexpr CUresult_t kCudaSuccess = 0;
constexpr CUresult_t kCudaErrorNoDevice = 100;       // CUDA_ERROR_NO_DEVICE

struct LoadState {
  CudaDriver driver{};
  Status status;  // Ok when driver is usable
};

template <typename Fn>
bool Resolve(void* lib, const char* symbol, Fn* out, std::string* missing) {
  void* p = dlsym(lib, symbol);
  if (p == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
    return false;
  }
  *out = reinterpret_cast<Fn>(p);
  return true;
}

LoadState* Load() {
  auto* state = new LoadState();  // process lifetime; never freed (driver stays loaded)
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    state->status = Status(StatusCode::kNoDevice,
                           std::string("libcuda.so.1 not found (no NVIDIA driver on this machine): ") +
                               (err ? err : "dlopen failed"));
    return state;
  }
  CudaDriver& d = state->driver;
  std::string missing;
  Resolve(lib, "cuInit", &d.cuInit, &missing);
  Resolve(lib, "cuDriverGetVersion", &d.cuDriverGetVersion, &missing);
  Resolve(lib, "cuDeviceGetCount", &d.cuDeviceGetCount, &missing);
  Resolve(lib, "cuDeviceGet", &d.cuDeviceGet, &missing);
  Resolve(lib, "cuDeviceGetName", &d.cuDeviceGetName, &missing);
  Resolve(lib, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute, &missing);
  Resolve(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, &missing);
  Resolve(lib, "cuCtxGetCurrent", &d.cuCtxGetCurrent, &missing);
  Resolve(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent, &missing);
  Resolve(lib, "cuCtxSynchronize", &d.cuCtxSynchronize, &missing);
  Resolve(lib, "cuModuleLoadData", &d.cuModuleLoadData, &missing);
  Resolve(lib, "cuModuleUnload", &d.cuModuleUnload, &missing);
  Resolve(lib, "cuModuleGetFunction", &d.cuModuleGetFunction, &missing);
  Resolve(lib, "cuFuncSetAttribute", &d.cuFuncSetAttribute, &missing);
  Resolve(lib, "cuLaunchKernel", &d.cuLaunchKernel, &missing);
  Resolve(lib, "cuGetErrorName", &d.cuGetErrorName, &missing);
  Resolve(lib, "cuGetErrorString", &d.cuGetErrorString, &missing);
  // Optional (worker binding by UUID, device_binding.h): _v2 since CUDA 11.4.
  std::string no_uuid;
  if (!Resolve(lib, "cuDeviceGetUuid_v2", &d.cuDeviceGetUuid, &no_uuid)) Resolve(lib, "cuDeviceGetUuid", &d.cuDeviceGetUuid, &no_uuid);
  if (!missing.empty()) {
    state->status = Status(StatusCode::kNoDevice,
                           "libcuda.so.1 is too old or not an NVIDIA driver: missing " + missing);
    return state;
  }
  CUresult_t rc = d.cuInit(0);
  if (rc != kCudaSuccess) {
    state->status = Status(StatusCode::kNoDevice, d.ErrorText("cuInit failed", rc));
    return state;
  }
  int count = 0;
  rc = d.cuDeviceGetCount(&count);
  if (rc != kCudaSuccess) {
    state->status = Status(StatusCode::kNoDevice, d.ErrorText("cuDeviceGetCount failed", rc));
    return state;
  }
  if (count <= 0) {
    state->status = Status(StatusCode::kNoDevice, d.ErrorText("no CUDA device visible", kCudaErrorNoDevice));
    return state;
  }
  return state;
}

}  // namespace

Expected<const CudaDriver*> CudaDriver::Get() {
  static LoadState* state = Load();  // C++11 magic static: initialised once, thread-safe
  if (!state->status.ok()) return state->status;
  return static_cast<const CudaDriver*>(&state->driver);
}

std::string CudaDriver::ErrorText(const char* call, CUresult_t rc) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(rc, &name) != kCudaSuccess) name = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(rc, &text) != kCudaSuccess) text = nullptr;
  std::string out = call;
  out += ": ";
  out += name ? name : ("CUresult " + std::to_string(rc));
  if (text) {
    out += " (";
    out += text;
    out += ")";
  }
  return out;
}

Expected<DeviceInfo> QueryDevice(int ordinal) {
  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  const CudaDriver& d = **drv;
  int count = 0;
  CUresult_t rc = d.cuDeviceGetCount(&count);
  if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d.ErrorText("cuDeviceGetCount", rc));
  if (ordinal < 0 || ordinal >= count) {
    return Status(StatusCode::kNoDevice, "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                             std::to_string(count) + " visible)");
  }
  CUdevice_t dev = 0;
  rc = d.cuDeviceGet(&dev, ordinal);
  if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d.ErrorText("cuDeviceGet", rc));

  DeviceInfo info;
  char name[256] = {0};
  rc = d.cuDeviceGetName(name, sizeof(name) - 1, dev);
  if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d.ErrorText("cuDeviceGetName", rc));
  info.name = name;

  auto attr = [&](int which, const char* what, int* out) -> Status {
    CUresult_t r = d.cuDeviceGetAttribute(out, which, dev);
    if (r != kCudaSuccess) return Status(StatusCode::kCudaError, d.ErrorText(what, r));
    return Status::Ok();
  };
  int major = 0, minor = 0;
  DICE_RETURN_IF_ERROR(attr(kAttrComputeCapabilityMajor, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", &major));
  DICE_RETURN_IF_ERROR(attr(kAttrComputeCapabilityMinor, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", &minor));
  DICE_RETURN_IF_ERROR(attr(kAttrMultiprocessorCount, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", &info.sm_count));
  DICE_RETURN_IF_ERROR(attr(kAttrMaxSharedMemPerBlockOptin,
                            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
                            &info.max_smem_per_block_optin));
  DICE_RETURN_IF_ERROR(attr(kAttrMaxSharedMemPerSm, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)",
                            &info.max_smem_per_sm));
  DICE_RETURN_IF_ERROR(attr(kAttrL2CacheSize, "cuDeviceGetAttribute(L2_CACHE_SIZE)", &info.l2_bytes));
  DICE_RETURN_IF_ERROR(attr(kAttrMaxThreadsPerSm, "cuDeviceGetAttribute(MAX_THREADS_PER_MULTIPROCESSOR)",
                            &info.max_threads_per_sm));
  // A driver older than the attribute (CUDA < 11.8) answers CUDA_ERROR_INVALID_VALUE: no clusters.
  int cluster = 0;
  info.cluster_launch = d.cuDeviceGetAttribute(&cluster, kAttrClusterLaunch, dev) == kCudaSuccess && cluster != 0;
  info.arch = "sm_" + std::to_string(major * 10 + minor);
  unsigned char uuid[16];
  if (d.cuDeviceGetUuid != nullptr && d.cuDeviceGetUuid(uuid, dev) == kCudaSuccess) info.uuid = FormatGpuUuid(uuid);

  int version = 0;
  rc = d.cuDriverGetVersion(&version);
  if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d.ErrorText("cuDriverGetVersion", rc));
  info.driver_major = version / 1000;
  return info;
}

TargetInfo TargetForDevice(int ordinal) {
  TargetInfo t;
  t.nvrtc_version = NvrtcVersion();
  auto dev = QueryDevice(ordinal);
  if (dev.ok()) {
    t.arch = dev->arch;
    t.gpu_name = dev->name;
    t.driver_major = dev->driver_major;
    // Device facts (not in the task key); a zero (unreported) keeps the default.
    if (dev->sm_count > 0) t.sm_count = dev->sm_count;
    if (dev->l2_bytes > 0) t.l2_bytes = dev->l2_bytes;
    if (dev->max_smem_per_sm > 0) t.smem_per_sm_bytes = dev->max_smem_per_sm;
    if (dev->max_smem_per_block_optin > 0) t.smem_per_block_optin_bytes = dev->max_smem_per_block_optin;
    if (dev->max_threads_per_sm > 0) t.max_threads_per_sm = dev->max_threads_per_sm;
    t.cluster_launch = dev->cluster_launch;
  }
  return t;
}

}  // namespace dice::runtime
