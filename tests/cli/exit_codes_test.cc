// The `dice` tool's exit codes and one-line messages (docs/CLI.md, issue 20
// item 6 and 8), run as a user would: every malformed --input is exit 2 with
// one line naming the flag (no TorchScript traceback); `dice judge` without a
// GPU judges on the CPU and says so, and exits 3 when a GPU is demanded;
// `dice cache pull` counts what it refused and why; a dead server is named
// with its URL and the cause; `dice cache ls` on a missing directory says it
// is empty and creates nothing. The models are written by python3's torch
// (this file includes no torch header).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "run_dice.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"

namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Lines of `text` that contain `needle`.
int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    n += text.substr(begin, end - begin).find(needle) != std::string::npos;
    begin = end + 1;
  }
  return n;
}

// Expects exit 2 and exactly one error line that names --input, with no
// TorchScript traceback.
void ExpectOneLineBadInput(const DiceResult& r, const std::string& what) {
  EXPECT_EQ(r.code, 2) << what << "\n" << r.output;
  EXPECT_EQ(CountLines(r.output, "dice: error"), 1) << what << "\n" << r.output;
  EXPECT_NE(r.output.find("dice: error: --input"), std::string::npos) << what << "\n" << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << what << "\n" << r.output;
  EXPECT_EQ(r.output.find("<--- HERE"), std::string::npos) << what << "\n" << r.output;
}

class InputExitCodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("dice_exit_codes");
    // mm.pt takes a matrix (torch.mm); ew.pt any shape; int.pt a tensor and an int.
    std::ofstream(dir_->path() + "/make.py")
        << "import sys, torch\n"
           "class Mm(torch.nn.Module):\n"
           "    def __init__(self):\n"
           "        super().__init__()\n"
           "        self.w = torch.nn.Parameter(torch.randn(8, 8))\n"
           "    def forward(self, x):\n"
           "        return torch.relu(torch.mm(x, self.w)) + 1.0\n"
           "class Ew(torch.nn.Module):\n"
           "    def forward(self, x):\n"
           "        return torch.relu(x * 2.0) + 1.0\n"
           "class WithInt(torch.nn.Module):\n"
           "    def forward(self, x, n: int):\n"
           "        return x * n\n"
           "d = sys.argv[1]\n"
           "torch.jit.script(Mm()).save(d + '/mm.pt')\n"
           "torch.jit.script(Ew()).save(d + '/ew.pt')\n"
           "torch.jit.script(WithInt()).save(d + '/int.pt')\n"
           "class NotSelf(torch.nn.Module):\n"
           "    def forward(s, x):\n"
           "        return torch.relu(x)\n"
           "torch.jit.script(NotSelf()).save(d + '/not_self.pt')\n";
    ASSERT_EQ(std::system(("python3 '" + dir_->path() + "/make.py' '" + dir_->path() + "'").c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Model(const std::string& name) { return dir_->path() + "/" + name; }
  static std::string Cache() { return " --cache " + dir_->path() + "/cache"; }
  static ScratchDir* dir_;
};
ScratchDir* InputExitCodeTest::dir_ = nullptr;

TEST_F(InputExitCodeTest, MalformedSpecsExitTwoWithOneLineNamingTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"99999999999x99999999999:f32", "overflow int64"},
      {"0x8:f32", "size 0 in dimension 0; every size must be at least 1"},
      {"8x0:f32", "size 0 in dimension 1"},
      {"-1x8:f32", "size -1 in dimension 0 is negative; every size must be at least 1"},
      {"8x:f32", "dimension 1 is empty"},
      {"8X8:f32", "dimension '8X8' is not a non-negative integer (sizes are separated by one lower-case 'x'"},
      {"99999999999999999999x8:f32", "size 99999999999999999999 in dimension 0 overflows int64"},
      {"8x8:f33", "unknown dtype 'f33'"},
      {"8x8", "has no ':dtype'"},
      {"garbage", "has no ':dtype'"},
  };
  for (const auto& [spec, why] : cases) {
    DiceResult r = RunDice("run " + Model("ew.pt") + " --input " + spec + Cache());
    ExpectOneLineBadInput(r, spec);
    EXPECT_NE(r.output.find("--input '" + spec + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  }
}

TEST_F(InputExitCodeTest, RankOrDtypeTheModelRejectsIsOneLineForEveryCommand) {
  for (const std::string cmd : {"tune", "run", "profile"}) {
    DiceResult rank = RunDice(cmd + " " + Model("mm.pt") + " --input 8x8x8:f32" + Cache());
    ExpectOneLineBadInput(rank, cmd + " rank");
    EXPECT_NE(rank.output.find("--input '8x8x8:f32': the model does not run on these inputs: "), std::string::npos)
        << rank.output;
    EXPECT_NE(rank.output.find("matrix"), std::string::npos) << "PyTorch's cause is kept:\n" << rank.output;
  }
  DiceResult dtype = RunDice("run " + Model("mm.pt") + " --input 8x8:f16" + Cache());
  ExpectOneLineBadInput(dtype, "dtype");
  DiceResult warmup = RunDice("warmup " + Model("mm.pt") + " --input 8x8x8:f32" + Cache());
  ExpectOneLineBadInput(warmup, "warmup rank");
  EXPECT_NE(warmup.output.find("--input '8x8x8:f32'"), std::string::npos) << warmup.output;
}

// A command rejected for its --input (bad syntax, a rank or dtype the model
// refuses) exits 2 before the cache is opened: the --cache directory it
// named is not created, nor a kernels.db in it.
TEST_F(InputExitCodeTest, ARejectedCommandCreatesNoCacheDirectory) {
  const std::pair<std::string, std::string> cases[] = {
      {"tune", " --input 8x:f32"},       // syntax
      {"tune", " --input 8x8x8:f32"},    // rank
      {"tune", " --input 8x8:f16"},      // dtype: the first forward fails
      {"run", " --input 8x8:f16"},
      {"warmup", " --input 8x8x8:f32"},
      {"warmup", " --input 8x8:f16"},
  };
  for (const auto& [cmd, input] : cases) {
    ScratchDir dir("dice_no_cache");
    const std::string cache = dir.path() + "/fresh";
    DiceResult r = RunDice(cmd + " " + Model("mm.pt") + input + " --cache " + cache);
    ExpectOneLineBadInput(r, cmd + input);
    EXPECT_FALSE(Exists(cache)) << cmd << input << " created " << cache << "\n" << r.output;
    EXPECT_FALSE(Exists(cache + "/kernels.db")) << cmd << input;
  }
}

TEST_F(InputExitCodeTest, ForwardsFirstParameterIsTheModuleWhateverItIsNamed) {
  DiceResult r = RunDice("run " + Model("not_self.pt") + " --input 8x8:f32" + Cache());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("the model does not run on these inputs"), std::string::npos) << r.output;
}

TEST_F(InputExitCodeTest, InputsThatDoNotMatchForwardsSignatureAreCaughtBeforeRunning) {
  DiceResult count = RunDice("run " + Model("ew.pt") + " --input 8x8:f32 --input 8:f32" + Cache());
  ExpectOneLineBadInput(count, "count");
  EXPECT_NE(count.output.find("forward(x) takes 1 argument(s), 2 input spec(s) given"), std::string::npos) << count.output;
  DiceResult non_tensor = RunDice("run " + Model("int.pt") + " --input 8x8:f32 --input 8:f32" + Cache());
  ExpectOneLineBadInput(non_tensor, "int argument");
  EXPECT_NE(non_tensor.output.find("'n' is int"), std::string::npos) << non_tensor.output;
  DiceResult warmup = RunDice("warmup " + Model("ew.pt") + " --input 8x8:f32,8:f32" + Cache());
  ExpectOneLineBadInput(warmup, "warmup count");
  EXPECT_EQ(warmup.output.find("shard 0/1 takes"), std::string::npos) << "checked before any set is tuned:\n"
                                                                      << warmup.output;
}

