// Tests for dice/runtime/local_device.h: a launcher's local rank picks the GPU.
#include "dice/runtime/local_device.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace dice::runtime {
namespace {

// Sets the launcher variables for one test and restores "unset" after.
class LocalRankEnv {
 public:
  LocalRankEnv(const char* local_rank, const char* slurm_localid) {
    Set("LOCAL_RANK", local_rank);
    Set("SLURM_LOCALID", slurm_localid);
  }
  ~LocalRankEnv() {
    ::unsetenv("LOCAL_RANK");
    ::unsetenv("SLURM_LOCALID");
  }

 private:
  static void Set(const char* name, const char* value) {
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
};

TEST(LocalDeviceTest, WithoutALauncherTheDeviceIsZero) {
  LocalRankEnv env(nullptr, nullptr);
  auto d = LocalDeviceFromEnv(8);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ordinal, 0);
  EXPECT_EQ(d->source, "");
}

TEST(LocalDeviceTest, TorchrunsLocalRankPicksItsGpuAndWinsOverSlurm) {
  LocalRankEnv env("1", "0");
  auto d = LocalDeviceFromEnv(2);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ordinal, 1);
  EXPECT_EQ(d->source, "LOCAL_RANK=1 (torchrun)");
}

TEST(LocalDeviceTest, SlurmsLocalIdIsUsedWithoutTorchrun) {
  LocalRankEnv env(nullptr, "3");
  auto d = LocalDeviceFromEnv(4);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ordinal, 3);
  EXPECT_EQ(d->source, "SLURM_LOCALID=3 (Slurm)");
}

TEST(LocalDeviceTest, MoreLocalRanksThanGpusShareThemAndNoGpuGivesZero) {
  LocalRankEnv env("5", nullptr);
  EXPECT_EQ(LocalDeviceFromEnv(2)->ordinal, 1);
  EXPECT_EQ(LocalDeviceFromEnv(0)->ordinal, 0);
}

TEST(LocalDeviceTest, AMalformedLocalRankIsRefusedNamingTheVariable) {
  LocalRankEnv env("one", nullptr);
  auto d = LocalDeviceFromEnv(2);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("LOCAL_RANK='one'"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace dice::runtime
