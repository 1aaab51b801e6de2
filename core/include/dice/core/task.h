// dice/core/task.h — a tuning task and its cache key.
//
// Task = fusion-group IR + concrete input specs + the GPU it runs on. The task
// key (DESIGN.md "Task key") is the sha256 of: canonical IR, input and output
// specs (dtype, shape, strides, alignment), GPU arch (sm_XX) and name, CUDA
// driver major version, NVRTC version, compile flags, runtime ABI version.
// It does not include the generator: the cache keeps the best kernel from any
// source. Plain values; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "dice/core/ir.h"

namespace dice {

/// Bumped whenever the kernel calling convention or launch-plan format
/// changes, so stale cache entries stop matching.
inline constexpr int kRuntimeAbiVersion = 1;

/// The machine facts that enter the task key.
struct TargetInfo {
  std::string arch = "sm_90";          ///< compute capability, "sm_90"
  std::string gpu_name = "unknown";    ///< cuDeviceGetName, "NVIDIA H200"
  int driver_major = 0;                ///< cuDriverGetVersion / 1000 (0 without a driver)
  int nvrtc_version = 0;               ///< major*1000 + minor*10 (nvrtcVersion)
  std::string compile_flags = "-std=c++17 --use_fast_math=false";  ///< flags every candidate is built with
  int abi_version = kRuntimeAbiVersion;
};

/// A fusion group at concrete shapes on a concrete target.
struct Task {
  ir::Graph graph;
  std::vector<ir::TensorSpec> inputs;   ///< one per graph input, in order
  std::vector<ir::TensorSpec> outputs;  ///< contiguous, one per graph output
  TargetInfo target;

  /// Builds a task, inferring output specs. Errors: kInvalidArgument when the
  /// specs do not match the graph (count, rank, dtype, broadcasting).
  static Expected<Task> Make(ir::Graph graph, std::vector<ir::TensorSpec> inputs, TargetInfo target);

  /// 64 hex chars; see the header comment for what enters it.
  std::string Key() const;

  /// "add+gelu f32[1024,8192],f32[8192]" for tables and logs.
  std::string Describe() const;
};

}  // namespace dice
