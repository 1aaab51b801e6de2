// Tests for the worker side of device binding (device_binding.h,
// worker_pool.h WorkerPoolOptions::env): the spawned worker gets the
// binding's environment, replacing the parent's variables of the same name,
// and the real dice-worker refuses a device UUID it cannot see.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/device_binding.h"
#include "dice/runtime/worker_pool.h"

namespace dice::runtime {
namespace {

// The child exits 7 when its environment is as expected, 1 otherwise; the
// pool reports the exit as kCrashed "exited with status N".
std::string ExitOf(const std::string& script, const std::vector<std::string>& env) {
  auto w = WorkerProcess::Spawn("/bin/sh", {"-c", script}, env);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return "";
  auto r = (*w)->Receive(10);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(WorkerBindingTest, SpawnedWorkerGetsTheBindingsEnvironmentInsteadOfTheParents) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "3,1", 1);  // the parent's own remapping
  ::setenv("DICE_BINDING_TEST_KEEP", "kept", 1);
  DeviceTable parent = {{0, "GPU-33333333-3333-3333-3333-333333333333", "NVIDIA H200", "sm_90"},
                        {1, "GPU-11111111-1111-1111-1111-111111111111", "NVIDIA H200", "sm_90"}};
  auto b = BindWorkerToDevice(parent, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::string script =
      "[ \"$CUDA_VISIBLE_DEVICES\" = GPU-11111111-1111-1111-1111-111111111111 ] && [ \"$DICE_DEVICE\" = 0 ] && "
      "[ \"$DICE_DEVICE_UUID\" = GPU-11111111-1111-1111-1111-111111111111 ] && "
      "[ \"$(env | grep -c '^CUDA_VISIBLE_DEVICES=')\" = 1 ] && [ \"$DICE_BINDING_TEST_KEEP\" = kept ] && exit 7; exit 1";
  EXPECT_NE(ExitOf(script, b->env).find("exited with status 7"), std::string::npos);
  // Without a binding the parent's environment is inherited unchanged.
  EXPECT_NE(ExitOf("[ \"$CUDA_VISIBLE_DEVICES\" = 3,1 ] && exit 7; exit 1", {}).find("exited with status 7"),
            std::string::npos);
  ::unsetenv("DICE_BINDING_TEST_KEEP");
  if (old) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1); else ::unsetenv("CUDA_VISIBLE_DEVICES");
}

// A worker bound to a UUID it does not see says so in its hello (no GPU
// here: it says there is no driver or device instead), and never falls back
// to another GPU.
TEST(WorkerBindingTest, RealWorkerBoundToAnUnknownUuidReportsNoDeviceNamingIt) {
  const std::string uuid = "GPU-deadbeef-0000-0000-0000-000000000000";
  WorkerPoolOptions o;
  o.env = {std::string(kWorkerDeviceUuidEnv) + "=" + uuid, "DICE_DEVICE=0"};
  WorkerPool pool(o);
  auto h = pool.Hello();
  ASSERT_TRUE(h.ok()) << h.status().ToString() << " (worker path " << ResolveWorkerPath("") << ")";
  EXPECT_FALSE(h->has_device);
  if (CudaDriver::Get().ok()) {
    EXPECT_NE(h->no_device_reason.find(uuid + " is not visible to dice-worker"), std::string::npos)
        << h->no_device_reason;
  } else {
    EXPECT_NE(h->no_device_reason.find("NoDevice"), std::string::npos) << h->no_device_reason;
  }
}

}  // namespace
}  // namespace dice::runtime
