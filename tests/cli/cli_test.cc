// The `dice` tool on bad input: every case gets a clear error naming the
// cause and the documented exit code (docs/CLI.md), and loses nothing (a
// corrupt cache file is left byte-for-byte as it was).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <torch/script.h>
#include <torch/serialize.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "run_dice.h"
#include "dice/generator/tokenizer.h"
#include "dice/runtime/cuda_driver.h"

namespace {

namespace fs = std::filesystem;

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// stdout (and what the command redirects into it) of `/bin/sh -c command`.
std::string Shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // mkdtemp / rm -rf rather than std::filesystem::remove_all: LibTorch
    // exports its own copy of that symbol, which crashes when interposed.
    char tmpl[] = "/tmp/dice_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = (dir_ / "model.pt").string();
    torch::jit::Module m("Model");
    m.define("def forward(self, x):\n  return torch.relu(x * 2.0) + 1.0\n");
    m.save(model_);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + dir_.string() + "'").c_str()), 0); }

  std::string Cache() const { return (dir_ / "cache").string(); }
  fs::path dir_;
  std::string model_;
};

TEST_F(CliTest, MissingModelFileIsBadInput) {
  DiceResult r = RunDice("tune " + (dir_ / "nope.pt").string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot load TorchScript model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nope.pt': no such file"), std::string::npos) << r.output;
  // A folder of models instead of the model file in it (new-user pass, issue 20).
  r = RunDice("tune " + dir_.string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("it is a directory, not a model file"), std::string::npos) << r.output;
}

TEST_F(CliTest, CorruptModelFileIsBadInput) {
  const fs::path bad = dir_ / "corrupt.pt";
  std::ofstream(bad) << "this is not a zip archive";
  DiceResult r = RunDice("run " + bad.string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("corrupt.pt"), std::string::npos) << r.output;
}

TEST_F(CliTest, ATorchSaveFileIsNamedAsSuchWithHowToMakeATorchScriptOne) {
  // torch.save (Python) and torch::pickle_save write the same zip: data.pkl, no TorchScript code.
  const fs::path pickled = dir_ / "state_dict.pt";
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(torch::ones({2, 2})));
  std::ofstream(pickled, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  DiceResult r = RunDice("run " + pickled.string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a torch.save file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("torch.jit.save(torch.jit.script(model)"), std::string::npos) << r.output;
  const fs::path text = dir_ / "notes.pt";
  std::ofstream(text) << "not a model";
  DiceResult t = RunDice("run " + text.string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(t.code, 2) << t.output;
  EXPECT_NE(t.output.find("not a TorchScript archive (not a zip file)"), std::string::npos) << t.output;
  // A zip PyTorch did not write (one file at its root, as Python's zipfile
  // makes it): named as a zip, with PyTorch's reason, not "not a zip file".
  const unsigned char zip_bytes[] = {
      80, 75, 3, 4, 20, 0, 0, 0, 0, 0, 2, 174, 134, 93, 172, 42, 147, 216, 2, 0, 0, 0, 2, 0, 0, 0, 5, 0,
      0, 0, 97, 46, 116, 120, 116, 104, 105, 80, 75, 1, 2, 20, 3, 20, 0, 0, 0, 0, 0, 2, 174, 134, 93, 172,
      42, 147, 216, 2, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 1, 0, 0, 0,
      0, 97, 46, 116, 120, 116, 80, 75, 5, 6, 0, 0, 0, 0, 1, 0, 1, 0, 51, 0, 0, 0, 37, 0, 0, 0, 0, 0};
  const fs::path zip = dir_ / "other.zip";
  std::ofstream(zip, std::ios::binary).write(reinterpret_cast<const char*>(zip_bytes), sizeof(zip_bytes));
  DiceResult z = RunDice("run " + zip.string() + " --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(z.code, 2) << z.output;
  EXPECT_NE(z.output.find("a zip archive, but not one PyTorch wrote"), std::string::npos) << z.output;
  EXPECT_EQ(z.output.find("not a zip file"), std::string::npos) << z.output;
}

TEST_F(CliTest, MalformedInputSpecNamesTheSpec) {
  for (const char* spec : {"8xq:f32", "8x8", "8x8:q7"}) {  // int64 is a dtype now (cli/input_spec.h)
    DiceResult r = RunDice("tune " + model_ + " --input " + spec + " --cache " + Cache());
    EXPECT_EQ(r.code, 2) << spec << "\n" << r.output;
    EXPECT_NE(r.output.find(spec), std::string::npos) << r.output;
  }
  DiceResult none = RunDice("profile " + model_ + " --cache " + Cache());
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("no --input"), std::string::npos) << none.output;
}

TEST_F(CliTest, CommandLineErrorsAreOneDiceErrorLineNamingTheHelpToAskFor) {
  DiceResult unknown = RunDice("frobnicate");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("dice: error: unknown command 'frobnicate' (commands: tune, run,"), std::string::npos)
      << unknown.output;
  DiceResult bogus = RunDice("report --bogus x");
  EXPECT_EQ(bogus.code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("dice: error: "), std::string::npos) << bogus.output;
  EXPECT_NE(bogus.output.find("--bogus"), std::string::npos) << bogus.output;
  EXPECT_NE(bogus.output.find("(see 'dice report --help')"), std::string::npos) << bogus.output;
  DiceResult missing = RunDice("tune");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("dice: error: model is required (see 'dice tune --help')"), std::string::npos)
      << missing.output;
  EXPECT_EQ(RunDice("tune --help").code, 0);
}