// `dice tune` on a machine without a GPU: a bad --input is the only line
// printed (the compile-only notice comes after the inputs are checked), and
// a malformed one is exit 2 even with --require-gpu (exit 3 is for a good
// command on the wrong machine).
TEST_F(InputExitCodeTest, TuneWithoutAGpuShowsABadInputAloneBeforeAnyNotice) {
  if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: this checks the machine without one";
  const std::pair<std::string, std::string> cases[] = {
      {Model("mm.pt") + " --input 8x8x8:f32", "rank"},
      {Model("mm.pt") + " --input 99999999999x99999999999:f32", "overflow"},
      {Model("mm.pt") + " --input garbage", "garbage"},
      {Model("ew.pt") + " --input 8x8:f32 --input 8:f32", "count"},
      {Model("ew.pt") + " --input 100000x100000x100000:f32", "allocation"},
  };
  for (const auto& [args, what] : cases) {
    DiceResult r = RunDice("tune " + args + Cache());
    ExpectOneLineBadInput(r, what);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << what << ": one line only\n" << r.output;
    EXPECT_EQ(r.output.find("no CUDA device present"), std::string::npos) << what << "\n" << r.output;
    EXPECT_EQ(r.output.find("[enforce fail"), std::string::npos) << what << "\n" << r.output;
  }
  DiceResult strict = RunDice("tune " + Model("ew.pt") + " --input 8x8 --require-gpu" + Cache());
  ExpectOneLineBadInput(strict, "--require-gpu with a malformed --input");
  DiceResult no_gpu = RunDice("tune " + Model("ew.pt") + " --input 8x8:f32 --require-gpu" + Cache());
  EXPECT_EQ(no_gpu.code, 3) << no_gpu.output;
  DiceResult fine = RunDice("tune " + Model("ew.pt") + " --input 8x8:f32" + Cache());
  ASSERT_EQ(fine.code, 0) << fine.output;
  EXPECT_NE(fine.output.find("no CUDA device present"), std::string::npos) << "the notice still comes:\n" << fine.output;
}

TEST_F(InputExitCodeTest, UnknownMemoryFormatExitsTwoNamingTheFlagAndItsChoices) {
  DiceResult r = RunDice("tune " + Model("ew.pt") + " --input 8x8:f32 --memory-format sideways" + Cache());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-format"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("auto,contiguous,channels_last"), std::string::npos) << r.output;
}

TEST_F(InputExitCodeTest, AnAllocationFailureKeepsPyTorchsCauseWithoutItsSourceLocation) {
  DiceResult r = RunDice("run " + Model("ew.pt") + " --input 100000x100000x100000:f32" + Cache());
  ExpectOneLineBadInput(r, "allocation");
  EXPECT_NE(r.output.find("cannot allocate 4000000000000000 bytes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[enforce fail"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("allocate"), r.output.rfind("allocate")) << "PyTorch's own words follow:\n" << r.output;
}

class JudgeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dice::runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: these check the machine without one";
    std::ofstream(dir_.path() + "/ref.py") << "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                                              "    def forward(self, x):\n        return torch.relu(x)\n\n"
                                              "def get_inputs():\n    return [torch.randn(16, 16)]\n\n"
                                              "def get_init_inputs():\n    return []\n";
    std::ofstream(dir_.path() + "/new.py") << "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                              "    def forward(self, x):\n        return x.clamp_min(0)\n";
  }
  std::string Programs() const {
    return " --trials 1 --reps 2 --reference " + dir_.path() + "/ref.py --candidate " + dir_.path() + "/new.py";
  }
  ScratchDir dir_{"dice_judge_device"};
};

