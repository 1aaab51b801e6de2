// `dice cache push | pull | export | import | gc | stats` run as a user would
// (cli/cache_share.h), against a real cache server on loopback; and the real
// `dice cache serve` process killed (SIGKILL) while a client is writing: the
// database is intact on restart and every acknowledged write is in it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_dice.h"
#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"

namespace {

using dice::cache::CacheClient;
using dice::cache::CacheServer;
using dice::cache::Store;
using dice::cache::WinnerRecord;

constexpr char kToken[] = "cli-share-token";

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'c';
  return k;
}

WinnerRecord Record(int n, double speedup, const std::string& arch = "sm_90", size_t source_bytes = 64) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "input %0 f32 rank=1\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[" + std::to_string(n + 1) + "]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/v" + std::to_string(n);
  r.candidate_hash = "c" + std::to_string(n);
  r.source = std::string(source_bytes, static_cast<char>('a' + n % 26));
  r.cubin = std::string("\x7f" "ELF\0", 5) + std::to_string(n);
  r.launch_plan_json = R"({"grid":[1,1,1],"block":[32,1,1]})";
  r.baseline_us = 10;
  r.best_us = 10 / speedup;
  r.speedup = speedup;
  r.versions_json = "{}";
  r.created_at = 1700000000 + n;
  return r;
}

class CacheShareCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // mkdtemp / rm -rf (not std::filesystem::remove_all: LibTorch's copy crashes when interposed).
    char tmpl[] = "/tmp/dice_share_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/token") << kToken << "\n";
    std::ofstream(dir_ + "/wrong-token") << "not-the-token\n";
  }
  void TearDown() override {
    server_.Stop();
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }
  void StartServer() {
    auto st = server_.Start(dir_ + "/server.db", "127.0.0.1", 0, kToken);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::unique_ptr<Store> Open(const std::string& cache) {
    auto s = Store::Open(dice::cache::DatabasePath(dir_ + "/" + cache));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string CacheArg(const std::string& cache) const { return "--cache " + dir_ + "/" + cache; }

  std::string dir_;
  CacheServer server_;
};

TEST_F(CacheShareCliTest, PushThenPullCarriesVerifiedWinnersAndMarksThemUnverified) {
  StartServer();
  {
    auto a = Open("a");
    ASSERT_TRUE(a);
    ASSERT_TRUE(*a->PutWinner(Record(1, 2.0, "sm_90")));
    ASSERT_TRUE(*a->PutWinner(Record(2, 3.0, "sm_80")));
    WinnerRecord pulled = Record(3, 5.0);
    pulled.verified = false;  // not proven here: must not travel on
    ASSERT_TRUE(*a->PutWinner(pulled));
  }
  DiceResult push = RunDice("cache push " + server_.url() + " --token-file " + dir_ + "/token " + CacheArg("a"));
  ASSERT_EQ(push.code, 0) << push.output;
  EXPECT_NE(push.output.find("2 pushed"), std::string::npos) << push.output;
  EXPECT_NE(push.output.find("1 unverified left out"), std::string::npos) << push.output;
  {  // progress (issue 20 item 1): the first and the last count, in order, before the summary
    const size_t first = push.output.find("dice: push: done 0/3 entries (");
    const size_t last = push.output.find("dice: push: done 3/3 entries (");
    const size_t summary = push.output.find("considered:");
    EXPECT_TRUE(first != std::string::npos && last != std::string::npos && first < last && last < summary)
        << push.output;
  }
  DiceResult again = RunDice("cache push " + server_.url() + " --token-file " + dir_ + "/token " + CacheArg("a"));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("0 pushed, 2 kept"), std::string::npos) << again.output;

  DiceResult pull = RunDice("cache pull " + server_.url() + " --arch sm_90 " + CacheArg("b"));
  ASSERT_EQ(pull.code, 0) << pull.output;
  EXPECT_NE(pull.output.find("1 stored"), std::string::npos) << pull.output;
  {
    const size_t fetching = pull.output.find("dice: pull: fetching 1 entry from " + server_.url());
    const size_t first = pull.output.find("dice: pull: done 0/1 entries (");
    const size_t last = pull.output.find("dice: pull: done 1/1 entries (");
    const size_t summary = pull.output.find("on the server:");
    EXPECT_TRUE(fetching != std::string::npos && first != std::string::npos && last != std::string::npos &&
                fetching < first && first < last && last < summary)
        << pull.output;
  }
  EXPECT_NE(pull.output.find("re-verified"), std::string::npos) << pull.output;
  {
    auto b = Open("b");
    ASSERT_TRUE(b);
    auto got = b->GetWinner(Key(1));
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((**got).cubin, Record(1, 2.0).cubin);
    EXPECT_FALSE((**got).verified);
    EXPECT_EQ((**got).pulled_from, server_.url());
    EXPECT_FALSE(b->GetWinner(Key(2))->has_value()) << "--arch sm_90 left sm_80 out";
    EXPECT_FALSE(b->GetWinner(Key(3))->has_value());
  }
  DiceResult stats = RunDice("cache stats --json " + CacheArg("b"));
  ASSERT_EQ(stats.code, 0) << stats.output;
  auto j = nlohmann::json::parse(stats.output);
  EXPECT_EQ(j["entries"], 1);
  EXPECT_EQ(j["unverified"], 1);
  EXPECT_EQ(j["archs"]["sm_90"], 1);

  DiceResult trusted = RunDice("cache pull " + server_.url() + " --trust-remote " + CacheArg("c"));
  ASSERT_EQ(trusted.code, 0) << trusted.output;
  auto c = Open("c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->ListWinners()->size(), 2u);
  EXPECT_TRUE((*c->GetWinner(Key(2)))->verified);
}

TEST_F(CacheShareCliTest, PushWithoutOrWithWrongTokenIsRefusedAndTheServerGetsNothing) {
  StartServer();
  {
    auto a = Open("a");
    ASSERT_TRUE(a);
    ASSERT_TRUE(*a->PutWinner(Record(1, 2.0)));
  }
  ::unsetenv("DICE_REMOTE_TOKEN");
  DiceResult none = RunDice("cache push " + server_.url() + " " + CacheArg("a"));
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("401"), std::string::npos) << none.output;
  DiceResult wrong = RunDice("cache push " + server_.url() + " --token-file " + dir_ + "/wrong-token " + CacheArg("a"));
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("403"), std::string::npos) << wrong.output;
  CacheClient client(server_.url(), "");
  auto list = client.List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_TRUE(list->empty());
  DiceResult bad_url = RunDice("cache push not-a-url " + CacheArg("a"));
  EXPECT_EQ(bad_url.code, 2) << bad_url.output;
  EXPECT_NE(bad_url.output.find("not-a-url"), std::string::npos) << bad_url.output;
}

TEST_F(CacheShareCliTest, PullFromAServerThatIsDownIsARuntimeFailure) {
  StartServer();
  const std::string url = server_.url();
  server_.Stop();
  DiceResult pull = RunDice("cache pull " + url + " --timeout-ms 500 " + CacheArg("b"));
  EXPECT_EQ(pull.code, 1) << pull.output;
  EXPECT_NE(pull.output.find(url), std::string::npos) << pull.output;
}