// An option a command does not take is named as such in a `dice: error:`
// line with the help to ask for, not in CLI11's words ("The following
// argument was not expected"), exit 2.
TEST_F(CliTest, AnUnknownOptionIsNamedWithTheCommandsHelp) {
  DiceResult r = RunDice("tune " + model_ + " --input 8x8:f32 --bogus --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dice: error: unknown option '--bogus' (see 'dice tune --help')"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("not expected"), std::string::npos) << r.output;
  DiceResult two = RunDice("cache ls --bogus=1 --frob --cache " + Cache());
  EXPECT_EQ(two.code, 2) << two.output;
  EXPECT_NE(two.output.find("dice: error: unknown options '--bogus', '--frob' (see 'dice cache ls --help')"),
            std::string::npos)
      << two.output;
  EXPECT_EQ(::dice::cli::UnexpectedArgumentsMessage({"--bogus", "3", "b.pt"}),
            "unknown option '--bogus'; unexpected arguments '3', 'b.pt'");
  EXPECT_EQ(::dice::cli::UnexpectedArgumentsMessage({"x"}), "unexpected argument 'x'");
  EXPECT_EQ(::dice::cli::UnexpectedArgumentsMessage({}), "");
}

TEST_F(CliTest, OutputPathsInAMissingFolderAreBadInputBeforeAnyTuning) {
  for (const char* flag : {"--report", "--json", "--save"}) {
    const std::string path = (dir_ / "no-such-dir" / "out.file").string();
    DiceResult r = RunDice("tune " + model_ + " --input 8x8:f32 --cache " + Cache() + " " + flag + " " + path);
    EXPECT_EQ(r.code, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(flag) + " " + path + ": folder"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("fusion group(s) formed"), std::string::npos) << "tuned first:\n" << r.output;
    EXPECT_FALSE(fs::exists(Cache())) << "the cache was created before the check";
  }
}

