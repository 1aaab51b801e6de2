// Held-out evaluation (issue 4: pass@k of the SFT vs the RL model): the
// pass@k estimator against hand-computed values, the shared reward
// (reward.h) in both modes on known answers, and `dice train eval` end to
// end on a tiny random model with the held-out split.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/training/eval.h"
#include "dice/training/examples.h"
#include "dice/training/model_init.h"
#include "dice/training/reward.h"

namespace dice::training {
namespace {

class TrainingEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dice_eval_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    torch::set_num_threads(1);
  }
  // rm -rf: LibTorch's exported std::filesystem::remove_all crashes when interposed.
  static void TearDownTestSuite() { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }
  static std::string dir_;
};
std::string TrainingEval::dir_;

const char kReference[] =
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return torch.sigmoid(x) + 1.0\n\ndef get_inputs():\n    return [torch.randn(8, 32)]\n\n"
    "def get_init_inputs():\n    return []\n";

std::string ModelNewAnswer(const std::string& expr) {
  return "Here it is.\n```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return " + expr + "\n```\n";
}

CukeExample E2eTask(const std::string& id, const std::string& split) {
  CukeExample e;
  e.id = id;
  e.kind = "e2e";
  e.reference = kReference;
  e.program = ModelNewAnswer("1.0 + torch.sigmoid(x)");
  e.split = split;
  return e;
}