TEST_F(JudgeDeviceTest, WithoutAGpuTheDefaultJudgesOnTheCpuAndSaysSo) {
  DiceResult r = RunDice("judge" + Programs());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no CUDA device present"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("judging on the CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"outcome\":\"correct\""), std::string::npos) << r.output;
}

TEST_F(JudgeDeviceTest, DemandingCudaWithoutAGpuExitsThree) {
  for (const std::string device : {"cuda", "cuda:1"}) {
    DiceResult r = RunDice("judge --device " + device + Programs());
    EXPECT_EQ(r.code, 3) << device << "\n" << r.output;
    EXPECT_NE(r.output.find("no CUDA device is present"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("\"outcome\""), std::string::npos) << "nothing was judged:\n" << r.output;
  }
  DiceResult bad = RunDice("judge --device tpu" + Programs());
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device 'tpu'"), std::string::npos) << bad.output;
}

TEST(CacheLsTest, MissingDirectoryIsReportedEmptyAndNotCreated) {
  ScratchDir dir("dice_ls_missing");
  const std::string missing = dir.path() + "/no/such/cache";
  DiceResult ls = RunDice("cache ls --cache " + missing);
  EXPECT_EQ(ls.code, 0) << ls.output;
  EXPECT_NE(ls.output.find("empty"), std::string::npos) << ls.output;
  EXPECT_NE(ls.output.find(missing), std::string::npos) << "it says where:\n" << ls.output;
  EXPECT_FALSE(Exists(dir.path() + "/no")) << "cache ls created the directory";
  DiceResult show = RunDice("cache show deadbeef --cache " + missing);
  EXPECT_EQ(show.code, 2) << show.output;
  EXPECT_NE(show.output.find("deadbeef"), std::string::npos) << show.output;
  EXPECT_FALSE(Exists(dir.path() + "/no")) << "cache show created the directory";
}

// The other commands that only read a cache (stats, gc, export, push) answer
// for a missing directory without creating it or a database in it.
TEST(CacheLsTest, ReadOnlyCacheCommandsDoNotCreateAMissingDirectory) {
  ScratchDir dir("dice_ro_missing");
  const std::string missing = dir.path() + "/no/such/cache";
  DiceResult stats = RunDice("cache stats --cache " + missing);
  EXPECT_EQ(stats.code, 0) << stats.output;
  EXPECT_NE(stats.output.find("entries:         0"), std::string::npos) << stats.output;
  EXPECT_NE(stats.output.find("does not exist"), std::string::npos) << "it says why:\n" << stats.output;
  DiceResult json = RunDice("cache stats --json --cache " + missing);
  EXPECT_EQ(json.code, 0) << json.output;
  EXPECT_NE(json.output.find("\"entries\": 0"), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"geomean_speedup\": null"), std::string::npos) << json.output;
  DiceResult gc = RunDice("cache gc --max-size 1GB --cache " + missing);
  EXPECT_EQ(gc.code, 0) << gc.output;
  EXPECT_NE(gc.output.find("removed 0"), std::string::npos) << gc.output;
  DiceResult exported = RunDice("cache export " + dir.path() + "/b.json --cache " + missing);
  EXPECT_EQ(exported.code, 2) << exported.output;
  EXPECT_NE(exported.output.find("no cache yet"), std::string::npos) << exported.output;
  DiceResult push = RunDice("cache push http://127.0.0.1:9 --cache " + missing);
  EXPECT_EQ(push.code, 0) << push.output;
  EXPECT_NE(push.output.find("pushed 0"), std::string::npos) << push.output;
  EXPECT_FALSE(Exists(dir.path() + "/no")) << "a read-only cache command created the directory";
  EXPECT_FALSE(Exists(dir.path() + "/b.json")) << "export wrote a bundle of nothing";
}

// 64 hex digits ending in n.
std::string Key(int n) {
  std::string k(64, 'a');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  return k;
}

