// dice/core/task.h — a tuning task and its cache key.
//
// Task = fusion-group IR + concrete input specs + the GPU it runs on. The task
// key (DESIGN.md "Task key") is the sha256 of: canonical IR, input and output
// specs (dtype, shape, strides, alignment), GPU arch (sm_XX) and name, CUDA
// driver major version, NVRTC version, compile flags, runtime ABI version.
// It does not include the generator (the cache keeps the best kernel from any
// source) nor TargetInfo's device facts (SM count, L2 and shared-memory
// sizes: the arch and GPU name already name them). Plain values;
// thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/ir.h"

namespace dice {
inline namespace core {

/// Bumped whenever the kernel calling convention or launch-plan format
/// changes, so stale cache entries stop matching.
inline constexpr int kRuntimeAbiVersion = 1;

/// The machine a task is tuned for. Two kinds of facts:
///  * the key fields (arch .. abi_version) enter Task::Key();
///  * the device facts (sm_count .. cluster_launch) size the generators'
///    schedules (grid caps, rows in flight per L2, shared-memory budgets). They
///    do NOT enter the key: arch and gpu_name already name the GPU model, and
///    keys must stay byte-identical across releases.
/// TargetForDevice (runtime/cuda_driver.h) reads both from a device; the
/// defaults are the compile-only target, an NVIDIA H100 SXM5 / H200 SXM
/// (sm_90, 132 SMs), so code that builds a TargetInfo by hand keeps working.
struct TargetInfo {
  std::string arch = "sm_90";          ///< compute capability, "sm_90"
  std::string gpu_name = "unknown";    ///< cuDeviceGetName, "NVIDIA H200"
  int driver_major = 0;                ///< cuDriverGetVersion / 1000 (0 without a driver)
  int nvrtc_version = 0;               ///< major*1000 + minor*10 (nvrtcVersion)
  std::string compile_flags = "-std=c++17 --use_fast_math=false";  ///< flags every candidate is built with
  int abi_version = kRuntimeAbiVersion;

  // Device facts (not in the task key). Sources of the defaults:
  //   [WP]  NVIDIA H100 Tensor Core GPU Architecture whitepaper: the H100 SXM5
  //         has 132 SMs and a 50 MB L2. The H200's driver reports 132 SMs and
  //         a 60 MiB L2 (62914560 B, read on the GPU machine 2026-12-01), so
  //         on it the templates get the larger L2 budget; the compile-only
  //         default stays the H100 SXM's, which today's template output is
  //         pinned to (templates_golden_test).
  //   [PG]  CUDA C++ Programming Guide, "Technical Specifications per Compute
  //         Capability", column 9.0.
  int sm_count = 132;                              ///< CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT [WP]
  int64_t l2_bytes = int64_t{50} << 20;            ///< CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, bytes [WP]
  int smem_per_sm_bytes = 228 << 10;               ///< ..._MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, bytes [PG]
  int smem_per_block_optin_bytes = 227 << 10;      ///< ..._MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, bytes [PG]
  int max_threads_per_sm = 2048;                   ///< ..._MAX_THREADS_PER_MULTIPROCESSOR [PG]
  bool cluster_launch = true;                      ///< ..._CLUSTER_LAUNCH: thread-block clusters (CC >= 9.0) [PG]
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

}  // namespace core
}  // namespace dice