// Values: pass@1 = c/n; pass@5 of n=10, c=3 is 1 - C(7,5)/C(10,5) = 1 - 21/252;
// n - c < k gives 1; c = 0 gives 0.
TEST(TrainingPassAtK, MatchesTheUnbiasedEstimator) {
  EXPECT_NEAR(*PassAtK(10, 3, 1), 0.3, 1e-12);
  EXPECT_NEAR(*PassAtK(10, 3, 5), 1.0 - 21.0 / 252.0, 1e-12);
  EXPECT_NEAR(*PassAtK(16, 1, 4), 0.25, 1e-12);  // 1 - C(15,4)/C(16,4) = 4/16
  EXPECT_DOUBLE_EQ(*PassAtK(4, 2, 3), 1.0);
  EXPECT_DOUBLE_EQ(*PassAtK(8, 0, 8), 0.0);
  EXPECT_DOUBLE_EQ(*PassAtK(8, 8, 1), 1.0);
  EXPECT_EQ(PassAtK(4, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PassAtK(4, 1, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PassAtK(4, 5, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PassAtK(4, -1, 1).status().code(), StatusCode::kInvalidArgument);
}

// Judge mode on the CPU (pure-PyTorch programs): right = 1, wrong = 0 with
// the verdict, no code block = 0 with the parser's reason, a crash = 0.
TEST(TrainingReward, JudgeScoresRightWrongMissingAndCrashingAnswers) {
  RewardOptions o;
  o.stage = "e2e";
  o.judge = true;
  o.judge_jobs = 4;
  o.judge_options.device = "cpu";
  o.judge_options.reps = 2;
  o.judge_options.timeout_s = 120;
  auto r = RewardAnswers(E2eTask("t", "heldout"),
                         {ModelNewAnswer("1.0 + torch.sigmoid(x)"), ModelNewAnswer("torch.sigmoid(x)"),
                          "no code at all", ModelNewAnswer("x.undefined_method()")},
                         o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_DOUBLE_EQ((*r)[0].reward, 1.0) << (*r)[0].why;
  EXPECT_TRUE((*r)[0].correct);
  EXPECT_TRUE((*r)[0].compiled);
  EXPECT_GT((*r)[0].speedup, 0.0);
  EXPECT_DOUBLE_EQ((*r)[1].reward, 0.0);
  EXPECT_TRUE((*r)[1].compiled);
  EXPECT_FALSE((*r)[1].correct);
  EXPECT_NE((*r)[1].why.find("incorrect"), std::string::npos) << (*r)[1].why;
  EXPECT_DOUBLE_EQ((*r)[2].reward, 0.0);
  EXPECT_NE((*r)[2].why.find("no code block"), std::string::npos) << (*r)[2].why;
  EXPECT_DOUBLE_EQ((*r)[3].reward, 0.0);
  EXPECT_FALSE((*r)[3].correct);
  EXPECT_FALSE((*r)[3].why.empty());
}

// Compile mode: NVRTC (sm_90, no GPU needed) accepts a kernel and rejects a
// broken one with the compiler's message.
TEST(TrainingReward, CompileModeRunsNvrtcOnTheDeviceForm) {
  CukeExample task;
  task.id = "c";
  task.kind = "infill";
  task.reference = kReference;
  RewardOptions o;
  o.stage = "infill";
  auto r = RewardAnswers(task,
                         {"```cuda\n__global__ void k(const float* x, float* y, int n) {\n  int i = threadIdx.x;\n"
                          "  if (i < n) y[i] = 1.f / (1.f + expf(-x[i])) + 1.f;\n}\n```",
                          "```cuda\n__global__ void k(const float* x, float* y, int n) { y[0] = undeclared; }\n```"},
                         o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ((*r)[0].reward, 1.0) << (*r)[0].why;
  EXPECT_TRUE((*r)[0].compiled);
  EXPECT_FALSE((*r)[0].correct);  // compile mode never claims correctness
  EXPECT_DOUBLE_EQ((*r)[1].reward, 0.0);
  EXPECT_NE((*r)[1].why.find("undeclared"), std::string::npos) << (*r)[1].why;
}

// `dice train eval` takes only the held-out split, decodes n samples per
// task, scores them (a random model writes no code block: pass@k 0 with
// that reason) and writes the JSON report; bad k and an empty split are
// bad input naming the flag.
TEST_F(TrainingEval, EvalScoresOnlyTheHeldOutSplitAndWritesTheReport) {
  ASSERT_TRUE(InitRandomCheckpoint(generator::TinySdarConfig(260, 2048, /*tie_word_embeddings=*/true),
                                   Path("m"), 5)
                  .ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("m")).ok());
  {
    std::ofstream out(Path("tasks.jsonl"));
    out << E2eTask("held-a", "heldout").ToJsonLine() << "\n"
        << E2eTask("train-b", "train").ToJsonLine() << "\n"
        << "{not json\n"
        << E2eTask("held-c", "heldout").ToJsonLine() << "\n";
  }
  EvalOptions o;
  o.model_dir = Path("m");
  o.tasks_path = Path("tasks.jsonl");
  o.out_json = Path("eval.json");
  o.stage = "e2e";
  o.reward = "judge";
  o.samples = 3;
  o.ks = {1, 2};
  o.max_new_tokens = 8;
  std::vector<std::string> lines;
  auto r = RunEval(o, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tasks.size(), 2u);
  EXPECT_EQ(r->tasks[0].id, "held-a");
  EXPECT_EQ(r->tasks[1].id, "held-c");
  for (const auto& t : r->tasks) {
    EXPECT_EQ(t.samples, 3);
    EXPECT_EQ(t.passed, 0);
    ASSERT_EQ(t.pass_at_k.size(), 2u);
    EXPECT_NE(t.first_failure.find("no code block"), std::string::npos) << t.first_failure;
  }
  EXPECT_DOUBLE_EQ(r->pass_at_k[0], 0.0);
  EXPECT_GT(r->decoded_tokens, 0);
  EXPECT_LE(r->decoded_tokens, 2 * 3 * 8);  // answers are cut at EOS
  EXPECT_NE(r->metric.find("compiles AND correct"), std::string::npos);
  bool skipped_logged = false;
  for (const auto& l : lines) skipped_logged |= l.find("skipped malformed line") != std::string::npos;
  EXPECT_TRUE(skipped_logged);
  for (const auto& l : lines) {  // decoded bytes are escaped on the console
    for (char c : l) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\t') << l;
  }
  std::ifstream in(Path("eval.json"));
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["split"], "heldout");
  EXPECT_EQ(j["tasks"].size(), 2u);
  EXPECT_EQ(j["k"], nlohmann::json::array({1, 2}));

  o.ks = {4};
  auto bad_k = RunEval(o, nullptr);
  EXPECT_EQ(bad_k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_k.status().message().find("-k 4"), std::string::npos) << bad_k.status().ToString();
  o.ks = {1};
  o.stage = "infill";  // no infill task in the file
  auto empty = RunEval(o, nullptr);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no heldout task for stage infill"), std::string::npos);
}

}  // namespace
}  // namespace dice::training