// --save writes the captured model with the tune's capture decisions applied
// (here the attention chain as one scaled_dot_product_attention call), and it
// computes what the original computes.
TEST_F(CliTest, TuneSaveWritesTheCapturedModelWithItsAttentionDecision) {
  const std::string attn = (dir_ / "attn.pt").string(), saved = (dir_ / "served.pt").string();
  torch::jit::Module m("Attention");
  m.define("def forward(self, q, k, v):\n"
           "  return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 0.35, dim=-1), v)\n");
  m.save(attn);
  ASSERT_EQ(::setenv("DICE_ATTENTION", "sdpa", 1), 0);
  DiceResult r = RunDice("tune " + attn + " --input 2x4x16x8:f32 --input 2x4x16x8:f32 --input 2x4x16x8:f32 --cache " +
                         Cache() + " --budget-s 1 --save " + saved);
  ::unsetenv("DICE_ATTENTION");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("captured model written to " + saved), std::string::npos) << r.output;
  torch::jit::Module served = torch::jit::load(saved);
  const std::string graph = served.get_method("forward").graph()->toString();
  EXPECT_NE(graph.find("aten::scaled_dot_product_attention"), std::string::npos) << graph;
  EXPECT_EQ(graph.find("aten::softmax"), std::string::npos) << graph;
  torch::manual_seed(3);
  std::vector<c10::IValue> in = {torch::randn({2, 4, 16, 8}), torch::randn({2, 4, 16, 8}), torch::randn({2, 4, 16, 8})};
  const at::Tensor want = m.forward(in).toTensor(), got = served.forward(in).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max().item<float>();
}

TEST_F(CliTest, CacheServeOnADatabaseInAMissingFolderIsBadInputAndCreatesNothing) {
  const fs::path db = dir_ / "no-such-dir" / "kernels.db";
  DiceResult r = RunDice("cache serve --db " + db.string() + " --listen 127.0.0.1:0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(db.parent_path()));
}

TEST_F(CliTest, WrongNumberOfInputsIsBadInput) {
  DiceResult r = RunDice("tune " + model_ + " --input 8x8:f32 --input 8x8:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not run on these inputs"), std::string::npos) << r.output;
}

// CPU times are taken with one intra-op thread unless
// DICE_CPU_TIMING_THREADS says otherwise, and the timing line says which; a
// value that is not a count reads as the default, after one warning naming
// the variable (the rule of every integer setting, dice/core/env.h).
TEST_F(CliTest, CpuTimingUsesOneIntraOpThreadUnlessToldAndSaysSo) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "CPU timing only: a GPU is present";
  const std::string args = "profile " + model_ + " --input 64x64:f32 --reps 3 --cache " + Cache();
  DiceResult one = RunDice(args);
  EXPECT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("(CPU, 1 intra-op thread, see DICE_CPU_TIMING_THREADS)"), std::string::npos) << one.output;
  // The group rows count the 3 timed calls, not the 3 warm-up calls before
  // them (TorchScript's profiling runs, several times slower): columns id,
  // group, inputs, calls.
  EXPECT_TRUE(std::regex_search(one.output, std::regex(R"(\n\s*\d+\s+\S+\s+\S+\s+3\s)"))) << one.output;
  ::setenv("DICE_CPU_TIMING_THREADS", "2", 1);
  DiceResult two = RunDice(args);
  ::setenv("DICE_CPU_TIMING_THREADS", "two", 1);
  DiceResult bad = RunDice(args);
  ::unsetenv("DICE_CPU_TIMING_THREADS");
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("(CPU, 2 intra-op threads, see DICE_CPU_TIMING_THREADS)"), std::string::npos)
      << two.output;
  EXPECT_EQ(bad.code, 0) << bad.output;
  EXPECT_NE(bad.output.find("dice: warning: DICE_CPU_TIMING_THREADS='two' is not an integer in [1, 256]; using the "
                            "default 1"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("(CPU, 1 intra-op thread, see DICE_CPU_TIMING_THREADS)"), std::string::npos) << bad.output;
}

