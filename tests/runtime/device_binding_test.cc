// Tests for dice/runtime/device_binding.h: the tuning worker goes to the GPU
// of the tensors being tuned, named by UUID, against fake device tables.
#include "dice/runtime/device_binding.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dice/core/task.h"
#include "relu_graph.h"

namespace dice::runtime {
namespace {

const char* kUuid0 = "GPU-00000000-1111-2222-3333-444444444444";
const char* kUuid1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const char* kUuid2 = "GPU-12345678-9abc-def0-1234-56789abcdef0";
const char* kUuid3 = "GPU-fedcba98-7654-3210-fedc-ba9876543210";

// Two H200s, as a torchrun host shows them to every rank.
DeviceTable TwoH200() {
  return {{0, kUuid0, "NVIDIA H200", "sm_90"}, {1, kUuid1, "NVIDIA H200", "sm_90"}};
}

bool HasEnv(const WorkerDeviceBinding& b, const std::string& kv) {
  return std::find(b.env.begin(), b.env.end(), kv) != b.env.end();
}

TEST(DeviceBindingTest, WorkerOfDevice1IsGivenDevice1ByUuidNotDevice0) {
  auto b = BindWorkerToDevice(TwoH200(), 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->device.uuid, kUuid1);
  EXPECT_EQ(b->device.index, 1);
  EXPECT_EQ(b->worker_ordinal, 0);  // the worker sees that one GPU alone
  EXPECT_TRUE(HasEnv(*b, std::string("CUDA_VISIBLE_DEVICES=") + kUuid1));
  EXPECT_TRUE(HasEnv(*b, "DICE_DEVICE=0"));
  EXPECT_TRUE(HasEnv(*b, std::string("DICE_DEVICE_UUID=") + kUuid1));
}

TEST(DeviceBindingTest, TwoDevicesOfTheSameArchAndNameAreToldApartByUuid) {
  auto b0 = BindWorkerToDevice(TwoH200(), 0);
  auto b1 = BindWorkerToDevice(TwoH200(), 1);
  ASSERT_TRUE(b0.ok() && b1.ok());
  EXPECT_EQ(b0->device.arch, b1->device.arch);
  EXPECT_EQ(b0->device.name, b1->device.name);
  EXPECT_NE(b0->env, b1->env);
  EXPECT_TRUE(HasEnv(*b0, std::string("CUDA_VISIBLE_DEVICES=") + kUuid0));
}

// The parent started with CUDA_VISIBLE_DEVICES=3,1: its cuda:1 is physical
// GPU 1. A worker that inherited another numbering (the script changed
// CUDA_VISIBLE_DEVICES after torch initialised CUDA, so the child sees all
// four GPUs) would take "device 1" to be another GPU; by UUID it finds
// physical GPU 1 wherever its ordinal lands, and with the binding's own
// CUDA_VISIBLE_DEVICES it is ordinal 0.
TEST(DeviceBindingTest, RemappedVisibleDevicesStillReachTheParentsGpu) {
  DeviceTable parent = {{0, kUuid3, "NVIDIA H200", "sm_90"}, {1, kUuid1, "NVIDIA H200", "sm_90"}};
  auto b = BindWorkerToDevice(parent, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(HasEnv(*b, std::string("CUDA_VISIBLE_DEVICES=") + kUuid1));

  DeviceTable bound_child = {{0, kUuid1, "NVIDIA H200", "sm_90"}};
  auto in_bound = FindDeviceByUuid(bound_child, b->device.uuid, kUuid1);
  ASSERT_TRUE(in_bound.ok()) << in_bound.status().ToString();
  EXPECT_EQ(*in_bound, b->worker_ordinal);

  DeviceTable all_four = {{0, kUuid0, "NVIDIA H200", "sm_90"},
                          {1, kUuid2, "NVIDIA H200", "sm_90"},
                          {2, kUuid1, "NVIDIA H200", "sm_90"},
                          {3, kUuid3, "NVIDIA H200", "sm_90"}};
  auto in_all = FindDeviceByUuid(all_four, b->device.uuid, "");
  ASSERT_TRUE(in_all.ok());
  EXPECT_EQ(*in_all, 2);  // not ordinal 1, which is another GPU there
}

TEST(DeviceBindingTest, WorkerThatDoesNotSeeTheUuidSaysWhichItSees) {
  DeviceTable child = {{0, kUuid0, "NVIDIA H200", "sm_90"}};
  auto r = FindDeviceByUuid(child, kUuid1, kUuid0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(kUuid1), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(std::string("it sees ") + kUuid0), std::string::npos);
  EXPECT_NE(r.status().message().find(std::string("CUDA_VISIBLE_DEVICES=") + kUuid0), std::string::npos);
  auto none = FindDeviceByUuid({}, kUuid1, "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no device"), std::string::npos);
  EXPECT_NE(none.status().message().find("(unset)"), std::string::npos);
}

TEST(DeviceBindingTest, OrdinalOutsideTheTableIsAClearError) {
  auto b = BindWorkerToDevice(TwoH200(), 2);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_NE(b.status().message().find("CUDA device 2 is not one of this process's 2 devices"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find(kUuid1), std::string::npos);
  EXPECT_FALSE(BindWorkerToDevice({}, 0).ok());
}

TEST(DeviceBindingTest, DeviceWithoutUuidIsRefused) {
  DeviceTable t = {{0, "", "NVIDIA H200", "sm_90"}};
  auto b = BindWorkerToDevice(t, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("no UUID"), std::string::npos);
}

TEST(DeviceBindingTest, FormatsUuidBytesAsNvidiaSmiDoes) {
  const unsigned char bytes[16] = {0x8c, 0x6f, 0x3a, 0x9e, 0x01, 0x02, 0xab, 0xcd,
                                   0xef, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0xff};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-8c6f3a9e-0102-abcd-ef00-1020304050ff");
}

// Winners are keyed by GPU arch and name (task.h), never by device index:
// the targets of two ordinals of one GPU model give one key, so cuda:1
// serves what cuda:0 tuned; another arch gives another key.
TargetInfo TargetOf(const DeviceEntry& e) {
  TargetInfo t;
  t.arch = e.arch;
  t.gpu_name = e.name;
  t.driver_major = 13;
  t.nvrtc_version = 13000;
  return t;
}

TEST(DeviceBindingTest, TwoOrdinalsOfOneGpuModelShareTheTaskKeyAnotherArchDoesNot) {
  std::vector<ir::TensorSpec> in = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {1024})};
  DeviceTable t = TwoH200();
  t.push_back({2, kUuid2, "NVIDIA A100-SXM4-80GB", "sm_80"});
  t.push_back({3, kUuid3, "NVIDIA H100 80GB HBM3", "sm_90"});
  std::vector<std::string> keys;
  for (const DeviceEntry& e : t) {
    auto task = Task::Make(runtime_test::ReluGraph(), in, TargetOf(e));
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    keys.push_back(task->Key());
  }
  EXPECT_EQ(keys[0], keys[1]);  // cuda:0 and cuda:1, both H200
  EXPECT_NE(keys[0], keys[2]);  // another arch
  EXPECT_NE(keys[0], keys[3]);  // same arch, another GPU model
}

}  // namespace
}  // namespace dice::runtime
