// Tests for dice/cache/store.h: the SQLite kernel cache.
#include "dice/cache/store.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dice/core/ir.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `sql` on a raw connection (bypassing Store) and returns the first
// column of the first row ("" when none). Fails the test on a SQLite error.
std::string RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* stmt = nullptr;
  std::string result;
  int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
  EXPECT_EQ(rc, SQLITE_OK) << sqlite3_errmsg(db);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(stmt);
    EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(db);
    if (rc == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return result;
}

// A winner whose every field differs, with a cubin holding NUL and high bytes.
WinnerRecord MakeWinner(const std::string& key, double speedup, const std::string& origin = "template:x") {
  WinnerRecord r;
  r.task_key = key;
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[1024,8192]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = origin;
  r.candidate_hash = ir::Sha256Hex("cand:" + key + origin);
  r.source = "extern \"C\" __global__ void k(const float* a, float* b) { /* µ */ }";
  r.cubin = std::string("\x7f" "ELF\0\0\x01\xff\xfe\0", 10) + key + std::string(3, '\0');
  r.launch_plan_json = R"({"launches":[{"kernel":"k","grid":[4096,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  r.baseline_us = 123.5;
  r.best_us = r.baseline_us / speedup;
  r.speedup = speedup;
  r.reduced_precision = true;
  r.versions_json = R"({"driver":580,"nvrtc":"13.0","abi":1,"dice":"0.1.0"})";
  return r;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-store-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    db_path_ = DatabasePath(dir_ + "/cache");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<Store> OpenOrDie() {
    auto store = Store::Open(db_path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::string dir_;
  std::string db_path_;
};

TEST_F(StoreTest, RoundTripsEveryFieldIncludingCubinWithNulBytes) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  WinnerRecord in = MakeWinner("key-a", 2.5);
  ASSERT_NE(in.cubin.find('\0'), std::string::npos);
  auto put = store->PutWinner(in);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(*put);

  auto got = store->GetWinner("key-a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  const WinnerRecord& out = **got;
  EXPECT_EQ(out.task_key, in.task_key);
  EXPECT_EQ(out.graph_canonical, in.graph_canonical);
  EXPECT_EQ(out.input_specs, in.input_specs);
  EXPECT_EQ(out.arch, in.arch);
  EXPECT_EQ(out.gpu_name, in.gpu_name);
  EXPECT_EQ(out.origin, in.origin);
  EXPECT_EQ(out.candidate_hash, in.candidate_hash);
  EXPECT_EQ(out.source, in.source);
  EXPECT_EQ(out.cubin, in.cubin);  // same bytes, NULs included
  EXPECT_EQ(out.cubin.size(), in.cubin.size());
  EXPECT_EQ(out.launch_plan_json, in.launch_plan_json);
  EXPECT_DOUBLE_EQ(out.baseline_us, in.baseline_us);
  EXPECT_DOUBLE_EQ(out.best_us, in.best_us);
  EXPECT_DOUBLE_EQ(out.speedup, in.speedup);
  EXPECT_EQ(out.reduced_precision, in.reduced_precision);
  EXPECT_EQ(out.versions_json, in.versions_json);
  // created_at was 0: PutWinner stamps "now".
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(out.created_at, now - 60);
  EXPECT_LE(out.created_at, now + 1);
  EXPECT_EQ(out.content_hash, ir::Sha256Hex(std::to_string(in.source.size()) + ":" + in.source +
                                            std::to_string(in.cubin.size()) + ":" + in.cubin +
                                            std::to_string(in.launch_plan_json.size()) + ":" +
                                            in.launch_plan_json));
  EXPECT_EQ(out.content_hash, ContentHash(out));

  auto missing = store->GetWinner("no-such-key");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

TEST_F(StoreTest, KeepsExplicitCreatedAtAndOverridesSuppliedContentHash) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  WinnerRecord in = MakeWinner("key-t", 1.5);
  in.created_at = 1700000000;
  in.content_hash = "bogus";
  ASSERT_TRUE(store->PutWinner(in).ok());
  auto got = store->GetWinner("key-t");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->created_at, 1700000000);
  EXPECT_EQ((*got)->content_hash, ContentHash(in));
}

TEST_F(StoreTest, KeepsBetterSpeedupAndEarlierWinnerOnTie) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  auto first = store->PutWinner(MakeWinner("k", 2.0, "first"));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);

  auto slower = store->PutWinner(MakeWinner("k", 1.5, "slower"));
  ASSERT_TRUE(slower.ok());
  EXPECT_FALSE(*slower);
  EXPECT_EQ((*store->GetWinner("k"))->origin, "first");

  auto tie = store->PutWinner(MakeWinner("k", 2.0, "tie"));
  ASSERT_TRUE(tie.ok());
  EXPECT_FALSE(*tie);
  EXPECT_EQ((*store->GetWinner("k"))->origin, "first");

  auto better = store->PutWinner(MakeWinner("k", 3.0, "better"));
  ASSERT_TRUE(better.ok());
  EXPECT_TRUE(*better);
  auto got = store->GetWinner("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->origin, "better");
  EXPECT_DOUBLE_EQ((*got)->speedup, 3.0);
}

