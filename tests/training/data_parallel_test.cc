// Data-parallel training (issue 4 "Scale") on the CPU: the real `dice train
// sft` launched the way torchrun launches it (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT) as 2 processes on loopback, against 1 process
// with the same global batch; plus the errors a launch can hit.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/sdar_model.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/model_init.h"

extern char** environ;

namespace dice::training {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A TCP port that was free a moment ago (bind to 0, read it back, close).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Starts `dice args...` with the torchrun variables of this environment
// replaced by `dist` (an empty map: a plain single-process run), stdout and
// stderr to `log`. Returns the pid (-1 on failure).
pid_t SpawnDice(const std::vector<std::string>& args, const std::map<std::string, std::string>& dist,
                const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key == "MASTER_ADDR" ||
        key == "MASTER_PORT" || key == "OMP_NUM_THREADS") {
      continue;
    }
    env.push_back(kv);
  }
  env.push_back("OMP_NUM_THREADS=1");  // a 2-core CI machine: no oversubscription
  for (const auto& [k, v] : dist) env.push_back(k + "=" + v);
  std::vector<std::string> argv = {DICE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, DICE_CLI_PATH, &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// The exit code of `pid`, or -1 after killing it when it runs past `timeout_s`.
int WaitExit(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string DigestIn(const std::string& log) {
  std::smatch m;
  static const std::regex re("parameter digest ([0-9a-f]{16})");
  return std::regex_search(log, m, re) ? m[1].str() : "";
}

std::vector<double> CsvLosses(const std::string& path) {
  std::vector<double> losses;
  std::istringstream in(Slurp(path));
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const size_t a = line.find(',');
    const size_t b = line.find(',', a + 1);
    losses.push_back(std::stod(line.substr(a + 1, b - a - 1)));
  }
  return losses;
}

std::vector<torch::Tensor> Weights(const std::string& dir) {
  generator::SdarModelOptions mo;
  mo.dtype = torch::kFloat32;
  auto m = generator::SdarModel::Load(dir, mo);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  std::vector<torch::Tensor> out;
  if (!m.ok()) return out;
  for (auto& [name, t] : m->NamedWeights()) out.push_back(t.detach().clone());
  return out;
}

double MaxAbsDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  }
  return m;
}

class TrainingDataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dice_ddp_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    torch::set_num_threads(1);
    ASSERT_TRUE(
        InitRandomCheckpoint(generator::TinySdarConfig(260, 512, /*tie_word_embeddings=*/true), Path("init"), 11).ok());
    ASSERT_TRUE(WriteByteTokenizer(Path("init")).ok());
    WriteText(Path("templates.json"), R"({"system": "", "infilling": "R:{reference}\nP:{prefix}\nS:{suffix}", )"
                                      R"("end_to_end": "R:{reference}"})");
    // Six infilling examples of different lengths (so padding differs between
    // a batch of 4 and the ranks' batches of 2).
    const char* exprs[] = {"v > 0.f ? v : 0.f", "-v", "v * v", "2.f * v", "v * v * v + 1.f", "v / (1.f + fabsf(v))"};
    std::string data;
    for (int i = 0; i < 6; ++i) {
      CukeExample e;
      e.id = "corpus:" + std::to_string(i);
      e.kind = "infill";
      e.level = 1;
      e.difficulty = "single_op";
      e.source = "corpus:test";
      e.reference = "def forward(self, x):\n    return f" + std::to_string(i) + "(x)\n";
      e.prefix = "";
      e.middle = std::string("__global__ void k(const float* x, float* y, int n) {\n  int i = blockIdx.x * ") +
                 "blockDim.x + threadIdx.x;\n  if (i < n) { float v = x[i]; y[i] = " + exprs[i] + "; }\n}\n";
      e.suffix = "y = k(x)";
      e.split = "train";
      data += e.ToJsonLine() + "\n";
    }
    WriteText(Path("data.jsonl"), data);
  }
  // rm -rf: LibTorch's exported std::filesystem::remove_all crashes when interposed.
  static void TearDownTestSuite() { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }
  static std::vector<std::string> Sft(const std::string& out, int batch, const std::string& data = "") {
    return {"train", "sft", "--model", Path("init"), "--data", data.empty() ? Path("data.jsonl") : data,
            "--templates", Path("templates.json"), "--out", Path(out), "--steps", "2", "--warmup-steps", "0",
            "--lr", "1e-3", "--seed", "3", "--max-length", "256", "--batch-size", std::to_string(batch)};
  }
  static std::map<std::string, std::string> Rank(int rank, int port) {
    return {{"WORLD_SIZE", "2"}, {"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)},
            {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  }
  static std::string dir_;
};
std::string TrainingDataParallel::dir_;

TEST_F(TrainingDataParallel, TwoRanksMatchOneRankWithTheGlobalBatch) {
  // 1 process, batch 4; 1 process, batch 2 (a different run: shows the
  // comparison below can tell runs apart); 2 ranks, batch 2 each.
  const pid_t single = SpawnDice(Sft("single", 4), {}, Path("single.log"));
  ASSERT_GT(single, 0);
  ASSERT_EQ(WaitExit(single, 60), 0) << Slurp(Path("single.log"));
  const pid_t half = SpawnDice(Sft("half", 2), {}, Path("half.log"));
  ASSERT_GT(half, 0);
  ASSERT_EQ(WaitExit(half, 60), 0) << Slurp(Path("half.log"));
  const int port = FreePort();
  ASSERT_GT(port, 0);
  // Each rank gets its own --out only so that the test can see who wrote what.
  const pid_t r0 = SpawnDice(Sft("dp0", 2), Rank(0, port), Path("rank0.log"));
  const pid_t r1 = SpawnDice(Sft("dp1", 2), Rank(1, port), Path("rank1.log"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  const int rc1 = WaitExit(r1, 90), rc0 = WaitExit(r0, 90);
  const std::string log0 = Slurp(Path("rank0.log")), log1 = Slurp(Path("rank1.log"));
  ASSERT_EQ(rc0, 0) << log0;
  ASSERT_EQ(rc1, 0) << log1;
  std::printf("rank 0:\n%s\nrank 1:\n%s\n", log0.c_str(), log1.c_str());

  // (a) both ranks end with bit-identical parameters: the digests the ranks
  // printed agree, and equal the digest of the checkpoint rank 0 wrote.
  const std::string d0 = DigestIn(log0), d1 = DigestIn(log1);
  ASSERT_FALSE(d0.empty()) << log0;
  EXPECT_EQ(d0, d1);
  const auto dp = Weights(Path("dp0"));
  EXPECT_EQ(ParameterDigest(dp), d0);

  // (b) 2 ranks x batch 2 == 1 rank x batch 4 after two steps, within float
  // tolerance (only the summation order differs), and so is the logged loss.
  const auto init = Weights(Path("init")), one = Weights(Path("single")), halfw = Weights(Path("half"));
  const double moved = MaxAbsDiff(one, init), diff = MaxAbsDiff(dp, one), other = MaxAbsDiff(halfw, one);
  std::printf("max |w| change from init %.3g; 2-rank vs 1-rank %.3g; batch-2 run vs batch-4 run %.3g\n", moved, diff,
              other);
  EXPECT_GT(moved, 1e-4);
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(other, 100 * std::max(diff, 1e-7));
  const auto l1 = CsvLosses(Path("single/sft_log.csv")), l2 = CsvLosses(Path("dp0/sft_log.csv"));
  ASSERT_EQ(l1.size(), 2u);
  ASSERT_EQ(l2.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5 * std::max(1.0, std::abs(l1[i]))) << "step " << i + 1;

  // (c) only rank 0 wrote a checkpoint, the CSV and the progress lines.
  EXPECT_EQ(::access(Path("dp0/model.safetensors").c_str(), F_OK), 0);
  EXPECT_NE(::access(Path("dp1").c_str(), F_OK), 0) << "rank 1 wrote into its --out";
  EXPECT_NE(log0.find("sft step 2/2"), std::string::npos);
  EXPECT_EQ(log1.find("sft step"), std::string::npos);
}

TEST_F(TrainingDataParallel, RlTwoRanksShareTheTasksAndEndIdentical) {
  // One BiC-RL step over 2 tasks on 2 ranks: each rank decodes and rewards
  // one task (with its known-good answer injected, compiled by NVRTC).
  const int port = FreePort();
  ASSERT_GT(port, 0);
  auto rl = [&](const std::string& out) {
    return std::vector<std::string>{"train", "rl", "--model", Path("init"), "--tasks", Path("data.jsonl"),
                                    "--inject-known-good", Path("data.jsonl"), "--templates", Path("templates.json"),
                                    "--out", Path(out), "--stage", "infill", "--steps", "1", "--tasks-per-step", "2",
                                    "--group-size", "4", "--max-new-tokens", "16", "--lr", "1e-3"};
  };
  const pid_t r0 = SpawnDice(rl("rl0"), Rank(0, port), Path("rl0.log"));
  const pid_t r1 = SpawnDice(rl("rl1"), Rank(1, port), Path("rl1.log"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  const int rc1 = WaitExit(r1, 90), rc0 = WaitExit(r0, 90);
  const std::string log0 = Slurp(Path("rl0.log")), log1 = Slurp(Path("rl1.log"));
  ASSERT_EQ(rc0, 0) << log0;
  ASSERT_EQ(rc1, 0) << log1;
  std::printf("rank 0:\n%s\nrank 1:\n%s\n", log0.c_str(), log1.c_str());
  // The step's counts are over both ranks: 2 groups of 4, one injected each.
  EXPECT_NE(log0.find("injected 2 groups"), std::string::npos) << log0;
  EXPECT_NE(log0.find("/8 injected"), std::string::npos) << log0;
  const std::string d0 = DigestIn(log0), d1 = DigestIn(log1);
  ASSERT_FALSE(d0.empty()) << log0;
  EXPECT_EQ(d0, d1);
  const auto w = Weights(Path("rl0"));
  EXPECT_EQ(ParameterDigest(w), d0);
  EXPECT_GT(MaxAbsDiff(w, Weights(Path("init"))), 0.0);
  EXPECT_NE(::access(Path("rl1").c_str(), F_OK), 0) << "rank 1 wrote into its --out";
}

TEST_F(TrainingDataParallel, WorldSizeWithoutMasterAddrIsBadInput) {
  auto env = Rank(1, 29500);
  env.erase("MASTER_ADDR");
  const pid_t p = SpawnDice(Sft("no_addr", 2), env, Path("no_addr.log"));
  ASSERT_GT(p, 0);
  EXPECT_EQ(WaitExit(p, 60), 2);
  EXPECT_NE(Slurp(Path("no_addr.log")).find("MASTER_ADDR is not"), std::string::npos) << Slurp(Path("no_addr.log"));
}

TEST_F(TrainingDataParallel, RendezvousTimesOutWhenRankZeroNeverComes) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::vector<std::string> args = Sft("lonely", 2);
  args.insert(args.end(), {"--dist-timeout", "2"});
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t p = SpawnDice(args, Rank(1, port), Path("lonely.log"));
  ASSERT_GT(p, 0);
  EXPECT_EQ(WaitExit(p, 60), 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = Slurp(Path("lonely.log"));
  EXPECT_NE(log.find("rendezvous at 127.0.0.1:" + std::to_string(port) + " did not complete within 2 s"),
            std::string::npos)
      << log;
  EXPECT_LT(s, 30.0);
}

TEST_F(TrainingDataParallel, AFailingRankStopsTheOthersWithItsReason) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const pid_t r0 = SpawnDice(Sft("fail0", 2), Rank(0, port), Path("fail0.log"));
  const pid_t r1 = SpawnDice(Sft("fail1", 2, Path("missing.jsonl")), Rank(1, port), Path("fail1.log"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  const int rc1 = WaitExit(r1, 60), rc0 = WaitExit(r0, 60);
  const std::string log0 = Slurp(Path("fail0.log")), log1 = Slurp(Path("fail1.log"));
  EXPECT_NE(rc1, 0) << log1;
  EXPECT_EQ(rc0, 1) << log0;
  EXPECT_NE(log0.find("another rank stopped: rank 1 of 2"), std::string::npos) << log0;
  EXPECT_NE(log0.find("missing.jsonl"), std::string::npos) << log0;
}

TEST_F(TrainingDataParallel, ARankKilledMidRunIsNamedAfterTheCollectiveTimeout) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::vector<std::string> args = Sft("killed0", 2);
  ASSERT_EQ(args[10], "--steps");
  args[11] = "100000";  // runs until killed
  args.insert(args.end(), {"--collective-timeout", "3"});
  const pid_t r0 = SpawnDice(args, Rank(0, port), Path("killed0.log"));
  ASSERT_EQ(args[8], "--out");
  args[9] = Path("killed1");
  const pid_t r1 = SpawnDice(args, Rank(1, port), Path("killed1.log"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  // Wait until training runs (rank 0 printed a step), then kill rank 1 without a word.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Slurp(Path("killed0.log")).find("sft step 2/") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(r1, SIGKILL);
  EXPECT_EQ(WaitExit(r1, 10), 128 + SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc0 = WaitExit(r0, 60);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log0 = Slurp(Path("killed0.log"));
  EXPECT_EQ(rc0, 1) << log0;
  EXPECT_NE(log0.find("rank(s) 1 did not take part within 3 s (died or stuck)"), std::string::npos) << log0;
  EXPECT_LT(s, 30.0);
}

TEST(TrainingDataParallelShards, DisjointAndCovering) {
  for (int64_t count : {0, 1, 5, 8}) {
    for (int world : {1, 2, 3}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto [b, e] = ShardRange(count, r, world);
        EXPECT_EQ(b, next) << count << " items, rank " << r << " of " << world;
        EXPECT_LE(e - b, (count + world - 1) / world);
        next = e;
      }
      EXPECT_EQ(next, count);
    }
  }
}

}  // namespace
}  // namespace dice::training
