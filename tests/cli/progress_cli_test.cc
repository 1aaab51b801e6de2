// What `dice` shows while it works, run as a user would with its output
// piped: a progress line per fusion group and phase, in order, before the
// result table; training step lines with an ETA; and the log level
// (--log-level, DICE_LOG_LEVEL) deciding which diagnostics appear, never the
// results.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <torch/script.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "run_dice.h"
#include "dice/runtime/cuda_driver.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;

// Sets an environment variable for the scope (the dice child inherits it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

class ProgressCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two fusion groups (mul+relu, tanh+add) around an mm left with PyTorch.
    model_ = dir_.path() + "/model.pt";
    torch::jit::Module m("Model");
    m.define("def forward(self, x):\n  y = torch.relu(x * 2.0)\n  return torch.tanh(torch.mm(y, y)) + 1.0\n");
    m.save(model_);
  }
  std::string Tune(const std::string& extra) const {
    return "tune " + model_ + " --input 32x32:f32 --cache " + dir_.path() + "/cache" + extra;
  }
  ScratchDir dir_{"dice_progress_test"};
  std::string model_;
};

// Offset of `needle` in `text` at or after `from`; npos when absent.
size_t After(const std::string& text, const std::string& needle, size_t from) {
  return from == std::string::npos ? std::string::npos : text.find(needle, from);
}

TEST_F(ProgressCliTest, CompileOnlyTunePrintsEachGroupsProgressInOrderBeforeTheTable) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  DiceResult r = RunDice(Tune(""));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  // Piped: one line per event, no carriage returns.
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  size_t at = out.find("2 fusion group(s) formed");
  at = After(out, "dice: group 1/2 generate (", at);
  at = After(out, "dice: group 1/2 compile (", at);
  at = After(out, "dice: group 1/2 done (", at);
  at = After(out, "dice: group 2/2 generate (", at);
  at = After(out, "dice: group 2/2 done (", at);
  at = After(out, "base µs", at);
  EXPECT_NE(at, std::string::npos) << "progress lines missing or out of order:\n" << out;
  // Each done line carries its counts: compiled > 0, nothing verified or timed without a GPU.
  const std::regex done(R"(dice: group ([12])/2 done \([0-9.]+ s\): (\d+) candidate\(s\), (\d+) compiled, )"
                        R"(0 verified, 0 timed, best - \| )");
  int groups = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
    ++groups;
    EXPECT_GT(std::stoi((*it)[3]), 0) << it->str();
    EXPECT_LE(std::stoi((*it)[3]), std::stoi((*it)[2])) << it->str();
  }
  EXPECT_EQ(groups, 2) << out;
}

// Piped stdout is flushed line by line: each line reaches the reader when
// it is printed, not all at exit. A shell stamps every line as it arrives
// (bash's $EPOCHREALTIME, no fork); the no-GPU notice, printed before the
// candidates compile, must arrive well before the result table.
TEST_F(ProgressCliTest, PipedLinesArriveWhenPrintedNotAtExit) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  const std::string cmd = "bash -c '" + std::string(DICE_CLI_PATH) + " " + Tune("") +
                          " 2>/dev/null | while IFS= read -r l; do echo \"$EPOCHREALTIME $l\"; done'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  // "<seconds.micros> <line>" of the first line holding `needle`; -1 when none.
  auto arrived = [&out](const std::string& needle) {
    const size_t at = out.find(needle);
    if (at == std::string::npos) return -1.0;
    const size_t begin = out.rfind('\n', at);
    return std::stod(out.substr(begin == std::string::npos ? 0 : begin + 1));
  };
  const double notice = arrived("dice: running compile-only");
  const double table = arrived("tried/comp/ver");
  ASSERT_GT(notice, 0) << out;
  ASSERT_GT(table, 0) << out;
  EXPECT_GT(table - notice, 0.2) << "the lines arrived together, as if stdout were flushed only at exit:\n" << out;
}