TEST_F(CliTest, UnwritableCacheDirectoryIsBadInput) {
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";
  DiceResult r = RunDice("tune " + model_ + " --input 8x8:f32 --cache " + (file / "cache").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a_file"), std::string::npos) << r.output;
}

TEST_F(CliTest, CorruptCacheFileIsReportedAndLeftIntact) {
  fs::create_directories(Cache());
  const fs::path db = fs::path(Cache()) / "kernels.db";
  const std::string garbage(8192, '\x5a');
  std::ofstream(db, std::ios::binary) << garbage;
  for (const std::string& cmd : {"tune " + model_ + " --input 8x8:f32 --cache " + Cache(), "cache ls --cache " + Cache()}) {
    DiceResult r = RunDice(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("kernels.db"), std::string::npos) << r.output;
    EXPECT_EQ(ReadFile(db), garbage) << "the cache file was modified";
  }
  // tune says how to go on (new-user pass, issue 20).
  DiceResult r = RunDice("tune " + model_ + " --input 8x8:f32 --cache " + Cache());
  EXPECT_NE(r.output.find("aside, or pass another --cache directory"), std::string::npos) << r.output;
}

TEST_F(CliTest, UnknownCacheKeyIsBadInput) {
  DiceResult r = RunDice("cache show deadbeef --cache " + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("deadbeef"), std::string::npos) << r.output;
}

TEST_F(CliTest, TuneWithoutGpuRunsCompileOnlyAndSaysSo) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: the compile-only path does not apply";
  DiceResult r = RunDice("tune " + model_ + " --input 64x64:f32 --cache " + Cache());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no CUDA device present"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("compile-only"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("outputs match eager"), std::string::npos) << r.output;
  DiceResult strict = RunDice("tune " + model_ + " --input 64x64:f32 --require-gpu --cache " + Cache());
  EXPECT_EQ(strict.code, 3) << strict.output;
  DiceResult ls = RunDice("cache ls --cache " + Cache());
  EXPECT_EQ(ls.code, 0) << ls.output;
  EXPECT_NE(ls.output.find("0 winner(s)"), std::string::npos) << "compile-only must cache nothing:\n" << ls.output;
}

// A model without a conv region (an MLP) has no memory format to decide:
// `dice tune` names none at info level (only at debug); a conv model's
// tune still says which layout it kept.
TEST_F(CliTest, TuneNamesTheMemoryFormatOnlyForAModelWithAConvRegion) {
  const std::string mlp = (dir_ / "mlp.pt").string(), conv = (dir_ / "conv.pt").string();
  torch::jit::Module m("Mlp");
  m.register_parameter("w1", torch::randn({16, 32}), false);
  m.register_parameter("b1", torch::randn({32}), false);
  m.register_parameter("w2", torch::randn({32, 8}), false);
  m.define("def forward(self, x):\n"
           "  return torch.matmul(torch.relu(torch.matmul(x, self.w1) + self.b1), self.w2)\n");
  m.save(mlp);
  DiceResult r = RunDice("tune " + mlp + " --input 4x16:f32 --budget-s 1 --cache " + Cache());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fusion group(s) formed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("memory format"), std::string::npos) << r.output;
  DiceResult debug = RunDice("tune " + mlp + " --input 4x16:f32 --budget-s 1 --log-level debug --cache " + Cache());
  EXPECT_EQ(debug.code, 0) << debug.output;
  EXPECT_NE(debug.output.find("dice: memory format: contiguous (no conv region"), std::string::npos) << debug.output;
  torch::jit::Module c("Conv");
  c.register_parameter("w", torch::randn({4, 3, 3, 3}), false);
  c.define("def forward(self, x):\n  return torch.relu(torch.conv2d(x, self.w))\n");
  c.save(conv);
  DiceResult cr = RunDice("tune " + conv + " --input 1x3x8x8:f32 --budget-s 1 --cache " + Cache());
  EXPECT_EQ(cr.code, 0) << cr.output;
  EXPECT_NE(cr.output.find("dice: memory format: "), std::string::npos) << cr.output;
}

}  // namespace

