// Tests of the process-wide runtime options (optimize.h SetRuntimeOptions /
// GetRuntimeOptions / Options::FromEnv), which the torch-free process state
// (torch_ext/src/runtime_state.h) keeps as RuntimeSettings: every field but
// the example inputs survives the round trip, and the environment is read
// with the same rules as before the split.
#include "dice/torch_ext/optimize.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>

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

}  // namespace
}  // namespace dice::torch_ext
