// `dice warmup` run as a user would: every shape set of the shard is tuned
// (compile-only on a machine without a GPU) with a progress line each, and
// bad shard / spec / model input is exit 2 naming the cause.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/script.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "run_dice.h"
#include "dice/runtime/cuda_driver.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;

class WarmupCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dice_warmup_test_XXXXXX";  // rm -rf, not remove_all (LibTorch interposes it)
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = dir_ + "/model.pt";
    torch::jit::Module m("Model");
    m.define("def forward(self, x, b):\n  return torch.relu(x * 2.0 + b)\n");
    m.save(model_);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  std::string dir_, model_;
};

TEST_F(WarmupCliTest, WarmsEveryShapeSetOfItsShardWithProgress) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  const std::string sets = " --input 32x64:f32,64:f32 --input 16x128:f32,128:f32 --input 8x256:f32,256:f32";
  DiceResult all = RunDice("warmup " + model_ + sets + " --cache " + dir_ + "/cache");
  ASSERT_EQ(all.code, 0) << all.output;
  EXPECT_NE(all.output.find("compile-only"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("shard 0/1 takes 3"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("[1/3] set 1 (32x64:f32,64:f32): 1 group(s)"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("[3/3] set 3 (8x256:f32,256:f32)"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("warm-up: 3 set(s), 3 group(s)"), std::string::npos) << all.output;

  DiceResult second = RunDice("warmup " + model_ + sets + " --shard 1/2 --cache " + dir_ + "/cache");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("shard 1/2 takes 1"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("[1/1] set 2 (16x128:f32,128:f32)"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("set 1 ("), std::string::npos) << second.output;
}

TEST_F(WarmupCliTest, BadShardSpecOrInputsAreBadInput) {
  const std::string cache = " --cache " + dir_ + "/cache";
  for (const std::string shard : {"2/2", "1", "a/b", "0/0"}) {
    DiceResult r = RunDice("warmup " + model_ + " --input 8x8:f32,8:f32 --shard " + shard + cache);
    EXPECT_EQ(r.code, 2) << shard << ": " << r.output;
    EXPECT_NE(r.output.find("--shard '" + shard + "'"), std::string::npos) << r.output;
  }
  DiceResult spec = RunDice("warmup " + model_ + " --input 8x8:f32,8:q7" + cache);
  EXPECT_EQ(spec.code, 2) << spec.output;
  EXPECT_NE(spec.output.find("8x8:f32,8:q7"), std::string::npos) << spec.output;
  DiceResult fit = RunDice("warmup " + model_ + " --input 8x8:f32" + cache);
  EXPECT_EQ(fit.code, 2) << fit.output;
  EXPECT_NE(fit.output.find("does not run on these inputs"), std::string::npos) << fit.output;
  DiceResult none = RunDice("warmup " + model_ + cache);
  EXPECT_EQ(none.code, 2) << none.output;
  DiceResult missing = RunDice("warmup " + dir_ + "/absent.pt --input 8x8:f32,8:f32" + cache);
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("absent.pt"), std::string::npos) << missing.output;
}

}  // namespace