namespace {
TEST_F(CliTest, InputsThatDoNotFitTheModelAreBadInputForEveryCommand) {
  for (const std::string cmd : {"tune", "run", "profile"}) {
    DiceResult r = RunDice(cmd + " " + model_ + " --input 8x8:f32 --input 8x8:f32 --cache " + Cache());
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("does not run on these inputs"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << "no interpreter traceback expected:\n" << r.output;
  }
}
}  // namespace

namespace {
TEST_F(CliTest, TokenizePrintsTheTokenizersIdsAsJson) {
  const std::string model = std::string(DICE_SOURCE_DIR) + "/tests/data/sdar";
  auto tok = dice::generator::Tokenizer::Load(model);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = "__global__ void k(float* y) { y[threadIdx.x] = 0.5f; }\n<|im_end|>";
  const fs::path in = dir_ / "in.txt";
  std::ofstream(in, std::ios::binary) << text;
  DiceResult r = RunDice("tokenize --model " + model + " < " + in.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::string want = "[";
  for (size_t i = 0; i < tok->Encode(text).size(); ++i) want += (i ? "," : "") + std::to_string(tok->Encode(text)[i]);
  want += "]\n";
  EXPECT_EQ(r.output.substr(r.output.rfind('[')), want);
  EXPECT_NE(want.find("151645"), std::string::npos) << "<|im_end|> must be one special token";
  DiceResult bad = RunDice("tokenize --model " + (dir_ / "nope").string() + " < " + in.string());
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("nope"), std::string::npos) << bad.output;
}
}  // namespace

namespace {
TEST_F(CliTest, CacheServeAnswersHealthAndStopsOnSigterm) {
  const std::string db = (dir_ / "served.db").string();
  const std::string log = (dir_ / "serve.log").string();
  const std::string cmd = std::string(DICE_CLI_PATH) + " cache serve --db " + db + " --listen 127.0.0.1:0 > " + log +
                          " 2>&1 & echo $!";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  int pid = 0;
  ASSERT_EQ(fscanf(p, "%d", &pid), 1);
  pclose(p);
  std::string url;
  for (int i = 0; i < 100 && url.empty(); ++i) {
    usleep(100 * 1000);
    const std::string out = ReadFile(log);
    const size_t at = out.find("http://");
    if (at != std::string::npos) url = out.substr(at, out.find(' ', at) - at);
  }
  ASSERT_FALSE(url.empty()) << ReadFile(log);
  const std::string health = url + "/v1/health";
  FILE* c = popen(("python3 -c \"import urllib.request;print(urllib.request.urlopen('" + health + "').read().decode())\"").c_str(), "r");
  ASSERT_NE(c, nullptr);
  std::array<char, 512> buf{};
  const size_t n = fread(buf.data(), 1, buf.size() - 1, c);
  pclose(c);
  EXPECT_NE(std::string(buf.data(), n).find("\"ok\""), std::string::npos) << std::string(buf.data(), n);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  bool stopped = false;
  for (int i = 0; i < 100 && !stopped; ++i) {
    usleep(100 * 1000);
    stopped = ReadFile(log).find("stopped") != std::string::npos;
  }
  EXPECT_TRUE(stopped) << ReadFile(log);
  DiceResult bad = RunDice("cache serve --db " + db + " --listen nonsense");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("nonsense"), std::string::npos) << bad.output;
}

// The subcommand names CLI11 lists under "Subcommands:" in `dice ARGS --help`.
std::vector<std::string> HelpSubcommands(const std::string& args) {
  DiceResult r = RunDice(args + " --help");
  EXPECT_EQ(r.code, 0) << r.output;
  std::vector<std::string> names;
  std::istringstream lines(r.output.substr(std::min(r.output.find("Subcommands:"), r.output.size())));
  std::string line;
  const std::regex entry(R"(^  ([a-z][a-z-]*) )");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, entry)) names.push_back(m[1]);
  }
  return names;
}

TEST(CliUsageTest, MainUsageCommentListsEveryCommandAndSubcommand) {
  // The comment block at the top of cli/main.cc.
  std::ifstream in(std::string(DICE_SOURCE_DIR) + "/cli/main.cc");
  std::string usage, line;
  while (std::getline(in, line) && line.rfind("//", 0) == 0) usage += line + "\n";
  const std::vector<std::string> commands = HelpSubcommands("");
  ASSERT_GE(commands.size(), 9u) << "expected tune, run, profile, warmup, cache, tokenize, generate, train, judge";
  for (const std::string& c : commands) {
    EXPECT_TRUE(std::regex_search(usage, std::regex("//   dice " + c + " "))) << "dice " << c << " missing:\n" << usage;
  }
  for (const std::string& group : {std::string("cache"), std::string("train")}) {
    std::string group_lines;  // the usage lines of `dice <group>`
    std::istringstream ul(usage);
    while (std::getline(ul, line)) {
      if (line.find("dice " + group + " ") != std::string::npos) group_lines += line + "\n";
    }
    const std::vector<std::string> subs = HelpSubcommands(group);
    EXPECT_GE(subs.size(), 6u) << group;
    for (const std::string& sub : subs) {
      EXPECT_TRUE(std::regex_search(group_lines, std::regex("\\b" + sub + "\\b")))
          << "dice " << group << " " << sub << " missing:\n" << group_lines;
    }
  }
}

