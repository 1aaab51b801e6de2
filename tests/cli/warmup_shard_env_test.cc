// `dice warmup` without --shard takes its shard from the launcher's
// environment (docs/CLI.md "Warming up across machines"): torchrun's
// RANK/WORLD_SIZE, else Slurm's SLURM_PROCID/SLURM_NTASKS; --shard wins over
// both, and a bad value is exit 2 naming the variable. The model is written
// by python3's torch (this file includes no torch header).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "run_dice.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;

constexpr const char* kLauncherVars[] = {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"};

// Sets `vars` and unsets the other launcher variables for its lifetime (the
// `dice` child inherits them), then restores what was there.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : kLauncherVars) {
      const char* old = std::getenv(name);
      if (old != nullptr) saved_[name] = old;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnv() {
    for (const char* name : kLauncherVars) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  LauncherEnv(const LauncherEnv&) = delete;
  LauncherEnv& operator=(const LauncherEnv&) = delete;

 private:
  std::map<std::string, std::string> saved_;
};

class WarmupShardEnvTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("dice_shard_env");
    std::ofstream(dir_->path() + "/make.py") << "import sys, torch\n"
                                                "class M(torch.nn.Module):\n"
                                                "    def forward(self, x):\n"
                                                "        return torch.relu(x * 2.0)\n"
                                                "torch.jit.script(M()).save(sys.argv[1])\n";
    ASSERT_EQ(std::system(("python3 '" + dir_->path() + "/make.py' '" + Model() + "'").c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Model() { return dir_->path() + "/model.pt"; }
  // Three small shape sets, one candidate each (compile-only without a GPU).
  static DiceResult Warmup(const std::string& extra = "") {
    return RunDice("warmup " + Model() + " --input 16:f32 --input 32:f32 --input 64:f32 --max-candidates 1 --cache " +
                   dir_->path() + "/cache" + extra);
  }
  static ScratchDir* dir_;
};
ScratchDir* WarmupShardEnvTest::dir_ = nullptr;

TEST_F(WarmupShardEnvTest, TakesTheShardFromTorchrunsRankAndWorldSize) {
  LauncherEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  DiceResult r = Warmup();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("shard 1/2 takes 1 (shard from RANK/WORLD_SIZE (torchrun))"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1/1] set 2 (32:f32)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("set 1 ("), std::string::npos) << r.output;
}

TEST_F(WarmupShardEnvTest, TakesTheShardFromSlurmsProcIdAndTaskCount) {
  LauncherEnv env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}});
  DiceResult r = Warmup();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("shard 2/3 takes 1 (shard from SLURM_PROCID/SLURM_NTASKS (Slurm))"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[1/1] set 3 (64:f32)"), std::string::npos) << r.output;
}

TEST_F(WarmupShardEnvTest, TorchrunWinsOverSlurmAndTheShardFlagOverBoth) {
  {
    LauncherEnv env({{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
    DiceResult r = Warmup();
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("shard 0/3 takes 1 (shard from RANK/WORLD_SIZE"), std::string::npos) << r.output;
  }
  LauncherEnv env({{"RANK", "0"}, {"WORLD_SIZE", "3"}});
  DiceResult flag = Warmup(" --shard 1/3");
  ASSERT_EQ(flag.code, 0) << flag.output;
  EXPECT_NE(flag.output.find("shard 1/3 takes 1\n"), std::string::npos) << flag.output;
  EXPECT_NE(flag.output.find("[1/1] set 2 (32:f32)"), std::string::npos) << flag.output;
}

TEST_F(WarmupShardEnvTest, BadLauncherValuesExitTwoNamingTheVariable) {
  const std::pair<std::map<std::string, std::string>, std::string> cases[] = {
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2 is not below WORLD_SIZE=2"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'"},
      {{{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID=3 is not below SLURM_NTASKS=2"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "-1"}}, "SLURM_NTASKS='-1'"},
      {{{"SLURM_NTASKS", "4"}}, "SLURM_NTASKS is set but SLURM_PROCID is not"},
  };
  for (const auto& [vars, message] : cases) {
    LauncherEnv env(vars);
    DiceResult r = Warmup();
    EXPECT_EQ(r.code, 2) << message << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

}  // namespace
