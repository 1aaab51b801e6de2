// The SDAR decoder's kernel-module loader: see dice/generator/sdar_cuda_module.h.
#include "dice/generator/sdar_cuda_module.h"

#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"

namespace dice::generator {

using runtime::CudaDriver;

Expected<std::unique_ptr<SdarCudaModule>> SdarCudaModule::Build(const Candidate& candidate, const std::string& arch,
                                                                int ordinal, const std::string& who) {
  std::unique_ptr<SdarCudaModule> m(new SdarCudaModule());
  m->who_ = who;
  std::string target = arch;
  if (target.empty()) {
    auto info = runtime::QueryDevice(ordinal);
    if (!info.ok()) return info.status();
    target = info->arch;
    m->sm_count_ = info->sm_count;
  }
  auto compiled = runtime::CompileCandidate(candidate, target);
  if (!compiled.ok()) return compiled.status();
  m->compile_ms_ = compiled->compile_ms;
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  const CudaDriver* d = *driver;
  auto fail = [&](const std::string& call, int rc) {
    return Status(StatusCode::kCudaError, who + ": " + d->ErrorText(call.c_str(), rc));
  };
  runtime::CUcontext_t ctx = nullptr;
  if (int rc = d->cuCtxGetCurrent(&ctx); rc != 0) return fail("cuCtxGetCurrent", rc);
  if (ctx == nullptr) {  // the device's primary context: LibTorch's
    runtime::CUdevice_t dev = 0;
    if (int rc = d->cuDeviceGet(&dev, ordinal); rc != 0) return fail("cuDeviceGet", rc);
    if (int rc = d->cuDevicePrimaryCtxRetain(&ctx, dev); rc != 0) return fail("cuDevicePrimaryCtxRetain", rc);
    if (int rc = d->cuCtxSetCurrent(ctx); rc != 0) return fail("cuCtxSetCurrent", rc);
  }
  m->driver_ = d;
  runtime::CUmodule_t module = nullptr;
  if (int rc = d->cuModuleLoadData(&module, compiled->cubin.data()); rc != 0) return fail("cuModuleLoadData", rc);
  m->module_ = module;
  for (const KernelLaunch& launch : candidate.plan.launches) {
    runtime::CUfunction_t f = nullptr;
    if (int rc = d->cuModuleGetFunction(&f, module, launch.kernel.c_str()); rc != 0) {
      return fail("cuModuleGetFunction " + launch.kernel, rc);
    }
    m->functions_.push_back(f);
  }
  if (m->sm_count_ == 0) {
    auto info = runtime::QueryDevice(ordinal);
    if (info.ok()) m->sm_count_ = info->sm_count;
  }
  return m;
}

SdarCudaModule::~SdarCudaModule() {
  if (module_ != nullptr) static_cast<const CudaDriver*>(driver_)->cuModuleUnload(static_cast<runtime::CUmodule_t>(module_));
}

Status SdarCudaModule::Launch(size_t index, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                              void** args, void* stream) const {
  const auto* d = static_cast<const CudaDriver*>(driver_);
  const int rc = d->cuLaunchKernel(static_cast<runtime::CUfunction_t>(functions_[index]), gx, gy, gz, block, 1, 1,
                                   smem, static_cast<runtime::CUstream_t>(stream), args, nullptr);
  if (rc != 0) return Status(StatusCode::kCudaError, who_ + ": " + d->ErrorText("cuLaunchKernel", rc));
  return Status::Ok();
}

}  // namespace dice::generator
