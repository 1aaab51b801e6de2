// TargetForDevice: the task-key fields of a device, and the compile-only
// target on machines without one.
#include <gtest/gtest.h>

#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"

namespace dice::runtime {
namespace {

TEST(TargetTest, MatchesTheDeviceOrFallsBackToCompileOnlyTarget) {
  const TargetInfo t = TargetForDevice(0);
  EXPECT_EQ(t.nvrtc_version, NvrtcVersion());
  EXPECT_GT(t.nvrtc_version, 0);
  auto dev = QueryDevice(0);
  if (dev.ok()) {
    EXPECT_EQ(t.arch, dev->arch);
    EXPECT_EQ(t.gpu_name, dev->name);
    EXPECT_EQ(t.driver_major, dev->driver_major);
  } else {
    EXPECT_EQ(t.arch, "sm_90");
    EXPECT_EQ(t.driver_major, 0);
  }
  EXPECT_EQ(t.abi_version, kRuntimeAbiVersion);
}

}  // namespace
}  // namespace dice::runtime
