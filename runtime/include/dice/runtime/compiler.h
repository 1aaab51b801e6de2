// dice/runtime/compiler.h — NVRTC compilation of device-form candidates.
//
// Compiles CUDA C++ to a cubin for a named arch (sm_90 by default) with
// NVRTC; no GPU is needed. Thread-safe: NVRTC programs are per call, so
// several compiles may run in parallel (CompileAll uses a thread pool).
#pragma once

#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"

namespace dice::runtime {

struct CompileResult {
  std::string cubin;     ///< ELF bytes for the requested arch
  std::string log;       ///< NVRTC program log (warnings), may be empty
  double compile_ms = 0; ///< wall time of nvrtcCompileProgram, milliseconds
};

/// NVRTC version as major*1000 + minor*10 (13.0 -> 13000).
int NvrtcVersion();

/// Compiles `candidate.source` for `arch` ("sm_90") with the fixed flags
/// (-std=c++17, -arch=<arch>, include path of the CUDA toolkit's headers for
/// cuda_fp16.h / cuda_bf16.h) plus candidate.extra_flags, and checks every
/// kernel named in the launch plan exists in the cubin.
/// Errors: kCompileError with the NVRTC log; kInvalidArgument for a
/// non-device-form candidate or a malformed arch.
Expected<CompileResult> CompileCandidate(const Candidate& candidate, const std::string& arch);

/// Compiles many candidates on `threads` threads (0 = hardware concurrency);
/// result i belongs to candidates[i].
std::vector<Expected<CompileResult>> CompileAll(const std::vector<Candidate>& candidates,
                                                const std::string& arch, int threads = 0);

}  // namespace dice::runtime