// Every runnable command as typed after `dice`: "tune", ..., "cache ls", "train sft", ...
std::vector<std::string> EveryCommand() {
  std::vector<std::string> commands;
  for (const std::string& c : HelpSubcommands("")) {
    const std::vector<std::string> subs = (c == "cache" || c == "train") ? HelpSubcommands(c) : std::vector<std::string>{};
    if (subs.empty()) commands.push_back(c);
    for (const std::string& sub : subs) commands.push_back(c + " " + sub);
  }
  return commands;
}

// Every command's `--help` shows the default of each option that has one
// (main.cc captures them all: always_capture_default): a numeric option's
// line reads `--reps INT:INT in [1 - 100000]=20`. A number without a shown
// default is one the user cannot learn without the docs.
TEST(CliHelpTest, EveryNumericOptionOfEveryCommandShowsItsDefault) {
  const std::vector<std::string> commands = EveryCommand();
  ASSERT_GE(commands.size(), 20u) << "expected tune, run, ..., cache ls, ..., train sft, ...";
  const std::regex numeric(R"(^\s+(-\w,)?--[a-z0-9-]+ (INT|UINT|FLOAT)\b)");
  int numeric_options = 0;
  for (const std::string& cmd : commands) {
    DiceResult r = RunDice(cmd + " --help");
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    std::istringstream lines(r.output);
    std::string line;
    while (std::getline(lines, line)) {
      if (!std::regex_search(line, numeric)) continue;
      ++numeric_options;
      EXPECT_NE(line.find('='), std::string::npos) << "dice " << cmd << ": no default shown on\n" << line;
    }
  }
  EXPECT_GE(numeric_options, 20);
  DiceResult tune = RunDice("tune --help");
  EXPECT_NE(tune.output.find("--reps INT:INT in [1 - 100000]=20"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("--budget-s FLOAT=60"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("--generator TEXT:{templates,dice,both}=templates"), std::string::npos) << tune.output;
}

// --log-level is an option of `dice` itself (it falls through to every
// command), so CLI11 lists it only in `dice --help`; every command's help
// names it in its footer, with DICE_LOG_LEVEL, groups (`dice cache`) and
// nested commands (`dice cache ls`) included (issue 20).
TEST(CliHelpTest, EveryCommandsHelpNamesTheGlobalLogLevelOption) {
  DiceResult tune = RunDice("tune --help");
  EXPECT_EQ(tune.code, 0) << tune.output;
  EXPECT_NE(tune.output.find("--log-level"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("trace|debug|info|warn|error|off"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("$DICE_LOG_LEVEL"), std::string::npos) << tune.output;
  std::vector<std::string> commands = EveryCommand();
  commands.push_back("cache");
  commands.push_back("train");
  for (const std::string& cmd : commands) {
    DiceResult r = RunDice(cmd + " --help");
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("--log-level"), std::string::npos) << "dice " << cmd << " --help:\n" << r.output;
  }
  // Once in the top-level help (as an option), not twice (no footer there).
  DiceResult top = RunDice("--help");
  const size_t first = top.output.find("--log-level");
  ASSERT_NE(first, std::string::npos) << top.output;
  EXPECT_EQ(top.output.find("--log-level", first + 1), std::string::npos) << top.output;
  // The option still works after the command's name, as its help says.
  EXPECT_EQ(RunDice("cache ls --cache /nonexistent-dice-help-test --log-level off").code, 0);
}

// Built CUTLASS libraries follow --cache unless $DICE_BUILD_CACHE names
// their place ("off" included); without either the runtime's default
// ($DICE_CACHE_DIR/builds) stands.
TEST(BuildCacheDirTest, DiceBuildCacheWinsThenTheCacheFlagThenTheRuntimeDefault) {
  EXPECT_EQ(dice::cli::BuildCacheDirFor("/c", nullptr), "/c/builds");
  EXPECT_EQ(dice::cli::BuildCacheDirFor("/c", ""), "/c/builds") << "set but empty reads as unset";
  EXPECT_EQ(dice::cli::BuildCacheDirFor("/c", "/elsewhere"), "") << "DICE_BUILD_CACHE is left to speak";
  EXPECT_EQ(dice::cli::BuildCacheDirFor("/c", "off"), "");
  EXPECT_EQ(dice::cli::BuildCacheDirFor("", nullptr), "") << "no --cache: the runtime's default";
}

// End to end: a linear's CUTLASS candidate built by `dice tune --cache DIR`
// (DICE_BUILD_CACHE unset) lands in DIR/builds, beside DIR/kernels.db.
// One nvcc build (~30 s on 2 cores); skipped where nvcc is missing.
TEST(BuildCacheDirTest, TuneWithACacheFlagKeepsItsBuildsUnderThatDirectory) {
  const char* nvcc_env = std::getenv("DICE_NVCC");
  const std::string nvcc = nvcc_env != nullptr && *nvcc_env != '\0' ? nvcc_env : "/usr/local/cuda/bin/nvcc";
  if (::access(nvcc.c_str(), X_OK) != 0) GTEST_SKIP() << "no nvcc at " << nvcc << ": no CUTLASS candidate builds";
  dice::cli_test::ScratchDir dir("dice_build_dir");
  const std::string d = dir.path();
  std::ofstream(d + "/make.py") << "import sys, torch\n"
                                   "class M(torch.nn.Module):\n"
                                   "    def __init__(self):\n"
                                   "        super().__init__()\n"
                                   "        self.l = torch.nn.Linear(64, 64)\n"
                                   "    def forward(self, x):\n"
                                   "        return torch.relu(self.l(x))\n"
                                   "torch.jit.script(M()).save(sys.argv[1])\n";
  ASSERT_EQ(std::system(("python3 '" + d + "/make.py' '" + d + "/m.pt'").c_str()), 0);
  // DICE_BUILD_CACHE (ctest sets it for every test) is unset for the child only.
  const std::string tune = "env -u DICE_BUILD_CACHE " + std::string(DICE_CLI_PATH) + " tune " + d +
                           "/m.pt --input 32x64:f32 --budget-s 45 --max-candidates 1 --cache " + d + "/cache 2>&1";
  const std::string out = Shell(tune);
  const std::string listing = Shell("ls " + d + "/cache/builds 2>&1");
  EXPECT_NE(out.find("linear"), std::string::npos) << "a linear group was formed:\n" << out;
  EXPECT_NE(out.find("outputs match eager"), std::string::npos) << out;
  EXPECT_NE(listing.find(".so.meta"), std::string::npos) << "no build under --cache's builds/: " << listing << "\n"
                                                         << out;
}

// UseCacheDirForBuilds exports the choice for this process and the
// dice-worker processes it starts.
TEST(BuildCacheDirTest, TheCacheFlagIsExportedOnlyWhenDiceBuildCacheIsUnset) {
  const char* saved = std::getenv("DICE_BUILD_CACHE");
  const std::string keep = saved != nullptr ? saved : "";
  ::unsetenv("DICE_BUILD_CACHE");
  dice::cli::UseCacheDirForBuilds("/tmp/some cache");
  const char* now = std::getenv("DICE_BUILD_CACHE");
  EXPECT_STREQ(now, "/tmp/some cache/builds");
  ::setenv("DICE_BUILD_CACHE", "/mine", 1);
  dice::cli::UseCacheDirForBuilds("/tmp/other");
  EXPECT_STREQ(std::getenv("DICE_BUILD_CACHE"), "/mine");
  if (saved != nullptr) ::setenv("DICE_BUILD_CACHE", keep.c_str(), 1);
  else ::unsetenv("DICE_BUILD_CACHE");
}

}  // namespace