TEST_F(StoreTest, RecordsAttemptsSoTheyAreNotRetried) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  AttemptRecord a{"k", "hash-1", "template:a", "compile_error", "error: expected ';'", 0, 0};
  AttemptRecord b{"k", "hash-2", "dice:sample0", "slower", "", 17.25, 1700000001};
  ASSERT_TRUE(store->RecordAttempt(a).ok());
  ASSERT_TRUE(store->RecordAttempt(b).ok());

  EXPECT_TRUE(*store->WasAttempted("k", "hash-1"));
  EXPECT_TRUE(*store->WasAttempted("k", "hash-2"));
  EXPECT_FALSE(*store->WasAttempted("k", "hash-3"));
  EXPECT_FALSE(*store->WasAttempted("other", "hash-1"));

  // Same (task_key, candidate_hash) replaces the earlier outcome.
  a.outcome = "verify_failed";
  a.error = "element 3: got nan, expected 1";
  ASSERT_TRUE(store->RecordAttempt(a).ok());
  auto list = store->ListAttempts("k");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  bool saw_a = false, saw_b = false;
  for (const AttemptRecord& r : *list) {
    EXPECT_EQ(r.task_key, "k");
    if (r.candidate_hash == "hash-1") {
      saw_a = true;
      EXPECT_EQ(r.outcome, "verify_failed");
      EXPECT_EQ(r.error, "element 3: got nan, expected 1");
      EXPECT_EQ(r.origin, "template:a");
      EXPECT_GT(r.created_at, 0);
    } else if (r.candidate_hash == "hash-2") {
      saw_b = true;
      EXPECT_EQ(r.outcome, "slower");
      EXPECT_DOUBLE_EQ(r.time_us, 17.25);
      EXPECT_EQ(r.created_at, 1700000001);
    }
  }
  EXPECT_TRUE(saw_a && saw_b);
  EXPECT_TRUE(store->ListAttempts("other")->empty());
}

TEST_F(StoreTest, RemoveWinnerDeletesRowAndItsAttempts) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->PutWinner(MakeWinner("gone", 2.0)).ok());
  ASSERT_TRUE(store->PutWinner(MakeWinner("kept", 2.0)).ok());
  ASSERT_TRUE(store->RecordAttempt({"gone", "h", "o", "winner", "", 1, 0}).ok());
  ASSERT_TRUE(store->RecordAttempt({"kept", "h", "o", "winner", "", 1, 0}).ok());

  auto removed = store->RemoveWinner("gone");
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_FALSE(store->GetWinner("gone")->has_value());
  EXPECT_FALSE(*store->WasAttempted("gone", "h"));
  EXPECT_TRUE(store->GetWinner("kept")->has_value());
  EXPECT_TRUE(*store->WasAttempted("kept", "h"));

  auto again = store->RemoveWinner("gone");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST_F(StoreTest, ListsWinnersNewestFirstWithoutSourceOrCubin) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  WinnerRecord old_rec = MakeWinner("old", 2.0);
  old_rec.created_at = 1000;
  WinnerRecord mid = MakeWinner("mid", 4.0);
  mid.created_at = 2000;
  WinnerRecord recent = MakeWinner("new", 3.0);
  recent.created_at = 3000;
  ASSERT_TRUE(store->PutWinner(mid).ok());
  ASSERT_TRUE(store->PutWinner(recent).ok());
  ASSERT_TRUE(store->PutWinner(old_rec).ok());

  auto list = store->ListWinners();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].task_key, "new");
  EXPECT_EQ((*list)[1].task_key, "mid");
  EXPECT_EQ((*list)[2].task_key, "old");
  for (const WinnerRecord& r : *list) {
    EXPECT_TRUE(r.source.empty());
    EXPECT_TRUE(r.cubin.empty());
    EXPECT_EQ(r.arch, "sm_90");
    EXPECT_FALSE(r.content_hash.empty());
  }
  EXPECT_DOUBLE_EQ((*list)[1].speedup, 4.0);
}

