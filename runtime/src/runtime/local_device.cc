// local_device.h: the launcher's local rank -> this process's CUDA ordinal.
#include "dice/runtime/local_device.h"

#include <cstdlib>

namespace dice::runtime {

bool ParseLauncherInt(std::string_view text, int* out) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  *out = std::stoi(std::string(text));
  return true;
}

Expected<LocalDevice> LocalDeviceFromEnv(int device_count) {
  const std::pair<const char*, const char*> vars[] = {{"LOCAL_RANK", "torchrun"}, {"SLURM_LOCALID", "Slurm"}};
  for (const auto& [name, launcher] : vars) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string v = value;
    int rank = 0;
    if (!ParseLauncherInt(v, &rank)) {
      return Status(StatusCode::kInvalidArgument,
                    std::string(name) + "='" + v + "' is not a non-negative integer (the local rank, " + launcher + ")");
    }
    LocalDevice d;
    d.ordinal = device_count > 0 ? rank % device_count : 0;
    d.source = std::string(name) + "=" + v + " (" + launcher + ")";
    return d;
  }
  return LocalDevice{};
}

}  // namespace dice::runtime
