// kernel_launcher.cc — LoadedKernel: cubin -> module/functions once, then
// allocation-free launches (kernel_launcher.h).
#include "dice/runtime/kernel_launcher.h"

#include <string>

namespace dice::runtime {
namespace {

constexpr CUresult_t kCudaSuccess = 0;
constexpr CUresult_t kCudaErrorNotFound = 500;          // CUDA_ERROR_NOT_FOUND
constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kFuncAttrNonPortableClusterSizeAllowed = 14;  // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
constexpr uint32_t kDefaultSharedMemLimit = 48 * 1024;  // bytes usable without the opt-in
// Upper bound of kernel arguments (inputs + outputs + workspace): the
// argument array of Launch lives on the stack.
constexpr int kMaxKernelArgs = 128;

}  // namespace

Expected<std::unique_ptr<LoadedKernel>> LoadedKernel::Load(const std::string& cubin, const LaunchPlan& plan,
                                                           int num_inputs, int num_outputs) {
  if (num_inputs < 0 || num_outputs < 0) {
    return Status(StatusCode::kInvalidArgument, "LoadedKernel::Load: negative argument count");
  }
  int num_args = num_inputs + num_outputs + (plan.workspace_bytes > 0 ? 1 : 0);
  if (num_args > kMaxKernelArgs) {
    return Status(StatusCode::kInvalidArgument, "LoadedKernel::Load: " + std::to_string(num_args) +
                                                    " kernel arguments exceed the limit of " +
                                                    std::to_string(kMaxKernelArgs));
  }
  if (plan.launches.empty()) {
    return Status(StatusCode::kInvalidArgument, "LoadedKernel::Load: the launch plan has no kernels");
  }
  if (cubin.empty()) return Status(StatusCode::kInvalidArgument, "LoadedKernel::Load: empty cubin");

  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  const CudaDriver* d = *drv;

  CUcontext_t ctx = nullptr;
  CUresult_t rc = d->cuCtxGetCurrent(&ctx);
  if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d->ErrorText("cuCtxGetCurrent", rc));
  if (ctx == nullptr) {
    // No context current on this thread: use device 0's primary context, the
    // one the CUDA runtime (and so PyTorch) uses.
    CUdevice_t dev = 0;
    rc = d->cuDeviceGet(&dev, 0);
    if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d->ErrorText("cuDeviceGet", rc));
    rc = d->cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d->ErrorText("cuDevicePrimaryCtxRetain", rc));
    rc = d->cuCtxSetCurrent(ctx);
    if (rc != kCudaSuccess) return Status(StatusCode::kCudaError, d->ErrorText("cuCtxSetCurrent", rc));
  }

  std::unique_ptr<LoadedKernel> k(new LoadedKernel());
  k->driver_ = d;
  k->plan_ = plan;
  k->num_args_ = num_args;
  rc = d->cuModuleLoadData(&k->module_, cubin.data());
  if (rc != kCudaSuccess) {
    k->module_ = nullptr;
    return Status(StatusCode::kCudaError,
                  d->ErrorText("cuModuleLoadData", rc) + " (kernel '" + plan.launches[0].kernel +
                      "'; a cubin built for another arch?)");
  }
  k->functions_.reserve(plan.launches.size());
  for (const KernelLaunch& launch : plan.launches) {
    CUfunction_t fn = nullptr;
    rc = d->cuModuleGetFunction(&fn, k->module_, launch.kernel.c_str());
    if (rc == kCudaErrorNotFound) {
      return Status(StatusCode::kInvalidArgument, "kernel '" + launch.kernel + "' of the launch plan is not in the cubin");
    }
    if (rc != kCudaSuccess) {
      return Status(StatusCode::kCudaError, d->ErrorText("cuModuleGetFunction", rc) + " (kernel '" + launch.kernel + "')");
    }
    if (launch.shared_mem_bytes > kDefaultSharedMemLimit) {
      rc = d->cuFuncSetAttribute(fn, kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(launch.shared_mem_bytes));
      if (rc != kCudaSuccess) {
        return Status(StatusCode::kCudaError, d->ErrorText("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", rc) +
                                                  " (kernel '" + launch.kernel + "', " +
                                                  std::to_string(launch.shared_mem_bytes) + " bytes)");
      }
    }
    if (launch.cluster_ctas > 8) {
      // Clusters above 8 CTAs run only with the non-portable size allowed;
      // a device that refuses it refuses the kernel (the fallback runs).
      rc = d->cuFuncSetAttribute(fn, kFuncAttrNonPortableClusterSizeAllowed, 1);
      if (rc != kCudaSuccess) {
        return Status(StatusCode::kCudaError, d->ErrorText("cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", rc) +
                                                  " (kernel '" + launch.kernel + "', cluster of " +
                                                  std::to_string(launch.cluster_ctas) + " CTAs)");
      }
    }
    k->functions_.push_back(fn);
  }
  return k;
}

LoadedKernel::~LoadedKernel() {
  if (module_ != nullptr && driver_ != nullptr) driver_->cuModuleUnload(module_);
}

Status LoadedKernel::Launch(void* const* ptrs, void* workspace, void* stream) const {
  // Argument values and the pointers to them, on the stack (no allocation).
  void* values[kMaxKernelArgs];
  void* params[kMaxKernelArgs];
  const int num_ptrs = plan_.workspace_bytes > 0 ? num_args_ - 1 : num_args_;
  for (int i = 0; i < num_ptrs; ++i) {
    values[i] = ptrs[i];
    params[i] = &values[i];
  }
  if (plan_.workspace_bytes > 0) {
    values[num_ptrs] = workspace;
    params[num_ptrs] = &values[num_ptrs];
  }
  CUstream_t s = static_cast<CUstream_t>(stream);
  for (size_t i = 0; i < functions_.size(); ++i) {
    const KernelLaunch& l = plan_.launches[i];
    CUresult_t rc = driver_->cuLaunchKernel(functions_[i], l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                                            l.block[2], l.shared_mem_bytes, s, params, nullptr);
    if (rc != kCudaSuccess) {
      // Error path only: formatting is allowed here.
      return Status(StatusCode::kCudaError, driver_->ErrorText("cuLaunchKernel", rc) + " (kernel '" + l.kernel + "')");
    }
  }
  return Status::Ok();
}

}  // namespace dice::runtime
