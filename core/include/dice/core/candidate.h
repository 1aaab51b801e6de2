// dice/core/candidate.h — a candidate kernel and how to launch it.
//
// Device form (DESIGN.md "Candidate"): CUDA C++ source with one or more
// `extern "C" __global__` kernels plus a launch plan. The calling convention
// is fixed by the task: every kernel takes, in this order,
//   (const T_in0* in0, ..., const T_inN* inN, T_out0* out0, ..., T_outM* outM
//    [, void* workspace])
// where T is float / __half / __nv_bfloat16 for f32 / f16 / bf16 and the
// workspace pointer is passed only when workspace_bytes > 0. Inputs are
// contiguous unless the source says otherwise via the task's strides baked
// in at generation time. Launch configs are concrete (grid, block, dynamic
// shared memory in bytes) because a task key fixes every shape.
// Kernels of a plan run in order on one stream.
//
// Extension form (nvcc + LibTorch headers) is declared here for the cache's
// sake; its loader belongs to the DICE generator issue.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice {
inline namespace core {

/// One kernel launch of a plan.
struct KernelLaunch {
  std::string kernel;                      ///< extern "C" name in the source
  std::array<uint32_t, 3> grid{1, 1, 1};   ///< blocks
  std::array<uint32_t, 3> block{1, 1, 1};  ///< threads per block
  uint32_t shared_mem_bytes = 0;           ///< dynamic shared memory, bytes
  /// CTAs per thread-block cluster when the kernel's `__cluster_dims__` is
  /// above the portable 8 (CUDA programming guide, "Thread Block Clusters":
  /// sm_90 allows 16 with the non-portable attribute, which the launcher
  /// sets); 0 for a portable size or no cluster. JSON "cluster", written
  /// only when nonzero (plans without it keep their hashes).
  uint32_t cluster_ctas = 0;
};

/// The ordered launches of a candidate and its scratch memory.
struct LaunchPlan {
  std::vector<KernelLaunch> launches;
  uint64_t workspace_bytes = 0;  ///< zero-initialised before the first launch, bytes

  /// {"launches":[{"kernel":..,"grid":[..],"block":[..],"smem":..}],"workspace":..}
  std::string ToJson() const;
  /// Errors: kCorrupt naming the missing/invalid field.
  static Expected<LaunchPlan> FromJson(const std::string& json);
  bool operator==(const LaunchPlan& o) const;
};

/// How a candidate is built and run (DESIGN.md "Candidate"). The values are
/// stable (the worker protocol sends them as integers).
enum class CandidateForm : uint8_t {
  kDevice = 0,     ///< `extern "C" __global__` kernels + a launch plan, compiled with NVRTC
  kExtension = 1,  ///< host functions on torch::Tensor, built with nvcc into a shared object
  kLibrary = 2,    ///< a configuration of a vendor library (CUTLASS, cuBLASLt, cuDNN); no generator emits it yet
};

/// The stable name of a form: "device", "extension", "library" — the
/// `form` field of a cache winner's versions JSON and the first line of
/// Candidate::Hash's input. Never changes (cached hashes depend on it).
const char* CandidateFormName(CandidateForm form);

/// The form named `name` (as CandidateFormName writes it). Errors:
/// kCorrupt naming the unknown name.
Expected<CandidateForm> ParseCandidateForm(const std::string& name);

/// A candidate kernel for one task.
struct Candidate {
  std::string origin;            ///< "template:elementwise/b256/v4", "dice:sample3"
  CandidateForm form = CandidateForm::kDevice;
  std::string source;            ///< CUDA C++ source
  LaunchPlan plan;
  std::vector<std::string> extra_flags;  ///< extra NVRTC options (e.g. "-DVEC=4")
  bool reduced_precision = false;        ///< uses TF32/lower precision internally (precision policy)

  /// Hex sha256 over form, source, plan and flags (not origin): the identity
  /// used to skip candidates already attempted.
  std::string Hash() const;
};

}  // namespace core
}  // namespace dice