TEST_F(ProgressCliTest, LogLevelWarnHidesProgressButNotTheResults) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  DiceResult r = RunDice(Tune(" --log-level warn"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("group 1/2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fusion group(s) formed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no CUDA device present"), std::string::npos) << "a warning stays at warn:\n" << r.output;
  EXPECT_NE(r.output.find("base µs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("outputs match eager"), std::string::npos) << r.output;
  // Before the command name as well as after it.
  DiceResult before = RunDice("--log-level error " + Tune(""));
  ASSERT_EQ(before.code, 0) << before.output;
  EXPECT_EQ(before.output.find("group 1/2"), std::string::npos) << before.output;
  EXPECT_EQ(before.output.find("no CUDA device present"), std::string::npos) << before.output;
  EXPECT_NE(before.output.find("outputs match eager"), std::string::npos) << before.output;
}

TEST_F(ProgressCliTest, LogLevelDebugAddsOneLinePerCandidateThatInfoHides) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  DiceResult debug = RunDice(Tune(" --log-level debug"));
  ASSERT_EQ(debug.code, 0) << debug.output;
  EXPECT_NE(debug.output.find("dice: group 1 candidate template:"), std::string::npos) << debug.output;
  EXPECT_NE(debug.output.find("not timed"), std::string::npos) << "compile-only times nothing:\n" << debug.output;
  DiceResult info = RunDice(Tune(" --log-level info"));
  ASSERT_EQ(info.code, 0) << info.output;
  EXPECT_EQ(info.output.find("dice: group 1 candidate "), std::string::npos) << info.output;
}

TEST_F(ProgressCliTest, DiceLogLevelOffSilencesDiagnosticsAndTheFlagWins) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  ScopedEnv off("DICE_LOG_LEVEL", "off");
  DiceResult quiet = RunDice(Tune(""));
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("dice: "), std::string::npos) << quiet.output;
  EXPECT_NE(quiet.output.find("base µs"), std::string::npos) << quiet.output;
  DiceResult info = RunDice(Tune(" --log-level info"));
  ASSERT_EQ(info.code, 0) << info.output;
  EXPECT_NE(info.output.find("dice: group 2/2 done ("), std::string::npos) << info.output;
}

TEST_F(ProgressCliTest, LogLevelOffStillPrintsTheErrorThatFailsTheCommand) {
  // The flag (before the command's name) and the variable alike: diagnostics
  // go, the one error line and the exit code stay.
  DiceResult flag = RunDice("--log-level off cache show no-such-key --cache " + dir_.path() + "/missing");
  EXPECT_EQ(flag.code, 2) << flag.output;
  EXPECT_EQ(flag.output.rfind("dice: error: ", 0), 0u) << flag.output;
  EXPECT_EQ(std::count(flag.output.begin(), flag.output.end(), '\n'), 1) << flag.output;

  ScopedEnv off("DICE_LOG_LEVEL", "off");
  DiceResult env = RunDice("tune " + dir_.path() + "/no-such-model.pt --input 4:f32");
  EXPECT_EQ(env.code, 2) << env.output;
  EXPECT_NE(env.output.find("dice: error: "), std::string::npos) << env.output;
  EXPECT_NE(env.output.find("no-such-model.pt"), std::string::npos) << env.output;
  EXPECT_EQ(env.output.find("no CUDA device present"), std::string::npos) << "a notice stays off:\n" << env.output;

  DiceResult failed = RunDice("--log-level off " + Tune(" --input 2x2:f32"));  // a second --input: rejected
  EXPECT_NE(failed.code, 0) << failed.output;
  EXPECT_NE(failed.output.find("dice: error: "), std::string::npos) << failed.output;
}

