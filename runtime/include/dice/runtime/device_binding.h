// dice/runtime/device_binding.h — which GPU a dice-worker runs on.
//
// A tuning worker must measure on the GPU whose tensors are being tuned
// (torchrun: cuda:LOCAL_RANK), never on cuda:0 by default, and the binding
// must survive CUDA_VISIBLE_DEVICES remapping: a worker is a fresh process,
// and the ordinal N of the parent (fixed when the parent initialised CUDA)
// can name another GPU in a child whose environment says something else
// (a script that set CUDA_VISIBLE_DEVICES after `import torch`, another
// CUDA_DEVICE_ORDER). So the parent names the device by UUID: the worker is
// spawned with CUDA_VISIBLE_DEVICES=<that UUID> (it then sees that one GPU,
// as ordinal 0) and DICE_DEVICE_UUID=<UUID>, and checks at start-up that its
// ordinal 0 is that UUID.
//
// The decisions are pure functions of a DeviceTable, so they are tested
// with a fake table; QueryDeviceTable reads the real one from the CUDA
// driver. Torch-free; thread-safe (no state).
#pragma once

#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::runtime {

/// One CUDA device as the process that built the table numbers it.
struct DeviceEntry {
  int index = 0;     ///< CUDA ordinal in this process (after CUDA_VISIBLE_DEVICES)
  std::string uuid;  ///< "GPU-8c6f3a9e-...": cuDeviceGetUuid, as nvidia-smi -L and CUDA_VISIBLE_DEVICES spell it
  std::string name;  ///< "NVIDIA H200" (cuDeviceGetName)
  std::string arch;  ///< "sm_90"
};

/// The devices of one process, by ordinal (entry i has index i).
using DeviceTable = std::vector<DeviceEntry>;

/// The CUDA driver's table for this process: one entry per visible device.
/// Errors: kNoDevice (no driver, no device), kCudaError naming the call.
Expected<DeviceTable> QueryDeviceTable();

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase hex, 8-4-4-4-12)
/// of the 16 bytes cuDeviceGetUuid returns.
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

/// Environment variable the worker reads to check its device (set by
/// BindWorkerToDevice; empty or unset: no check).
inline constexpr const char* kWorkerDeviceUuidEnv = "DICE_DEVICE_UUID";

/// What a worker process must be given to run on one device.
struct WorkerDeviceBinding {
  DeviceEntry device;            ///< the device, as the parent numbers it
  /// "NAME=value" entries for the worker's environment, replacing the
  /// parent's: CUDA_VISIBLE_DEVICES=<uuid>, DICE_DEVICE=0, DICE_DEVICE_UUID=<uuid>.
  std::vector<std::string> env;
  int worker_ordinal = 0;        ///< the device's CUDA ordinal inside the worker (TuneRequest::device)
};

/// Binds a worker to the parent's device `ordinal` of `table` by its UUID.
/// Errors: kNotFound when `ordinal` is not in the table (the message lists
/// the table: "CUDA device 3 is not one of this process's 2 devices (0: GPU-..
/// NVIDIA H200 sm_90, 1: ...)"); kInvalidArgument when the entry has no UUID
/// (a driver without cuDeviceGetUuid: the binding could not be checked).
Expected<WorkerDeviceBinding> BindWorkerToDevice(const DeviceTable& table, int ordinal);

/// The worker's side: the ordinal of the device whose UUID is `uuid` in the
/// worker's own `table`. Errors: kNotFound naming the UUID, the UUIDs the
/// worker sees, and `visible_devices` (the worker's CUDA_VISIBLE_DEVICES,
/// "" = unset), e.g. "GPU-1234... is not visible to dice-worker (it sees
/// GPU-abcd...; CUDA_VISIBLE_DEVICES=GPU-abcd...)".
Expected<int> FindDeviceByUuid(const DeviceTable& table, const std::string& uuid,
                               const std::string& visible_devices);

}  // namespace dice::runtime
