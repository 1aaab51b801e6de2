// The Redis remote-cache backend (redis_cache.h, remote_cache.h) against a
// real redis-server that each test starts on loopback (a free port, no
// persistence, in a temporary directory) and stops. Skipped, with the
// reason, where redis-server is not installed (scripts/test.sh installs it).
// Issue 20 item 7: round trip, pulled entries unverified, content hash and
// size limit checks, AUTH, masked passwords, the eviction-policy warning.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dice/cache/redis_cache.h"
#include "dice/cache/remote_cache.h"
#include "dice/cache/remote_url.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kPassword[] = "hunter2-redis-secret";

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'c';
  return k;
}

WinnerRecord MakeRecord(int n, double speedup, size_t cubin_bytes = 200) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "graph " + std::to_string(n);
  r.input_specs = "f32[64," + std::to_string(n + 1) + "]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/b256/v" + std::to_string(n);
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "extern \"C\" __global__ void k" + std::to_string(n) + "(float* y) {}";
  r.cubin = std::string("\x7f" "ELF\0\x01\x02", 7) + std::string(cubin_bytes, static_cast<char>(n));
  r.launch_plan_json = R"({"grid":[1,1,1],"block":[64,1,1]})";
  r.baseline_us = 100.0;
  r.best_us = 100.0 / speedup;
  r.speedup = speedup;
  r.versions_json = R"({"dice":"test"})";
  r.created_at = 1700000000 + n;
  return r;
}

// redis-server on PATH, or "" when it is not installed.
std::string FindRedisServer() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(begin, end - begin) + "/redis-server";
    if (end > begin && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return std::string();
}

// A TCP port nothing listens on right now (bound to port 0, then closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 0;
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One redis-server child process on 127.0.0.1, requiring kPassword.
class RedisServer {
 public:
  ~RedisServer() { Stop(); }

