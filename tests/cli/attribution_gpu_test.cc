// `dice tune` on a GPU attributes the end-to-end gain (cli/attribution.h):
// a small conv + batchnorm model, whose batchnorm freezing folds into the
// convolution, reports what capture alone gave beside what the winners
// added, with three times whose ratios multiply to the total. Skips without
// a CUDA device. Torch-free (the model is scripted by PyTorch's Python).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "dice/runtime/cuda_driver.h"
#include "run_dice.h"

namespace dice::cli {
namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;
using nlohmann::json;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AttributionGpuTest, ConvBatchnormModelReportsCaptureAloneBesideTheWinnersAndTheyMultiplyToTheTotal) {
  if (!runtime::QueryDevice(0).ok()) GTEST_SKIP() << "no CUDA device";
  ScratchDir dir("dice_attribution_gpu");
  const std::string model = dir.path() + "/convbn.pt", script = dir.path() + "/make_model.py",
                    json_path = dir.path() + "/tune.json";
  {
    std::ofstream out(script);
    out << "import sys, torch\n"
           "class M(torch.nn.Module):\n"
           "    def __init__(self):\n"
           "        super().__init__()\n"
           "        self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)\n"
           "        self.bn = torch.nn.BatchNorm2d(32)\n"
           "    def forward(self, x):\n"
           "        return torch.relu(self.bn(self.conv(x))) * 0.5 + 1.0\n"
           "torch.manual_seed(0)\n"
           "m = M().eval()\n"
           "with torch.no_grad():\n"
           "    m.bn.running_mean.uniform_(-1, 1)\n"
           "    m.bn.running_var.uniform_(0.5, 2)\n"
           "torch.jit.script(m).save(sys.argv[1])\n";
  }
  ASSERT_EQ(std::system(("python3 '" + script + "' '" + model + "'").c_str()), 0) << "python3 + torch needed";
  const DiceResult r = RunDice("tune '" + model + "' --input 8x16x64x64:f32 --max-candidates 4 --budget-s 30 --reps 20 "
                               "--cache '" + dir.path() + "/cache' --json '" + json_path + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  const json doc = json::parse(ReadText(json_path));
  EXPECT_EQ(doc["gpu"], true) << doc.dump(2);
  EXPECT_EQ(doc["frozen"], true) << doc.dump(2);
  for (const char* k : {"before_us", "captured_us", "after_us", "capture_speedup", "winners_speedup", "speedup"}) {
    ASSERT_TRUE(doc[k].is_number()) << k << " = " << doc[k];
    EXPECT_GT(doc[k].get<double>(), 0.0) << k;
  }
  const double before = doc["before_us"], captured = doc["captured_us"], after = doc["after_us"];
  const double capture = doc["capture_speedup"], winners = doc["winners_speedup"], total = doc["speedup"];
  EXPECT_NEAR(capture, before / captured, 1e-6 * capture);
  EXPECT_NEAR(winners, captured / after, 1e-6 * winners);
  EXPECT_NEAR(total, before / after, 1e-6 * total);
  EXPECT_NEAR(total, capture * winners, 1e-6 * total);
  // Every group with a winner is credited with what it saved.
  for (const json& g : doc["groups"]) {
    if (g["best_us"].is_number() && g["baseline_us"].is_number()) {
      ASSERT_TRUE(g["saved_us"].is_number()) << g.dump(2);
      EXPECT_TRUE(g["saved_per"] == "forward" || g["saved_per"] == "call") << g.dump(2);
    }
  }
  // The human output says it in one line.
  EXPECT_NE(r.output.find("capture alone (freeze, folding): "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x on top; total "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("outputs match eager"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dice::cli
