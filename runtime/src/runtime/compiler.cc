// compiler.cc — NVRTC compilation of device-form candidates (compiler.h).
//
// Each CompileCandidate call owns its nvrtcProgram, so calls are independent
// and CompileAll runs them on a small std::thread pool. The cubin is produced
// directly (--gpu-architecture=sm_XX, nvrtcGetCUBIN); no GPU is involved.
#include "dice/runtime/compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

namespace dice::runtime {
namespace {

#ifndef DICE_CUDA_INCLUDE_DIR
#define DICE_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

// DICE_CUDA_INCLUDE_DIR comes from CMake's CUDAToolkit_INCLUDE_DIRS, which may
// be a ';'-separated list; the first entry holds cuda_fp16.h / cuda_bf16.h.
std::string CudaIncludeDir() {
  std::string dirs = DICE_CUDA_INCLUDE_DIR;
  auto semi = dirs.find(';');
  return semi == std::string::npos ? dirs : dirs.substr(0, semi);
}

bool IsValidArch(const std::string& arch) {
  if (arch.size() <= 3 || arch.compare(0, 3, "sm_") != 0) return false;
  // Digits, optionally followed by one 'a'/'f' feature suffix (sm_90a).
  size_t i = 3;
  while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
  if (i == 3) return false;
  if (i == arch.size()) return true;
  return i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f');
}

// True when `name` is a symbol in the cubin. extern "C" kernels keep their
// plain names, which appear NUL-terminated in the ELF string table (.strtab);
// a byte search for "\0name\0" finds them without parsing the ELF headers.
bool CubinHasSymbol(const std::string& cubin, const std::string& name) {
  std::string needle;
  needle.reserve(name.size() + 2);
  needle.push_back('\0');
  needle += name;
  needle.push_back('\0');
  return std::string_view(cubin).find(needle) != std::string_view::npos;
}

Status NvrtcError(const char* call, nvrtcResult rc) {
  return Status(StatusCode::kCompileError, std::string(call) + " failed: " + nvrtcGetErrorString(rc));
}

}  // namespace

int NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

Expected<CompileResult> CompileCandidate(const Candidate& candidate, const std::string& arch) {
  if (candidate.form != CandidateForm::kDevice) {
    return Status(StatusCode::kInvalidArgument,
                  "CompileCandidate: only device-form candidates compile with NVRTC (origin '" +
                      candidate.origin + "')");
  }
  if (!IsValidArch(arch)) {
    return Status(StatusCode::kInvalidArgument, "CompileCandidate: malformed arch '" + arch + "' (want sm_<digits>)");
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&prog, candidate.source.c_str(), "dice_candidate.cu", 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) return NvrtcError("nvrtcCreateProgram", rc);
  struct ProgramGuard {
    nvrtcProgram* p;
    ~ProgramGuard() { nvrtcDestroyProgram(p); }
  } guard{&prog};

  std::vector<std::string> options = {"-std=c++17", "--gpu-architecture=" + arch, "-I" + CudaIncludeDir(),
                                      "-default-device"};
  for (const auto& f : candidate.extra_flags) options.push_back(f);
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const auto& o : options) argv.push_back(o.c_str());

  auto t0 = std::chrono::steady_clock::now();
  nvrtcResult compile_rc = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  auto t1 = std::chrono::steady_clock::now();

  CompileResult result;
  result.compile_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    result.log.resize(log_size);
    if (nvrtcGetProgramLog(prog, result.log.data()) != NVRTC_SUCCESS) result.log.clear();
    while (!result.log.empty() && result.log.back() == '\0') result.log.pop_back();
  }
  if (compile_rc != NVRTC_SUCCESS) {
    return Status(StatusCode::kCompileError, std::string("nvrtcCompileProgram (") + candidate.origin +
                                                 ", " + arch + "): " + nvrtcGetErrorString(compile_rc) +
                                                 "\n" + result.log);
  }
  size_t cubin_size = 0;
  rc = nvrtcGetCUBINSize(prog, &cubin_size);
  if (rc != NVRTC_SUCCESS) return NvrtcError("nvrtcGetCUBINSize", rc);
  if (cubin_size == 0) {
    return Status(StatusCode::kCompileError, "NVRTC produced no cubin for " + arch + " (virtual arch?)");
  }
  result.cubin.resize(cubin_size);
  rc = nvrtcGetCUBIN(prog, result.cubin.data());
  if (rc != NVRTC_SUCCESS) return NvrtcError("nvrtcGetCUBIN", rc);

  for (const auto& launch : candidate.plan.launches) {
    if (!CubinHasSymbol(result.cubin, launch.kernel)) {
      return Status(StatusCode::kCompileError, "kernel '" + launch.kernel +
                                                   "' of the launch plan is not in the cubin (is it extern \"C\" "
                                                   "__global__?)");
    }
  }
  return result;
}

std::vector<Expected<CompileResult>> CompileAll(const std::vector<Candidate>& candidates, const std::string& arch,
                                                int threads) {
  std::vector<Expected<CompileResult>> results(
      candidates.size(), Expected<CompileResult>(Status(StatusCode::kInternal, "not compiled")));
  if (candidates.empty()) return results;
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n = std::min<int>(n, static_cast<int>(candidates.size()));
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t i = next.fetch_add(1); i < candidates.size(); i = next.fetch_add(1)) {
      results[i] = CompileCandidate(candidates[i], arch);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace dice::runtime