  // Starts `binary` in `dir` and waits (up to 10 s) until it answers PING.
  // Retries on another port when the chosen one was taken meanwhile.
  bool Start(const std::string& binary, const std::string& dir) {
    for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      if (port_ == 0) continue;
      const std::string log = dir + "/redis-" + std::to_string(port_) + ".log";
      std::vector<std::string> args{binary,        "--port",       std::to_string(port_), "--bind", "127.0.0.1",
                                    "--save",      "",             "--appendonly",        "no",     "--dir",
                                    dir,           "--daemonize",  "no",                  "--requirepass", kPassword,
                                    "--logfile",   log};
      const pid_t pid = ::fork();
      if (pid == 0) {
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(binary.c_str(), argv.data());
        ::_exit(127);
      }
      if (pid < 0) return false;
      pid_ = pid;
      if (!WaitReady()) Stop();
    }
    return pid_ > 0;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  int port() const { return port_; }
  std::string Url(const std::string& credentials = std::string(":") + kPassword, const std::string& path = "") const {
    return "redis://" + (credentials.empty() ? "" : credentials + "@") + "127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  bool WaitReady() {
    auto url = ParseRemoteUrl(Url());
    if (!url.ok()) return false;
    RedisCacheClient client(*url, "startup", std::chrono::milliseconds(500));
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited (port taken?)
        pid_ = 0;
        return false;
      }
      if (client.Ping().ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  pid_t pid_ = 0;
  int port_ = 0;
};

class RedisCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string binary = FindRedisServer();
    if (binary.empty()) {
      GTEST_SKIP() << "redis-server is not installed (Debian: apt-get install redis-server; scripts/test.sh "
                      "installs it as root)";
    }
    std::string tmpl = (fs::temp_directory_path() / "dice-redis-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(server_.Start(binary, dir_)) << "redis-server did not start; see " << dir_;
  }
  void TearDown() override {
    server_.Stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // A client for `url` (the fixture server's with its password by default).
  std::unique_ptr<RedisCacheClient> Client(const std::string& url, size_t max_entry_bytes = kDefaultMaxBodyBytes) {
    auto parsed = ParseRemoteUrl(url);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (!parsed.ok()) return nullptr;
    return std::make_unique<RedisCacheClient>(*parsed, MaskUrlCredentials(url), std::chrono::milliseconds(2000),
                                              max_entry_bytes);
  }
  std::unique_ptr<Store> OpenStore(const std::string& name) {
    auto s = Store::Open((fs::path(dir_) / name).string());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  RemoteCacheOptions Options(std::vector<std::string>* warnings) {
    RemoteCacheOptions o;
    o.url = server_.Url();
    o.timeout = std::chrono::milliseconds(2000);
    o.warn = [warnings](const std::string& text) { warnings->push_back(text); };
    return o;
  }

  RedisServer server_;
  std::string dir_;
};

TEST_F(RedisCacheTest, PushThenPullReturnsTheSameBytesAndTheFasterEntryStays) {
  auto client = Client(server_.Url());
  ASSERT_TRUE(client);
  auto miss = client->Get(Key(1));
  ASSERT_TRUE(miss.ok()) << miss.status().ToString();
  EXPECT_FALSE(miss->has_value());

  const WinnerRecord rec = MakeRecord(1, 2.0);
  auto stored = client->Put(rec);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(*stored);
  auto got = client->Get(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((**got).cubin, rec.cubin);
  EXPECT_EQ((**got).source, rec.source);
  EXPECT_EQ((**got).launch_plan_json, rec.launch_plan_json);
  EXPECT_EQ((**got).content_hash, ContentHash(rec));
  EXPECT_DOUBLE_EQ((**got).speedup, 2.0);

  EXPECT_FALSE(*client->Put(MakeRecord(1, 1.5))) << "a slower entry does not replace a faster one";
  EXPECT_FALSE(*client->Put(MakeRecord(1, 2.0))) << "ties keep the earlier entry";
  EXPECT_TRUE(*client->Put(MakeRecord(1, 3.0)));
  EXPECT_DOUBLE_EQ((**client->Get(Key(1))).speedup, 3.0);
  EXPECT_EQ(*client->Command({"EXISTS", std::string(kRedisKeyPrefix) + Key(1)}), "1");
}

TEST_F(RedisCacheTest, LookupStoresThePulledEntryUnverifiedWithTheMaskedUrl) {
  std::vector<std::string> warnings;
  RemoteCache remote(Options(&warnings));
  ASSERT_TRUE(remote.Push(MakeRecord(2, 2.5)).ok());
  auto local = OpenStore("local.db");
  ASSERT_TRUE(local);
  std::string why;
  auto got = remote.Lookup(Key(2), local.get(), &why);
  ASSERT_TRUE(got.has_value()) << why;
  EXPECT_FALSE(got->verified) << "pulled entries are re-verified on this GPU before use";
  const std::string shown = "redis://:***@127.0.0.1:" + std::to_string(server_.port());
  EXPECT_EQ(got->pulled_from, shown);
  auto row = local->GetWinner(Key(2));
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_FALSE((**row).verified);
  EXPECT_EQ((**row).pulled_from, shown);
  EXPECT_EQ((**row).cubin, MakeRecord(2, 2.5).cubin);
  EXPECT_FALSE(remote.Lookup(Key(3), local.get(), &why).has_value());
  EXPECT_NE(why.find("has no entry"), std::string::npos) << why;
  const RemoteCacheCounters c = remote.counters();
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.misses, 1);
  EXPECT_EQ(c.failures, 0);

  WinnerRecord unverified = MakeRecord(4, 9.0);
  unverified.verified = false;
  auto refused = remote.Push(unverified);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << "unverified kernels never travel on";
}

TEST_F(RedisCacheTest, EntryWhoseBytesDoNotMatchItsContentHashIsRefused) {
  auto client = Client(server_.Url());
  ASSERT_TRUE(client);
  ASSERT_TRUE(*client->Put(MakeRecord(5, 2.0)));
  const std::string key = std::string(kRedisKeyPrefix) + Key(5);
  auto entry = client->Command({"HGET", key, "entry"});
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  json j = json::parse(*entry);
  j["source"] = "extern \"C\" __global__ void evil(float* y) { y[0] = 1; }";
  ASSERT_TRUE(client->Command({"HSET", key, "entry", j.dump()}).ok());

  auto got = client->Get(Key(5));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("content hash mismatch"), std::string::npos) << got.status().message();

  std::vector<std::string> warnings;
  RemoteCache remote(Options(&warnings));
  auto local = OpenStore("local.db");
  std::string why;
  EXPECT_FALSE(remote.Lookup(Key(5), local.get(), &why).has_value());
  EXPECT_NE(why.find("content hash mismatch"), std::string::npos) << why;
  EXPECT_FALSE(local->GetWinner(Key(5))->has_value()) << "nothing damaged is stored locally";
  EXPECT_EQ(remote.counters().failures, 1);
}

TEST_F(RedisCacheTest, EntriesOverTheSizeLimitAreRefusedOnPushAndOnPull) {
  auto small = Client(server_.Url(), 4096);
  ASSERT_TRUE(small);
  auto pushed = small->Put(MakeRecord(6, 2.0, 8192));
  ASSERT_FALSE(pushed.ok());
  EXPECT_EQ(pushed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pushed.status().message().find("exceeds the limit of 4096 bytes"), std::string::npos)
      << pushed.status().message();
  EXPECT_EQ(*small->Command({"EXISTS", std::string(kRedisKeyPrefix) + Key(6)}), "0") << "nothing was sent";

  auto large = Client(server_.Url());
  ASSERT_TRUE(*large->Put(MakeRecord(6, 2.0, 8192)));
  auto pulled = small->Get(Key(6));
  ASSERT_FALSE(pulled.ok());
  EXPECT_EQ(pulled.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pulled.status().message().find("exceeds the limit of 4096 bytes"), std::string::npos)
      << pulled.status().message();
  EXPECT_TRUE(small->Get(Key(7)).ok()) << "a refused entry leaves the connection usable";
}

TEST_F(RedisCacheTest, WrongOrMissingPasswordIsRefusedAndNeverShown) {
  const std::string wrong_password = "not-the-right-one-42";
  auto wrong = Client(server_.Url(":" + wrong_password));
  ASSERT_TRUE(wrong);
  auto got = wrong->Get(Key(1));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kIoError);
  EXPECT_NE(got.status().message().find("AUTH"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find(":***@127.0.0.1"), std::string::npos) << got.status().message();
  EXPECT_EQ(got.status().message().find(wrong_password), std::string::npos) << got.status().message();

  auto anonymous = Client(server_.Url(""));
  auto put = anonymous->Put(MakeRecord(1, 2.0));
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("NOAUTH"), std::string::npos) << put.status().message();

