// `dice train` as a user runs it: init -> dataset -> sft on a tiny byte-level
// model, then `dice generate` loads the SFT checkpoint and decodes; bad
// input (flags, files, checkpoints) gets exit code 2 and a message naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "run_dice.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dice_train_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  // rm -rf: LibTorch's exported std::filesystem::remove_all crashes when interposed.
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  std::string dir_;
};

TEST_F(TrainCliTest, InitDatasetSftThenGenerateLoadsTheCheckpoint) {
  DiceResult init = RunDice("train init --out " + dir_ + "/m0 --byte-tokenizer --hidden 32 --layers 1 --heads 2 "
                            "--kv-heads 1 --head-dim 16 --intermediate 64 --context 8192");
  ASSERT_EQ(init.code, 0) << init.output;
  std::ofstream(dir_ + "/corpus.json")
      << R"([{"id": 1, "pytorch_code": "def forward(self, x):\n    return torch.relu(x)\n",)"
      << R"( "cuda_code": "__global__ void k(float* y) { y[0] = 0.f; }", "prefix": "", "middle": "__global__ void k(float* y) { y[0] = 0.f; }", "suffix": "y"},)"
      << R"( {"id": 2, "pytorch_code": 5}])";
  DiceResult data = RunDice("train dataset --corpus " + dir_ + "/corpus.json --out " + dir_ + "/cuke.jsonl "
                            "--heldout-percent 0");
  ASSERT_EQ(data.code, 0) << data.output;
  EXPECT_NE(data.output.find("dropped: malformed 1"), std::string::npos) << data.output;
  EXPECT_NE(data.output.find("infill 1, e2e 1"), std::string::npos) << data.output;
  EXPECT_NE(data.output.find("unverified-here"), std::string::npos) << data.output;
  DiceResult sft = RunDice("train sft --model " + dir_ + "/m0 --data " + dir_ + "/cuke.jsonl --out " + dir_ +
                           "/m1 --steps 2 --batch-size 1 --warmup-steps 1");
  ASSERT_EQ(sft.code, 0) << sft.output;
  EXPECT_NE(sft.output.find("sft step 2/2 loss"), std::string::npos) << sft.output;
  std::ifstream csv(dir_ + "/m1/sft_log.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "step,loss,lr,tokens,tokens_per_s,elapsed_s");
  std::ofstream(dir_ + "/task.py") << "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                      "        return torch.relu(x)\n";
  DiceResult gen = RunDice("generate --model " + dir_ + "/m1 --task " + dir_ + "/task.py --max-new-tokens 8");
  EXPECT_EQ(gen.code, 0) << gen.output;
  EXPECT_NE(gen.output.find("=== sample 0:"), std::string::npos) << gen.output;
}

TEST_F(TrainCliTest, BadInputIsExitTwoNamingTheCause) {
  DiceResult no_model = RunDice("train sft --model " + dir_ + "/missing --data x.jsonl --out " + dir_ + "/o");
  EXPECT_EQ(no_model.code, 2) << no_model.output;
  EXPECT_NE(no_model.output.find(dir_ + "/missing"), std::string::npos) << no_model.output;
  DiceResult stage = RunDice("train rl --model m --tasks t --out o --stage sideways");
  EXPECT_EQ(stage.code, 2) << stage.output;
  EXPECT_NE(stage.output.find("--stage"), std::string::npos) << stage.output;
  DiceResult no_source = RunDice("train dataset --out " + dir_ + "/o.jsonl");
  EXPECT_EQ(no_source.code, 2) << no_source.output;
  EXPECT_NE(no_source.output.find("--corpus"), std::string::npos) << no_source.output;
  std::ofstream(dir_ + "/garbage.json") << "this is not json\n";
  DiceResult garbage = RunDice("train dataset --corpus " + dir_ + "/garbage.json --out " + dir_ + "/o.jsonl");
  EXPECT_EQ(garbage.code, 2) << garbage.output;
  EXPECT_NE(garbage.output.find("garbage.json"), std::string::npos) << garbage.output;
  for (const char* flag : {"--device-infill-spans 65", "--device-infill-max-bytes 3", "--device-infill-spans -1"}) {
    DiceResult range = RunDice("train dataset --corpus " + dir_ + "/garbage.json --out " + dir_ + "/o.jsonl " + flag);
    EXPECT_EQ(range.code, 2) << flag << ": " << range.output;
    EXPECT_NE(range.output.find(std::string(flag).substr(0, std::string(flag).find(' '))), std::string::npos)
        << range.output;
  }
  DiceResult cap = RunDice("train rl --model m --tasks t --out o --max-trace-tokens -5");
  EXPECT_EQ(cap.code, 2) << cap.output;
  EXPECT_NE(cap.output.find("--max-trace-tokens"), std::string::npos) << cap.output;
  DiceResult graphs = RunDice("train rl --model m --tasks t --out o --rollout-graphs maybe");  // on | off
  EXPECT_EQ(graphs.code, 2) << graphs.output;
  EXPECT_NE(graphs.output.find("--rollout-graphs"), std::string::npos) << graphs.output;
  // A checkpoint of another architecture: weights of one shape, a config of another.
  ASSERT_EQ(RunDice("train init --out " + dir_ + "/small --byte-tokenizer --hidden 32 --layers 1 --heads 2 "
                    "--kv-heads 1 --head-dim 16 --intermediate 64").code, 0);
  ASSERT_EQ(RunDice("train init --out " + dir_ + "/wide --byte-tokenizer --hidden 64 --layers 1 --heads 2 "
                    "--kv-heads 1 --head-dim 32 --intermediate 64").code, 0);
  ASSERT_EQ(std::system(("cp " + dir_ + "/wide/config.json " + dir_ + "/small/config.json").c_str()), 0);
  std::ofstream(dir_ + "/one.jsonl") << R"({"id": "a", "kind": "e2e", "reference": "r", "program": "p"})" << "\n";
  DiceResult other = RunDice("train sft --model " + dir_ + "/small --data " + dir_ + "/one.jsonl --out " + dir_ +
                             "/o2 --steps 1");
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("model.embed_tokens.weight"), std::string::npos) << other.output;
  DiceResult init_both = RunDice("train init --out " + dir_ + "/m");
  EXPECT_EQ(init_both.code, 2) << init_both.output;
  EXPECT_NE(init_both.output.find("--byte-tokenizer"), std::string::npos) << init_both.output;
}

}  // namespace