dice::cache::WinnerRecord Record(int n, const std::string& arch, const std::string& versions) {
  dice::cache::WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "input %0 f32 rank=1\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[" + std::to_string(n + 1) + "]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/v" + std::to_string(n);
  r.candidate_hash = "c" + std::to_string(n);
  r.source = "__global__ void k" + std::to_string(n) + "() {}";
  r.cubin = std::string("\x7f" "ELF", 4) + std::to_string(n);
  r.launch_plan_json = R"({"grid":[1,1,1],"block":[32,1,1]})";
  r.baseline_us = 10;
  r.best_us = 5;
  r.speedup = 2;
  r.versions_json = versions;
  r.verified = true;
  return r;
}

TEST(CachePullTest, SaysHowManyEntriesItRefusedAndWhy) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "sqlite3 (Debian sqlite3) is missing";
  ScratchDir dir("dice_pull_refused");
  const std::string db = dir.path() + "/server.db";
  {
    auto store = dice::cache::Store::Open(db);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->PutWinner(Record(1, "sm_90", R"({"abi":1})")).ok());
    ASSERT_TRUE((*store)->PutWinner(Record(2, "sm_90", R"({"abi":1})")).ok());    // damaged below
    ASSERT_TRUE((*store)->PutWinner(Record(3, "sm_90", R"({"abi":999})")).ok());  // another runtime ABI
    ASSERT_TRUE((*store)->PutWinner(Record(4, "sm_80", R"({"abi":1})")).ok());    // not the --arch asked for
  }
  ASSERT_EQ(std::system(("sqlite3 '" + db + "' \"UPDATE winners SET source = 'tampered' WHERE task_key = '" + Key(2) +
                         "'\"").c_str()),
            0);
  dice::cache::CacheServer server;
  ASSERT_TRUE(server.Start(db, "127.0.0.1", 0, "").ok());
  DiceResult pull = RunDice("cache pull " + server.url() + " --arch sm_90 --cache " + dir.path() + "/local");
  server.Stop();
  EXPECT_EQ(pull.code, 0) << pull.output;
  EXPECT_NE(pull.output.find("1 stored"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("3 refused"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("1 content hash mismatch"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("1 runtime ABI version"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("1 for another arch"), std::string::npos) << pull.output;
  auto local = dice::cache::Store::Open(dice::cache::DatabasePath(dir.path() + "/local"));
  ASSERT_TRUE(local.ok());
  auto rows = (*local)->ListWinners();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].task_key, Key(1));
}

TEST(CachePullTest, ADeadServerIsNamedWithItsUrlAndTheCause) {
  dice::cache::CacheServer server;
  ScratchDir dir("dice_pull_dead");
  ASSERT_TRUE(server.Start(dir.path() + "/server.db", "127.0.0.1", 0, "t").ok());
  const std::string url = server.url();
  server.Stop();
  const std::string local = dir.path() + "/local";
  for (const std::string cmd : {"pull", "push"}) {
    if (cmd == "push") {  // push reads a local cache (none: "pushed 0" without asking the server)
      ASSERT_EQ(::mkdir(local.c_str(), 0755), 0);
      ASSERT_TRUE(dice::cache::Store::Open(dice::cache::DatabasePath(local)).ok());
    }
    DiceResult r = RunDice("cache " + cmd + " " + url + " --timeout-ms 500 --cache " + local);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("cache server " + url + " is not reachable (no connection: nothing listens there"),
              std::string::npos) << "the URL and the cause:\n" << r.output;
    EXPECT_NE(r.output.find(" (httplib: Connection)\n"), std::string::npos) << "httplib's word, bracketed:\n" << r.output;
    if (cmd == "pull") {
      struct stat st {};
      EXPECT_NE(::stat(local.c_str(), &st), 0) << "a failed pull created the local cache " << local;
    }
  }
}

