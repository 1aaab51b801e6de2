// Tests of the process-wide runtime options (optimize.h SetRuntimeOptions /
// GetRuntimeOptions / Options::FromEnv), which the torch-free process state
// (torch_ext/src/runtime_state.h) keeps as RuntimeSettings: every field but
// the example inputs survives the round trip, the environment is read
// with the same rules as before the split, and the tune options in use
// carry PyTorch's TF32 switches as they are at the call.
#include "dice/torch_ext/optimize.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>

#include "../../torch_ext/src/runtime_state.h"

namespace dice::torch_ext {
namespace {

TEST(RuntimeOptionsTest, EveryFieldButTheExampleInputsSurvivesTheRoundTrip) {
  const Options before = GetRuntimeOptions();
  Options o;
  o.mode = Mode::kTuneSync;
  o.cache_dir = "/tmp/dice-runtime-options-test";
  o.tune.margin = 0.25;
  o.tune.compile_only = true;
  o.freeze = false;
  o.min_nontrivial_ops = 3;
  o.example_inputs = {c10::IValue(at::ones({2}))};
  SetRuntimeOptions(o);
  Options got = GetRuntimeOptions();
  EXPECT_EQ(got.mode, Mode::kTuneSync);
  EXPECT_EQ(got.cache_dir, o.cache_dir);
  EXPECT_TRUE(got.tune == o.tune);
  EXPECT_FALSE(got.freeze);
  EXPECT_EQ(got.min_nontrivial_ops, 3);
  EXPECT_TRUE(got.example_inputs.empty());
  SetRuntimeOptions(before);
}

TEST(RuntimeOptionsTest, FromEnvReadsModeAndCacheDirAndNamesABadMode) {
  ::setenv("DICE_MODE", "tune_sync", 1);
  ::setenv("DICE_CACHE_DIR", "/tmp/dice-env-cache", 1);
  auto o = Options::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->mode, Mode::kTuneSync);
  EXPECT_EQ(o->cache_dir, "/tmp/dice-env-cache");
  ::setenv("DICE_MODE", "fast", 1);
  auto bad = Options::FromEnv();
  ::unsetenv("DICE_MODE");
  ::unsetenv("DICE_CACHE_DIR");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("DICE_MODE"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("fast"), std::string::npos) << bad.status().message();
}

// Restores PyTorch's TF32 switches (legacy API) when a test ends.
class Tf32Switches {
 public:
  Tf32Switches()
      : cudnn_(at::globalContext().allowTF32CuDNN(at::Float32Op::CONV)),
        cublas_(at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
                at::Float32Precision::TF32) {}
  ~Tf32Switches() {
    at::globalContext().setAllowTF32CuDNN(cudnn_);
    at::globalContext().setAllowTF32CuBLAS(cublas_);
  }

 private:
  bool cudnn_, cublas_;
};

TEST(RuntimeOptionsTest, TuneOptionsInUseFollowPyTorchsTf32SwitchesAtEachCall) {
  Tf32Switches restore;
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setAllowTF32CuBLAS(false);
  runtime::TuneOptions o = CurrentTuneOptions();
  EXPECT_TRUE(o.tf32_conv);
  EXPECT_FALSE(o.tf32_matmul);
  EXPECT_FALSE(o.allow_reduced_precision) << "the switches never turn the override on";
  at::globalContext().setAllowTF32CuDNN(false);  // torch.backends.cudnn.allow_tf32 = False
  at::globalContext().setAllowTF32CuBLAS(true);  // torch.backends.cuda.matmul.allow_tf32 = True
  o = CurrentTuneOptions();
  EXPECT_FALSE(o.tf32_conv);
  EXPECT_TRUE(o.tf32_matmul);
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setFloat32MatmulPrecision("high");  // torch.set_float32_matmul_precision("high")
  EXPECT_TRUE(CurrentTuneOptions().tf32_matmul);
  at::globalContext().setFloat32MatmulPrecision("highest");
  EXPECT_FALSE(CurrentTuneOptions().tf32_matmul);
}

TEST(RuntimeOptionsTest, MixedLegacyAndNewTf32SettingsAreReadWithoutThrowing) {
  Tf32Switches restore;
  // torch.backends.cuda.matmul.fp32_precision = "tf32" and
  // torch.backends.cudnn.conv.fp32_precision = "ieee": PyTorch's own
  // allowTF32CuBLAS() / allowTF32CuDNN() throw in this state.
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL, at::Float32Precision::TF32);
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV, at::Float32Precision::IEEE);
  runtime::TuneOptions o;
  ASSERT_NO_THROW(o = CurrentTuneOptions());
  EXPECT_TRUE(o.tf32_matmul);
  EXPECT_FALSE(o.tf32_conv);
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL, at::Float32Precision::IEEE);
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV, at::Float32Precision::TF32);
}

}  // namespace
}  // namespace dice::torch_ext