TEST_F(StoreTest, StoresMetaAndSchemaVersion) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  auto version = store->GetMeta("schema_version");
  ASSERT_TRUE(version.ok());
  ASSERT_TRUE(version->has_value());
  EXPECT_EQ(**version, std::to_string(kSchemaVersion));
  EXPECT_EQ(RawSql(db_path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(RawSql(db_path_, "PRAGMA journal_mode"), "wal");

  EXPECT_FALSE(store->GetMeta("server_url")->has_value());
  ASSERT_TRUE(store->SetMeta("server_url", "http://a").ok());
  ASSERT_TRUE(store->SetMeta("server_url", "http://b").ok());
  EXPECT_EQ(**store->GetMeta("server_url"), "http://b");
}

TEST_F(StoreTest, DataSurvivesReopen) {
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->PutWinner(MakeWinner("persist", 2.0)).ok());
    ASSERT_TRUE(store->SetMeta("m", "v").ok());
  }
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  auto got = store->GetWinner("persist");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->cubin, MakeWinner("persist", 2.0).cubin);
  EXPECT_EQ(**store->GetMeta("m"), "v");
}

TEST_F(StoreTest, InitialisesAnEmptyExistingFile) {
  fs::create_directories(fs::path(db_path_).parent_path());
  WriteFileBytes(db_path_, "");
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(**store->GetMeta("schema_version"), std::to_string(kSchemaVersion));
}

TEST_F(StoreTest, RefusesGarbageFileAndLeavesItUntouched) {
  fs::create_directories(fs::path(db_path_).parent_path());
  for (size_t size : {size_t{37}, size_t{8192}}) {
    std::string garbage;
    for (size_t i = 0; i < size; ++i) garbage.push_back(static_cast<char>((i * 131 + 7) & 0xff));
    WriteFileBytes(db_path_, garbage);
    auto store = Store::Open(db_path_);
    ASSERT_FALSE(store.ok()) << "size " << size;
    EXPECT_EQ(store.status().code(), StatusCode::kCorrupt) << store.status().ToString();
    EXPECT_NE(store.status().message().find(db_path_), std::string::npos) << store.status().ToString();
    EXPECT_EQ(ReadFileBytes(db_path_), garbage) << "the user's file was modified";
  }
}

TEST_F(StoreTest, RefusesSqliteDatabaseThatIsNotACache) {
  fs::create_directories(fs::path(db_path_).parent_path());
  RawSql(db_path_, "CREATE TABLE my_data(x INTEGER)");
  std::string before = ReadFileBytes(db_path_);
  ASSERT_FALSE(before.empty());
  auto store = Store::Open(db_path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorrupt) << store.status().ToString();
  EXPECT_EQ(ReadFileBytes(db_path_), before);
}

TEST_F(StoreTest, ReportsIoErrorWhenDirectoryCannotBeCreated) {
  std::string regular = dir_ + "/a-regular-file";
  WriteFileBytes(regular, "x");
  std::string path = regular + "/sub/kernels.db";
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kIoError) << store.status().ToString();
  EXPECT_NE(store.status().message().find(regular), std::string::npos) << store.status().ToString();
  EXPECT_EQ(ReadFileBytes(regular), "x");
}

