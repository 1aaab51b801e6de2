// local_device.h: the launcher's local rank -> this process's CUDA ordinal.
#include "dice/runtime/local_device.h"

#include <cstdlib>

namespace dice::runtime {

Expected<LocalDevice> LocalDeviceFromEnv(int device_count) {
  const std::pair<const char*, const char*> vars[] = {{"LOCAL_RANK", "torchrun"}, {"SLURM_LOCALID", "Slurm"}};
  for (const auto& [name, launcher] : vars) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string v = value;
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    std::string(name) + "='" + v + "' is not a non-negative integer (the local rank, " + launcher + ")");
    }
    const int rank = std::stoi(v);
    LocalDevice d;
    d.ordinal = device_count > 0 ? rank % device_count : 0;
    d.source = std::string(name) + "=" + v + " (" + launcher + ")";
    return d;
  }
  return LocalDevice{};
}

}  // namespace dice::runtime
