// `dice judge` as a user runs it: a KernelBench reference and candidate
// programs (pure PyTorch, judged on the CPU), the JSON verdict on stdout and
// the documented exit codes (0 correct, 4 not correct, 2 bad input).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_dice.h"

namespace {

using ::dice::cli_test::RunDice;

class JudgeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dice_judge_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/ref.py") << "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                                       "    def forward(self, x):\n        return torch.sigmoid(x) * x\n\n"
                                       "def get_inputs():\n    return [torch.randn(32, 256)]\n\n"
                                       "def get_init_inputs():\n    return []\n";
    std::ofstream(dir_ + "/good.py") << "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                        "    def forward(self, x):\n        return torch.nn.functional.silu(x)\n";
    std::ofstream(dir_ + "/bad.py") << "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                       "    def forward(self, x):\n        return torch.sigmoid(x)\n";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  nlohmann::json LastJsonLine(const std::string& out) {
    const size_t start = out.rfind("\n{", out.size() - 2);
    return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
  }

  std::string dir_;
};

TEST_F(JudgeCliTest, CorrectCandidateExitsZeroWithTimes) {
  auto r = RunDice("judge --device cpu --trials 2 --reps 3 --reference " + dir_ + "/ref.py --candidate " + dir_ +
                   "/good.py");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = LastJsonLine(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["outcome"], "correct");
  EXPECT_GT(j["ref_ms"].get<double>(), 0.0);
  EXPECT_GT(j["new_ms"].get<double>(), 0.0);
}

TEST_F(JudgeCliTest, WrongCandidateExitsFourAndSaysWhy) {
  auto r = RunDice("judge --device cpu --trials 2 --reps 3 --reference " + dir_ + "/ref.py --candidate " + dir_ +
                   "/bad.py");
  ASSERT_EQ(r.code, 4) << r.output;
  auto j = LastJsonLine(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["outcome"], "incorrect");
  EXPECT_NE(j["error"].get<std::string>().find("max abs diff"), std::string::npos) << r.output;
}

TEST_F(JudgeCliTest, MissingFileIsBadInput) {
  auto r = RunDice("judge --device cpu --reference " + dir_ + "/nope.py --candidate " + dir_ + "/good.py");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nope.py"), std::string::npos) << r.output;
}

}  // namespace