TEST_F(StoreTest, RejectsEmptyPath) {
  auto store = Store::Open("");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, RefusesNewerSchemaVersionAndLeavesFileUntouched) {
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->PutWinner(MakeWinner("k", 2.0)).ok());
  }
  RawSql(db_path_, "PRAGMA user_version = " + std::to_string(kSchemaVersion + 1));
  std::string before = ReadFileBytes(db_path_);
  auto store = Store::Open(db_path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorrupt) << store.status().ToString();
  EXPECT_NE(store.status().message().find("newer"), std::string::npos) << store.status().ToString();
  EXPECT_EQ(ReadFileBytes(db_path_), before);
  EXPECT_EQ(RawSql(db_path_, "PRAGMA user_version"), std::to_string(kSchemaVersion + 1));
  EXPECT_EQ(RawSql(db_path_, "SELECT count(*) FROM winners"), "1");
}

TEST_F(StoreTest, TamperedRowIsNeverServed) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->PutWinner(MakeWinner("tampered", 2.0)).ok());
  ASSERT_TRUE(store->PutWinner(MakeWinner("intact", 2.0)).ok());
  RawSql(db_path_, "UPDATE winners SET cubin = X'00DEADBEEF' WHERE task_key = 'tampered'");
  auto got = store->GetWinner("tampered");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("tampered"), std::string::npos) << got.status().ToString();
  auto intact = store->GetWinner("intact");
  ASSERT_TRUE(intact.ok());
  EXPECT_TRUE(intact->has_value());

  RawSql(db_path_, "UPDATE winners SET launch_plan_json = '{}' WHERE task_key = 'intact'");
  auto changed_plan = store->GetWinner("intact");
  ASSERT_FALSE(changed_plan.ok());
  EXPECT_EQ(changed_plan.status().code(), StatusCode::kCorrupt);
}

// Each of 4 processes writes 200 distinct winners, 200 attempts on shared
// keys and 200 competing winners on 10 shared keys. Every row must land and
// the shared keys must hold the highest speedup any process offered.
TEST_F(StoreTest, ConcurrentWritersFromSeveralProcessesLoseNothing) {
  constexpr int kProcs = 4;
  constexpr int kIters = 200;
  constexpr int kShared = 10;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      auto store = Store::Open(db_path_);
      if (!store.ok()) {
        std::fprintf(stderr, "child %d: %s\n", p, store.status().ToString().c_str());
        ::_exit(2);
      }
      for (int i = 0; i < kIters && rc == 0; ++i) {
        std::string own = "p" + std::to_string(p) + "-" + std::to_string(i);
        std::string shared = "shared-" + std::to_string(i % kShared);
        auto a = (*store)->PutWinner(MakeWinner(own, 1.0 + i));
        Status b = (*store)->RecordAttempt({shared, own, "o", "slower", "", 1.0 * i, 0});
        auto c = (*store)->PutWinner(MakeWinner(shared, 1000.0 * p + i, own));
        if (!a.ok() || !b.ok() || !c.ok()) {
          std::fprintf(stderr, "child %d iter %d: %s | %s | %s\n", p, i, a.status().ToString().c_str(),
                       b.ToString().c_str(), c.status().ToString().c_str());
          rc = 3;
        }
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  EXPECT_EQ(RawSql(db_path_, "PRAGMA integrity_check"), "ok");
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  for (int p = 0; p < kProcs; ++p) {
    for (int i = 0; i < kIters; ++i) {
      std::string own = "p" + std::to_string(p) + "-" + std::to_string(i);
      auto got = store->GetWinner(own);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(got->has_value()) << own;
      EXPECT_DOUBLE_EQ((*got)->speedup, 1.0 + i);
    }
  }
  for (int k = 0; k < kShared; ++k) {
    std::string shared = "shared-" + std::to_string(k);
    auto got = store->GetWinner(shared);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value());
    int best_i = kIters - kShared + k;  // largest i with i % kShared == k
    EXPECT_DOUBLE_EQ((*got)->speedup, 1000.0 * (kProcs - 1) + best_i);
    EXPECT_EQ((*got)->origin, "p" + std::to_string(kProcs - 1) + "-" + std::to_string(best_i));
    auto attempts = store->ListAttempts(shared);
    ASSERT_TRUE(attempts.ok());
    EXPECT_EQ(attempts->size(), static_cast<size_t>(kProcs * kIters / kShared));
  }
  EXPECT_EQ(store->ListWinners()->size(), static_cast<size_t>(kProcs * kIters + kShared));
}

