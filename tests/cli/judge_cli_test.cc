// `dice judge` as a user runs it: a KernelBench reference and candidate
// programs (pure PyTorch, judged on the CPU), the JSON verdict on stdout and
// the documented exit codes (0 correct, 4 not correct, 2 bad input).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_dice.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;

class JudgeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(Path("ref.py")) << "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                                     "    def forward(self, x):\n        return torch.sigmoid(x) * x\n\n"
                                     "def get_inputs():\n    return [torch.randn(32, 256)]\n\n"
                                     "def get_init_inputs():\n    return []\n";
    for (const auto& [name, expr] : {std::pair<const char*, const char*>{"good.py", "torch.nn.functional.silu(x)"},
                                     {"bad.py", "torch.sigmoid(x)"}}) {
      std::ofstream(Path(name)) << "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                   "    def forward(self, x):\n        return " << expr << "\n";
    }
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // Runs `dice judge` on the CPU; `verdict` gets the JSON line it printed last.
  DiceResult Judge(const std::string& candidate, nlohmann::json* verdict) {
    DiceResult r = RunDice("judge --device cpu --trials 2 --reps 3 --reference " + Path("ref.py") + " --candidate " +
                           Path(candidate));
    const size_t start = r.output.rfind("\n{", r.output.size() < 2 ? 0 : r.output.size() - 2);
    *verdict = nlohmann::json::parse(r.output.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
    return r;
  }

  ScratchDir dir_{"dice_judge_cli"};
};

TEST_F(JudgeCliTest, CorrectCandidateExitsZeroWithTimes) {
  nlohmann::json j;
  DiceResult r = Judge("good.py", &j);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["outcome"], "correct");
  EXPECT_GT(j["ref_ms"].get<double>(), 0.0);
  EXPECT_GT(j["new_ms"].get<double>(), 0.0);
}

TEST_F(JudgeCliTest, WrongCandidateExitsFourAndSaysWhy) {
  nlohmann::json j;
  DiceResult r = Judge("bad.py", &j);
  ASSERT_EQ(r.code, 4) << r.output;
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["outcome"], "incorrect");
  EXPECT_NE(j["error"].get<std::string>().find("max abs diff"), std::string::npos) << r.output;
  // Never timed (incorrect): null, not 0.0, as in `dice tune --json`.
  EXPECT_TRUE(j["new_ms"].is_null()) << r.output;
  EXPECT_TRUE(j["speedup"].is_null()) << r.output;
}

TEST_F(JudgeCliTest, MissingFileIsBadInput) {
  DiceResult r = RunDice("judge --device cpu --reference " + Path("nope.py") + " --candidate " + Path("good.py"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nope.py"), std::string::npos) << r.output;
}

}  // namespace