TEST(CacheImportTest, AMissingBundleIsBadInputAndCreatesNoCache) {
  ScratchDir dir("dice_import_missing");
  const std::string local = dir.path() + "/local";
  DiceResult r = RunDice("cache import " + dir.path() + "/nope.bundle --cache " + local);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot read bundle " + dir.path() + "/nope.bundle: No such file"), std::string::npos)
      << r.output;
  struct stat st {};
  EXPECT_NE(::stat(local.c_str(), &st), 0) << "the import created the local cache " << local;
}

}  // namespace

namespace {

TEST(RemoteCacheUrlTest, AMalformedDiceRemoteCacheExitsTwoAtStartAndMasksThePassword) {
  ScratchDir dir("dice_remote_url");
  ::setenv("DICE_REMOTE_CACHE", "redis://alice:s3cret@cache-1:99999", 1);
  DiceResult r = RunDice("cache ls --cache " + dir.path());
  ::unsetenv("DICE_REMOTE_CACHE");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("DICE_REMOTE_CACHE"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("s3cret"), std::string::npos) << r.output;
  // A well-formed URL is no start-up error (the server is only asked on a miss).
  ::setenv("DICE_REMOTE_CACHE", "http://127.0.0.1:1", 1);
  DiceResult ok = RunDice("cache ls --cache " + dir.path());
  ::unsetenv("DICE_REMOTE_CACHE");
  EXPECT_EQ(ok.code, 0) << ok.output;
}

// No error line leaks a StatusCode name ("dice: error: NotFound: ..."): it
// names the path and what was expected, with the documented exit code.
const std::regex& CodeNamePrefix() {
  static const std::regex r(
      "(error|dice train|dice judge): (InvalidArgument|NotFound|Unsupported|IoError|Corrupt|CompileError|"
      "CudaError|NoDevice|Timeout|Crashed|VerifyFailed|Internal): ");
  return r;
}

TEST(ErrorLineTest, ReportOnADirectoryThatIsNotACacheNamesItAndWhatWasExpected) {
  ScratchDir dir("dice_report_notcache");
  DiceResult r = RunDice("report " + dir.path() + " -o " + dir.path() + "/r.html");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(CountLines(r.output, "dice: error"), 1) << r.output;
  EXPECT_NE(r.output.find("dice: error: '" + dir.path() + "' is a directory but not a kernel cache (no kernels.db in "
                          "it); expected a cache directory"), std::string::npos) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, CodeNamePrefix())) << r.output;
  EXPECT_FALSE(Exists(dir.path() + "/kernels.db")) << "report created a cache";
  EXPECT_FALSE(Exists(dir.path() + "/r.html"));
}

TEST(ErrorLineTest, NoCommandPrefixesItsErrorWithAStatusCodeName) {
  ScratchDir dir("dice_code_names");
  const std::string d = dir.path();
  std::ofstream(d + "/not_a_db") << "this is not an SQLite database, it is long enough to be read as one\n";
  std::ofstream(d + "/junk.json") << "{ not json";
  ASSERT_EQ(::mkdir((d + "/cache").c_str(), 0755), 0);
  std::ofstream(d + "/cache/kernels.db") << "not an SQLite database either, but long enough to be opened\n";
  const std::pair<std::string, int> cases[] = {
      {"report " + d + "/cache -o " + d + "/r.html", 2},        // a corrupt cache
      {"cache ls --cache " + d + "/cache", 2},
      {"cache show abc --cache " + d + "/cache", 2},
      {"cache stats --cache " + d + "/cache", 2},
      {"cache export " + d + "/b.json --cache " + d + "/cache", 2},
      {"cache import " + d + "/junk.json --cache " + d + "/c2", 2},
      {"cache serve --db " + d + "/not_a_db --listen 127.0.0.1:0", 2},
      {"tokenize --model " + d + "/no_such_model < /dev/null", 2},
  };
  for (const auto& [args, code] : cases) {
    DiceResult r = RunDice(args);
    EXPECT_EQ(r.code, code) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("dice: error: "), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(std::regex_search(r.output, CodeNamePrefix())) << args << "\n" << r.output;
  }
}

}  // namespace