// A writer killed with SIGKILL mid-stream leaves a consistent database in
// which every winner it reported as committed is readable and intact.
TEST_F(StoreTest, SurvivesKillNineDuringWrites) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto store = Store::Open(db_path_);
    if (!store.ok()) ::_exit(2);
    for (int i = 0;; ++i) {
      WinnerRecord r = MakeWinner("kill-" + std::to_string(i), 2.0);
      r.cubin += std::string(32 * 1024, static_cast<char>(i & 0xff));  // multi-page rows
      auto put = (*store)->PutWinner(r);
      if (!put.ok()) ::_exit(3);
      if (::write(fds[1], &i, sizeof(i)) != static_cast<ssize_t>(sizeof(i))) ::_exit(4);
    }
  }
  ::close(fds[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);

  std::vector<int> committed;
  int v;
  while (::read(fds[0], &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v))) committed.push_back(v);
  ::close(fds[0]);
  ASSERT_FALSE(committed.empty()) << "child committed nothing in 200 ms";

  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(RawSql(db_path_, "PRAGMA integrity_check"), "ok");
  for (int i : committed) {
    auto got = store->GetWinner("kill-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << "committed row kill-" << i << " is missing";
    EXPECT_EQ((*got)->cubin.size(), MakeWinner("kill-" + std::to_string(i), 2.0).cubin.size() + 32 * 1024);
  }
  // The store is still writable after recovery.
  EXPECT_TRUE(store->PutWinner(MakeWinner("after-kill", 2.0)).ok());
}

TEST(CacheLocationTest, DefaultDirHonoursEnvironment) {
  const char* old_dir = std::getenv("DICE_CACHE_DIR");
  std::string saved_dir = old_dir ? old_dir : "";
  const char* old_home = std::getenv("HOME");
  std::string saved_home = old_home ? old_home : "";

  ::setenv("DICE_CACHE_DIR", "/srv/dice-cache", 1);
  EXPECT_EQ(DefaultCacheDir(), "/srv/dice-cache");
  ::unsetenv("DICE_CACHE_DIR");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(DefaultCacheDir(), "/home/someone/.cache/dice");
  EXPECT_EQ(DatabasePath("/home/someone/.cache/dice"), "/home/someone/.cache/dice/kernels.db");
  // Set but empty is unset; $DICE_CACHE_DIR wins over $HOME.
  ::setenv("DICE_CACHE_DIR", "", 1);
  EXPECT_EQ(DefaultCacheDir(), "/home/someone/.cache/dice");
  ::setenv("DICE_CACHE_DIR", "/srv/dice-cache", 1);
  EXPECT_EQ(DefaultCacheDir(), "/srv/dice-cache");
  // No HOME (daemons, some containers): a per-user directory under /tmp.
  ::unsetenv("DICE_CACHE_DIR");
  ::unsetenv("HOME");
  EXPECT_EQ(DefaultCacheDir(), "/tmp/dice-cache-" + std::to_string(::getuid()));
  ::setenv("HOME", "", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/dice-cache-" + std::to_string(::getuid()));

  if (old_dir) ::setenv("DICE_CACHE_DIR", saved_dir.c_str(), 1);
  if (old_home) ::setenv("HOME", saved_home.c_str(), 1); else ::unsetenv("HOME");
}

}  // namespace
}  // namespace dice::cache

namespace dice::cache {
namespace {
TEST(ContentHashTest, DetectsBytesShiftedBetweenFields) {
  WinnerRecord a, b;
  a.source = "abc";
  a.cubin = "def";
  b.source = "abcd";
  b.cubin = "ef";
  EXPECT_NE(ContentHash(a), ContentHash(b));
}
}  // namespace
}  // namespace dice::cache
