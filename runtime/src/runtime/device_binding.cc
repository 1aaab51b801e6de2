// Worker device binding (device_binding.h): the pure decisions over a
// DeviceTable and the driver query that fills a real one.
#include "dice/runtime/device_binding.h"

#include <cstdio>

#include "dice/runtime/cuda_driver.h"

namespace dice::runtime {
namespace {

std::string Describe(const DeviceEntry& e) {
  return std::to_string(e.index) + ": " + (e.uuid.empty() ? std::string("(no uuid)") : e.uuid) + " " + e.name + " " +
         e.arch;
}

std::string DescribeTable(const DeviceTable& table) {
  std::string out;
  for (const DeviceEntry& e : table) out += (out.empty() ? "" : ", ") + Describe(e);
  return out.empty() ? std::string("none") : out;
}

}  // namespace

std::string FormatGpuUuid(const unsigned char (&b)[16]) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

Expected<DeviceTable> QueryDeviceTable() {
  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  int count = 0;
  CUresult_t rc = (*drv)->cuDeviceGetCount(&count);
  if (rc != 0) return Status(StatusCode::kCudaError, (*drv)->ErrorText("cuDeviceGetCount", rc));
  DeviceTable table;
  for (int i = 0; i < count; ++i) {
    auto info = QueryDevice(i);
    if (!info.ok()) return info.status();
    table.push_back(DeviceEntry{i, info->uuid, info->name, info->arch});
  }
  return table;
}

Expected<WorkerDeviceBinding> BindWorkerToDevice(const DeviceTable& table, int ordinal) {
  const DeviceEntry* found = nullptr;
  for (const DeviceEntry& e : table) {
    if (e.index == ordinal) found = &e;
  }
  if (found == nullptr) {
    return Status(StatusCode::kNotFound, "CUDA device " + std::to_string(ordinal) + " is not one of this process's " +
                                             std::to_string(table.size()) + " devices (" + DescribeTable(table) + ")");
  }
  if (found->uuid.empty()) {
    return Status(StatusCode::kInvalidArgument, "CUDA device " + std::to_string(ordinal) +
                                                    " has no UUID (driver without cuDeviceGetUuid): the worker "
                                                    "cannot be bound to it by UUID");
  }
  WorkerDeviceBinding b;
  b.device = *found;
  b.worker_ordinal = 0;  // the worker sees this one device alone
  b.env = {"CUDA_VISIBLE_DEVICES=" + found->uuid, "DICE_DEVICE=0", std::string(kWorkerDeviceUuidEnv) + "=" + found->uuid};
  return b;
}

Expected<int> FindDeviceByUuid(const DeviceTable& table, const std::string& uuid, const std::string& visible_devices) {
  std::string seen;
  for (const DeviceEntry& e : table) {
    if (e.uuid == uuid) return e.index;
    seen += (seen.empty() ? "" : ", ") + (e.uuid.empty() ? std::string("(no uuid)") : e.uuid);
  }
  return Status(StatusCode::kNotFound,
                uuid + " is not visible to dice-worker (it sees " + (seen.empty() ? std::string("no device") : seen) +
                    "; CUDA_VISIBLE_DEVICES=" + (visible_devices.empty() ? std::string("(unset)") : visible_devices) +
                    ")");
}

}  // namespace dice::runtime
