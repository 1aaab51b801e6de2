// dice/runtime/local_device.h — which GPU a process started by a launcher
// (torchrun, Slurm) works on when it is not told: its local rank's.
//
// torchrun starts one process per GPU and sets LOCAL_RANK (0..n-1 on each
// node); Slurm sets SLURM_LOCALID. A process that creates its own tensors
// (`dice warmup`) must put rank r's work on cuda:r, not every rank on cuda:0.
// Torch-free; reads the environment only.
#pragma once

#include <string>
#include <string_view>

#include "dice/core/status.h"

namespace dice::runtime {

/// The local device of this process and where it came from.
struct LocalDevice {
  int ordinal = 0;     ///< CUDA ordinal in this process
  std::string source;  ///< "LOCAL_RANK=1 (torchrun)", "SLURM_LOCALID=0 (Slurm)" or "" (default 0)
};

/// Reads a launcher variable's value (a rank, a count): a non-negative
/// decimal of 1 to 9 digits. Returns false, leaving `out` alone, otherwise.
bool ParseLauncherInt(std::string_view text, int* out);

/// LOCAL_RANK (torchrun) if set, else SLURM_LOCALID (Slurm), else 0; taken
/// modulo `device_count` when there are more local ranks than devices (the
/// ranks then share GPUs, as the launcher arranged). `device_count` <= 0
/// (no GPU) gives ordinal 0.
/// Errors: kInvalidArgument naming the variable when its value is not a
/// non-negative integer of at most 9 digits.
Expected<LocalDevice> LocalDeviceFromEnv(int device_count);

}  // namespace dice::runtime