  std::vector<std::string> warnings;
  RemoteCacheOptions o = Options(&warnings);
  o.url = server_.Url(":" + wrong_password);
  RemoteCache remote(o);
  std::string why;
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_EQ(why.find(wrong_password), std::string::npos) << why;
  EXPECT_NE(why.find("paused"), std::string::npos) << "a refused AUTH backs off like a dead server: " << why;
  for (const std::string& w : warnings) EXPECT_EQ(w.find(wrong_password), std::string::npos) << w;
}

TEST_F(RedisCacheTest, AclUserAndPasswordAuthenticate) {
  auto admin = Client(server_.Url());
  ASSERT_TRUE(admin->Command({"ACL", "SETUSER", "alice", "on", ">alice-pw-7", "~*", "+@all"}).ok());
  auto alice = Client(server_.Url("alice:alice-pw-7"));
  auto stored = alice->Put(MakeRecord(8, 2.0));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(*stored);
  auto got = alice->Get(Key(8));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();

  auto impostor = Client(server_.Url("alice:guess-pw-9"));
  auto refused = impostor->Get(Key(8));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("redis://alice:***@"), std::string::npos) << refused.status().message();
  EXPECT_EQ(refused.status().message().find("guess-pw-9"), std::string::npos) << refused.status().message();
}

TEST_F(RedisCacheTest, DatabaseInThePathSelectsIt) {
  auto db1 = Client(server_.Url(std::string(":") + kPassword, "/1"));
  ASSERT_TRUE(*db1->Put(MakeRecord(9, 2.0)));
  EXPECT_TRUE(db1->Get(Key(9))->has_value());
  EXPECT_FALSE(Client(server_.Url())->Get(Key(9))->has_value()) << "database 0 does not see database 1";
}