// A loopback HTTP server that is not a dice cache: every request gets 404
// with an empty body (a web server or proxy at a mistyped URL).
class NotFoundServer {
 public:
  NotFoundServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listening socket was shut down
        char buf[4096];
        (void)::recv(c, buf, sizeof(buf), 0);
        const char answer[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        (void)::send(c, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~NotFoundServer() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(CacheShareCliTest, PullFromAServerThatIsNotADiceCacheSaysSo) {
  NotFoundServer other;
  ASSERT_GT(other.port(), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(other.port());
  DiceResult pull = RunDice("cache pull " + url + " --timeout-ms 2000 " + CacheArg("b"));
  EXPECT_EQ(pull.code, 2) << pull.output;
  EXPECT_NE(pull.output.find("HTTP 404"), std::string::npos) << pull.output;
  EXPECT_NE(pull.output.find("not as a dice cache server"), std::string::npos) << pull.output;
}

TEST_F(CacheShareCliTest, ExportImportRoundTripAndABadBundleChangesNothing) {
  {
    auto a = Open("a");
    ASSERT_TRUE(a);
    ASSERT_TRUE(*a->PutWinner(Record(1, 2.0)));
    ASSERT_TRUE(*a->PutWinner(Record(2, 4.0, "sm_80")));
  }
  const std::string bundle = dir_ + "/kernels.bundle";
  DiceResult ex = RunDice("cache export " + bundle + " " + CacheArg("a"));
  ASSERT_EQ(ex.code, 0) << ex.output;
  EXPECT_NE(ex.output.find("exported 2 winner(s)"), std::string::npos) << ex.output;
  DiceResult im = RunDice("cache import " + bundle + " --arch sm_80 " + CacheArg("b"));
  ASSERT_EQ(im.code, 0) << im.output;
  EXPECT_NE(im.output.find("1 stored"), std::string::npos) << im.output;
  {
    auto b = Open("b");
    ASSERT_TRUE(b);
    auto got = b->GetWinner(Key(2));
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_FALSE((**got).verified);
    EXPECT_EQ((**got).cubin, Record(2, 4.0).cubin);
    EXPECT_EQ(b->ListWinners()->size(), 1u);
  }
  std::ofstream(dir_ + "/garbage.bundle") << "{\"format\": \"dice-kernel-bundle\", \"format_version\": 99}";
  DiceResult bad = RunDice("cache import " + dir_ + "/garbage.bundle " + CacheArg("b"));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("format_version 99"), std::string::npos) << bad.output;
  auto b = Open("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->ListWinners()->size(), 1u);
}

TEST_F(CacheShareCliTest, StatsOfAnEmptyCacheMeasureNothingNotZero) {
  ASSERT_TRUE(Open("empty"));
  DiceResult text = RunDice("cache stats " + CacheArg("empty"));
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("speedup:         - (no entry;"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("0.00x"), std::string::npos) << text.output;
  DiceResult json = RunDice("cache stats --json " + CacheArg("empty"));
  ASSERT_EQ(json.code, 0) << json.output;
  auto j = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.output;
  EXPECT_TRUE(j["geomean_speedup"].is_null()) << json.output;
  EXPECT_TRUE(j["total_speedup"].is_null()) << json.output;
}

TEST_F(CacheShareCliTest, GcBoundsTheCacheAndRejectsMalformedBounds) {
  {
    auto a = Open("a");
    ASSERT_TRUE(a);
    for (int n = 1; n <= 3; ++n) ASSERT_TRUE(*a->PutWinner(Record(n, 2.0, "sm_90", 1000)));
  }
  for (const std::string& args : {std::string("--max-size 2XB"), std::string("--older-than 30"),
                                  std::string("--max-size -5"), std::string("")}) {
    DiceResult bad = RunDice("cache gc " + args + " " + CacheArg("a"));
    EXPECT_EQ(bad.code, 2) << args << ": " << bad.output;
  }
  EXPECT_EQ(Open("a")->ListWinners()->size(), 3u) << "bad bounds removed something";
  DiceResult old = RunDice("cache gc --older-than 1d " + CacheArg("a"));  // every entry was created in 2023
  ASSERT_EQ(old.code, 0) << old.output;
  EXPECT_NE(old.output.find("removed 3 winner(s)"), std::string::npos) << old.output;
  {
    auto a = Open("a");
    for (int n = 1; n <= 3; ++n) ASSERT_TRUE(*a->PutWinner(Record(n, 2.0, "sm_90", 1000)));
  }
  DiceResult size = RunDice("cache gc --max-size 2KB " + CacheArg("a"));  // ~1.1 KB each: one fits
  ASSERT_EQ(size.code, 0) << size.output;
  EXPECT_NE(size.output.find("removed 2 winner(s)"), std::string::npos) << size.output;
  DiceResult stats = RunDice("cache stats " + CacheArg("a"));
  ASSERT_EQ(stats.code, 0) << stats.output;
  EXPECT_NE(stats.output.find("entries:         1 "), std::string::npos) << stats.output;
  EXPECT_NE(stats.output.find("geomean 2.00x"), std::string::npos) << stats.output;
}

// ------------------------------------------------------------------ kill -9

// Starts `dice cache serve` (fork + exec of the real binary) on an ephemeral
// port; returns its pid and fills `url` from its first line.
pid_t StartServeProcess(const std::string& db, const std::string& token_file, const std::string& log,
                        std::string* url) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execl(DICE_CLI_PATH, DICE_CLI_PATH, "cache", "serve", "--db", db.c_str(), "--listen", "127.0.0.1:0",
          "--token-file", token_file.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 200 && pid > 0; ++i) {
    usleep(50 * 1000);
    const std::string out = Slurp(log);
    const size_t at = out.find("http://");
    if (at != std::string::npos) {
      *url = out.substr(at, out.find(' ', at) - at);
      break;
    }
  }
  return pid;
}

TEST_F(CacheShareCliTest, ServerKilledMidPutLeavesAnIntactDatabaseWithEveryAcknowledgedWrite) {
  const std::string db = dir_ + "/served.db";
  std::string url;
  const pid_t pid = StartServeProcess(db, dir_ + "/token", dir_ + "/serve.log", &url);
  ASSERT_GT(pid, 0);
  ASSERT_FALSE(url.empty()) << Slurp(dir_ + "/serve.log");

  // A writer PUTs 1 MiB entries back to back; the server is killed while
  // it is busy with one of them.
  std::mutex mu;
  std::vector<std::string> acknowledged;
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    CacheClient client(url, kToken, std::chrono::milliseconds(3000));
    for (int n = 0; n < 10000 && !failed; ++n) {
      auto stored = client.Put(Record(n, 2.0, "sm_90", size_t{1} << 20));
      if (!stored.ok()) {
        failed = true;
        break;
      }
      std::lock_guard<std::mutex> lock(mu);
      acknowledged.push_back(Key(n));
    }
  });
  for (int i = 0; i < 400; ++i) {
    usleep(10 * 1000);
    std::lock_guard<std::mutex> lock(mu);
    if (acknowledged.size() >= 8) break;
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  writer.join();
  EXPECT_TRUE(failed) << "the writer should have seen the server die";
  ASSERT_GE(acknowledged.size(), 8u);

  {
    auto store = Store::Open(db);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const dice::Status integrity = (*store)->CheckIntegrity();
    EXPECT_TRUE(integrity.ok()) << integrity.ToString();
    for (const std::string& key : acknowledged) {
      auto rec = (*store)->GetWinner(key);  // content hash checked
      ASSERT_TRUE(rec.ok()) << rec.status().ToString();
      EXPECT_TRUE(rec->has_value()) << "acknowledged write lost: " << key;
    }
    auto all = (*store)->ListWinners();
    ASSERT_TRUE(all.ok());
    EXPECT_GE(all->size(), acknowledged.size());
    EXPECT_LE(all->size(), acknowledged.size() + 1);  // at most the one in flight
  }

  // The restarted server serves the same entries.
  std::string url2;
  const pid_t pid2 = StartServeProcess(db, dir_ + "/token", dir_ + "/serve2.log", &url2);
  ASSERT_GT(pid2, 0);
  ASSERT_FALSE(url2.empty()) << Slurp(dir_ + "/serve2.log");
  CacheClient client(url2, kToken);
  auto got = client.Get(acknowledged.front());
  EXPECT_TRUE(got.ok() && got->has_value()) << (got.ok() ? "absent" : got.status().ToString());
  auto fresh = client.Put(Record(99999, 3.0));
  EXPECT_TRUE(fresh.ok() && *fresh) << (fresh.ok() ? "not stored" : fresh.status().ToString());
  kill(pid2, SIGTERM);
  waitpid(pid2, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