TEST_F(ProgressCliTest, BadLogLevelIsBadInputNamingTheFlag) {
  for (const std::string& args : {"--log-level bogus cache ls --cache " + dir_.path() + "/cache",
                                 "cache ls --cache " + dir_.path() + "/cache --log-level LOUD",
                                 Tune(" --log-level 3")}) {
    DiceResult r = RunDice(args);
    EXPECT_EQ(r.code, 2) << args << ":\n" << r.output;
    EXPECT_NE(r.output.find("--log-level"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("trace|debug|info|warn|error|off"), std::string::npos) << r.output;
  }
}

TEST_F(ProgressCliTest, BadDiceLogLevelIsAWarningAndTheCommandRuns) {
  ScopedEnv bad("DICE_LOG_LEVEL", "loud");
  DiceResult r = RunDice("cache ls --cache " + dir_.path() + "/cache");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("DICE_LOG_LEVEL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'loud'"), std::string::npos) << r.output;
}

TEST_F(ProgressCliTest, WarmupShowsEachSetsGroupsBeforeItsSummary) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the compile-only path";
  DiceResult r = RunDice("warmup " + model_ + " --input 32x32:f32 --input 16x16:f32 --cache " + dir_.path() +
                         "/cache");
  ASSERT_EQ(r.code, 0) << r.output;
  size_t at = r.output.find("[1/2] set 1: group 1/2 generate (");
  at = After(r.output, "[1/2] set 1: group 2/2 done (", at);
  at = After(r.output, "[1/2] set 1 (32x32:f32): 2 group(s)", at);
  at = After(r.output, "[2/2] set 2: group 1/2 generate (", at);
  at = After(r.output, "warm-up: 2 set(s), 4 group(s)", at);
  EXPECT_NE(at, std::string::npos) << r.output;
  DiceResult quiet = RunDice("warmup " + model_ + " --input 32x32:f32 --log-level warn --cache " + dir_.path() +
                             "/cache");
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("group 1/2"), std::string::npos) << quiet.output;
  EXPECT_NE(quiet.output.find("warm-up: 1 set(s)"), std::string::npos) << quiet.output;
}

TEST_F(ProgressCliTest, TrainStepLinesCarryAnEtaAndWarnHidesThem) {
  const std::string d = dir_.path();
  ASSERT_EQ(RunDice("train init --out " + d + "/m0 --byte-tokenizer --hidden 32 --layers 1 --heads 2 --kv-heads 1 "
                    "--head-dim 16 --intermediate 64 --context 8192").code, 0);
  std::ofstream(d + "/corpus.json")
      << R"([{"id": 1, "pytorch_code": "def forward(self, x):\n    return torch.relu(x)\n",)"
      << R"( "cuda_code": "__global__ void k(float* y) { y[0] = 0.f; }"}])";
  ASSERT_EQ(RunDice("train dataset --corpus " + d + "/corpus.json --out " + d + "/data.jsonl --heldout-percent 0")
                .code, 0);
  const std::string sft = "train sft --model " + d + "/m0 --data " + d + "/data.jsonl --steps 3 --batch-size 1 "
                          "--warmup-steps 1 --out ";
  DiceResult r = RunDice(sft + d + "/m1");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::regex with_eta(R"(sft step ([12])/3 loss [^\n]*, ETA [0-9.]+ s\n)");
  int lines = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), with_eta), end; it != end; ++it) ++lines;
  EXPECT_EQ(lines, 2) << r.output;
  const size_t last = r.output.find("sft step 3/3 loss");
  ASSERT_NE(last, std::string::npos) << r.output;
  EXPECT_EQ(r.output.substr(last, r.output.find('\n', last) - last).find("ETA"), std::string::npos)
      << "no ETA once the last step is done:\n" << r.output;
  DiceResult quiet = RunDice(sft + d + "/m2 --log-level warn");
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("sft step"), std::string::npos) << quiet.output;
  EXPECT_NE(quiet.output.find("sft: done, 3 steps"), std::string::npos) << quiet.output;
}

}  // namespace