TEST_F(RedisCacheTest, EvictionPolicyOtherThanNoevictionWarnsOnce) {
  auto admin = Client(server_.Url());
  ASSERT_TRUE(admin->Command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}).ok());
  std::vector<std::string> quiet;
  {
    RemoteCache remote(Options(&quiet));
    EXPECT_FALSE(remote.Lookup(Key(1), nullptr).has_value());
  }
  EXPECT_TRUE(quiet.empty()) << "noeviction never drops entries: " << quiet.front();
  EXPECT_EQ(*admin->EvictionPolicy(), "noeviction");

  ASSERT_TRUE(admin->Command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}).ok());
  std::vector<std::string> warnings;
  RemoteCache remote(Options(&warnings));
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr).has_value());
  ASSERT_TRUE(remote.Push(MakeRecord(1, 2.0)).ok());
  EXPECT_TRUE(remote.Lookup(Key(1), nullptr).has_value());
  ASSERT_EQ(warnings.size(), 1u) << "warned once, not per request";
  EXPECT_NE(warnings[0].find("allkeys-lru"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("noeviction"), std::string::npos) << "says how to fix it: " << warnings[0];
  EXPECT_NE(warnings[0].find("redis://:***@127.0.0.1"), std::string::npos) << warnings[0];
  EXPECT_EQ(warnings[0].find(kPassword), std::string::npos) << warnings[0];
}

TEST_F(RedisCacheTest, StoppedServerIsNamedAndLookupsBackOff) {
  std::vector<std::string> warnings;
  RemoteCacheOptions o = Options(&warnings);
  o.timeout = std::chrono::milliseconds(300);
  o.backoff_initial = std::chrono::milliseconds(60000);
  RemoteCache remote(o);
  server_.Stop();
  std::string why;
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_NE(why.find("redis://:***@127.0.0.1:" + std::to_string(server_.port())), std::string::npos) << why;
  EXPECT_NE(why.find("paused"), std::string::npos) << why;
  EXPECT_EQ(why.find(kPassword), std::string::npos) << why;
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_NE(why.find("backing off"), std::string::npos) << why;
  EXPECT_EQ(remote.counters().requests, 1);
  EXPECT_EQ(remote.counters().skipped, 1);
}

// A server that goes away under an open connection: the next write hits a
// closed socket. That is an error naming the server, never a SIGPIPE that
// kills the process, and the client reconnects once a server is back.
TEST_F(RedisCacheTest, ServerGoneUnderAnOpenConnectionIsAnErrorNotASignal) {
  auto client = Client(server_.Url());
  ASSERT_TRUE(client->Ping().ok());
  server_.Stop();
  for (int i = 0; i < 3; ++i) {
    auto put = client->Put(MakeRecord(10, 2.0, size_t{4} << 20));
    ASSERT_FALSE(put.ok());
    EXPECT_NE(put.status().message().find("127.0.0.1:" + std::to_string(server_.port())), std::string::npos)
        << put.status().message();
  }
  EXPECT_FALSE(client->Ping().ok());
}

// A port that accepts connections (the kernel's backlog) but never answers:
// the lookup is bounded by the timeout, says so, and backs off.
TEST(RedisTimeoutTest, SilentServerCostsOneTimeoutAndIsNamedWithoutItsPassword) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  RemoteCacheOptions o;
  o.url = std::string("redis://:") + kPassword + "@127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  o.timeout = std::chrono::milliseconds(200);
  RemoteCache remote(o);
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 2000) << why;
  EXPECT_NE(why.find("no answer within the timeout"), std::string::npos) << why;
  EXPECT_NE(why.find("paused"), std::string::npos) << why;
  EXPECT_EQ(why.find(kPassword), std::string::npos) << why;
  EXPECT_EQ(remote.counters().failures, 1);
  ::close(fd);
}

TEST(EvictionPolicyWarningTest, OnlyNoevictionIsQuiet) {
  EXPECT_EQ(EvictionPolicyWarning("redis://h:6379", "noeviction"), "");
  for (const char* policy : {"allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-ttl", "allkeys-random"}) {
    const std::string w = EvictionPolicyWarning("redis://h:6379", policy);
    EXPECT_NE(w.find(policy), std::string::npos) << w;
    EXPECT_NE(w.find("redis://h:6379"), std::string::npos) << w;
  }
}

}  // namespace
}  // namespace dice::cache
