// The Store's read connections (cache/src/store_readers.h): GetWinner,
// ListWinnerPage, ListWinners and ListAttempts run beside the writer (WAL),
// not behind the Store's write mutex, and still see every committed write.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache_test_support.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

using Clock = std::chrono::steady_clock;

WinnerRecord Winner(const std::string& key, double speedup) {
  WinnerRecord r;
  r.task_key = key;
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[8,8]";
  r.arch = "sm_90";
  r.origin = "template:x";
  r.candidate_hash = "cand-" + key;
  r.source = "src " + key;
  r.cubin = std::string(4096, 'c') + key;
  r.launch_plan_json = "{}";
  r.baseline_us = 10.0 * speedup;
  r.best_us = 10.0;
  r.speedup = speedup;
  return r;
}

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class StoreReadersTest : public testing::StoreInTempDirTest {
 protected:
  StoreReadersTest() : StoreInTempDirTest("store-readers") {}
};

// Another process holds the file's write lock; the Store's PutWinner waits
// for it (busy timeout) holding the Store's write mutex. Reads in the same
// Store answer at once meanwhile, from the last committed state, and the
// write is visible to the next read once it returns.
TEST_F(StoreReadersTest, ReadsAnswerWhileAWriteWaitsForTheFileLock) {
  ASSERT_TRUE(store_->PutWinner(Winner("old", 2.0)).ok());
  ASSERT_TRUE(store_->RecordAttempt({"old", "cand-old", "template:x", "winner", "", 10.0, 0}).ok());

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE; INSERT OR REPLACE INTO meta(key, value) VALUES ('held', '1')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(other);

  std::atomic<bool> put_returned{false};
  auto put = std::async(std::launch::async, [&] {
    auto r = store_->PutWinner(Winner("new", 3.0));
    put_returned = true;
    return r.ok() && *r;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the put is now waiting on the lock
  ASSERT_FALSE(put_returned.load()) << "the put did not wait for the other connection's write lock";

  const auto t0 = Clock::now();
  auto got = store_->GetWinner("old");
  WinnerQuery all;
  auto page = store_->ListWinnerPage(all);
  auto list = store_->ListWinners();
  auto attempts = store_->ListAttempts("old");
  const double read_ms = MsSince(t0);
  EXPECT_FALSE(put_returned.load()) << "reads finished only after the write";
  EXPECT_LT(read_ms, 2000.0) << "reads waited for the blocked write";
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->cubin, Winner("old", 2.0).cubin);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->total, 1);
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].record.task_key, "old");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].outcome, "winner");

  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_TRUE(put.get());
  auto fresh = store_->GetWinner("new");  // read after write, on a read connection
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(fresh->has_value());
  EXPECT_EQ((*fresh)->speedup, 3.0);
  auto after = store_->ListWinnerPage(all);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->total, 2);
}

// DICE_CACHE_READ_CONNECTIONS=0 puts every read back on the write
// connection (the A/B switch of bench/cache_load_bench): then a read does
// wait for the blocked write, which is what the test above rules out.
TEST_F(StoreReadersTest, WithoutReadConnectionsAReadWaitsForTheBlockedWrite) {
  ::setenv("DICE_CACHE_READ_CONNECTIONS", "0", 1);
  auto opened = Store::Open(db_path_);
  ::unsetenv("DICE_CACHE_READ_CONNECTIONS");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(opened).value();
  ASSERT_TRUE(store->PutWinner(Winner("old", 2.0)).ok());

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE; INSERT OR REPLACE INTO meta(key, value) VALUES ('held', '1')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  std::atomic<bool> put_returned{false}, read_returned{false};
  auto put = std::async(std::launch::async, [&] {
    auto r = store->PutWinner(Winner("new", 3.0));
    put_returned = true;
    return r.ok() && *r;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto read = std::async(std::launch::async, [&] {
    auto r = store->GetWinner("old");
    read_returned = true;
    return r.ok() && r->has_value();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(read_returned.load()) << "the read did not wait although there are no read connections";
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_TRUE(put.get());
  EXPECT_TRUE(read.get());
}

// Eight reader threads and one writer on one Store for ~1 s: every read
// succeeds, a page's rows always agree with its total (one snapshot), and
// every acknowledged write is read back afterwards.
TEST_F(StoreReadersTest, ConcurrentReadersAndOneWriterStayConsistent) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store_->PutWinner(Winner("seed" + std::to_string(i), 2.0)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> written{0}, reads{0}, failures{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      auto r = store_->PutWinner(Winner("w" + std::to_string(i), 1.5));
      if (!r.ok() || !*r) {
        ++failures;
        return;
      }
      written = i + 1;
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      while (!stop.load()) {
        auto got = store_->GetWinner("seed" + std::to_string(t));
        if (!got.ok() || !got->has_value() || (*got)->cubin != Winner("seed" + std::to_string(t), 2.0).cubin) {
          ++failures;
        }
        WinnerQuery q;
        q.limit = 7;
        q.offset = 15;
        auto page = store_->ListWinnerPage(q);
        const int64_t want = page.ok() ? std::min<int64_t>(7, std::max<int64_t>(0, page->total - 15)) : -1;
        if (!page.ok() || page->total < 20 || static_cast<int64_t>(page->entries.size()) != want) ++failures;
        ++reads;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  stop = true;
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 8);
  EXPECT_GT(written.load(), 0);
  for (int i = 0; i < written.load(); ++i) {
    auto got = store_->GetWinner("w" + std::to_string(i));
    ASSERT_TRUE(got.ok() && got->has_value()) << "acknowledged write w" << i << " not read back";
  }
  WinnerQuery all;
  all.limit = 0;
  auto count = store_->ListWinnerPage(all);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->total, 20 + written.load());
}

// A page's total is remembered on a read connection only while the file is
// unchanged: every write, through this Store or another connection, and
// every filter gets its own, fresh count.
TEST_F(StoreReadersTest, PageTotalFollowsEveryWriteAndFilter) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store_->PutWinner(Winner("t" + std::to_string(i), 2.0)).ok());
  WinnerRecord other_arch = Winner("t-sm80", 2.0);
  other_arch.arch = "sm_80";
  ASSERT_TRUE(store_->PutWinner(other_arch).ok());
  auto total = [this](const std::string& arch) {
    WinnerQuery q;
    q.arch = arch;
    q.limit = 2;
    auto page = store_->ListWinnerPage(q);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? page->total : -1;
  };
  EXPECT_EQ(total(""), 6);
  EXPECT_EQ(total(""), 6);  // counted once, reused
  EXPECT_EQ(total("sm_80"), 1);
  EXPECT_EQ(total("sm_90"), 5);
  ASSERT_TRUE(store_->PutWinner(Winner("t5", 2.0)).ok());
  EXPECT_EQ(total(""), 7);
  EXPECT_EQ(total("sm_90"), 6);
  ASSERT_TRUE(store_->RemoveWinner("t0").ok());
  EXPECT_EQ(total(""), 6);
  testing::RawSql(db_path_, "DELETE FROM winners WHERE task_key = 't-sm80'");  // another connection
  EXPECT_EQ(total(""), 5);
  EXPECT_EQ(total("sm_80"), 0);
  WinnerQuery verified;
  verified.verified = 0;
  auto none = store_->ListWinnerPage(verified);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->total, 0);
}

// A damaged row read on a read connection is still refused by its content
// hash, naming the key (GetWinner checks after the lease is returned).
TEST_F(StoreReadersTest, DamagedRowIsRefusedOnTheReadPath) {
  ASSERT_TRUE(store_->PutWinner(Winner("dmg", 2.0)).ok());
  ASSERT_TRUE(store_->GetWinner("dmg").ok());  // a read connection is open and has its statement cached
  testing::RawSql(db_path_, "UPDATE winners SET cubin = zeroblob(64) WHERE task_key = 'dmg'");
  auto got = store_->GetWinner("dmg");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("dmg"), std::string::npos) << got.status().ToString();
}

// Read connections map the file (PRAGMA mmap_size) and cache their
// statements: after the file grew well past what a reader had mapped, and
// after a garbage collection shrank it again (VACUUM), the same reader
// still sees every committed row with its bytes, and nothing removed.
TEST_F(StoreReadersTest, MappedReaderFollowsTheFileGrowingAndShrinking) {
  ASSERT_TRUE(store_->PutWinner(Winner("first", 2.0)).ok());
  auto first = store_->GetWinner("first");  // one read connection, mapped at the small size
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status().ToString();
  const auto file_bytes = [this] { return std::filesystem::file_size(db_path_); };
  const auto small = file_bytes();
  auto big = [](int i) {
    WinnerRecord r = Winner("big" + std::to_string(i), 2.0);
    r.cubin = std::string(64 * 1024, static_cast<char>('a' + i % 26)) + std::to_string(i);
    return r;
  };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(store_->PutWinner(big(i)).ok());
  testing::RawSql(db_path_, "PRAGMA wal_checkpoint(TRUNCATE)");  // the rows reach the main file
  EXPECT_GT(file_bytes(), small + 10 * 1024 * 1024);
  for (int i = 0; i < 200; i += 7) {
    auto got = store_->GetWinner("big" + std::to_string(i));
    ASSERT_TRUE(got.ok() && got->has_value()) << i << ": " << got.status().ToString();
    EXPECT_EQ((**got).cubin, big(i).cubin) << i;
  }
  WinnerQuery all;
  all.limit = 500;
  auto page = store_->ListWinnerPage(all);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->total, 201);
  EXPECT_EQ(page->entries.size(), 201u);

  GcOptions gc;
  gc.max_payload_bytes = 1;  // removes everything, then VACUUM shrinks the file
  auto removed = store_->CollectGarbage(gc);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(removed->removed, 201);
  testing::RawSql(db_path_, "PRAGMA wal_checkpoint(TRUNCATE)");
  EXPECT_LT(file_bytes(), small + 1024 * 1024);
  auto gone = store_->GetWinner("big7");
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_FALSE(gone->has_value());
  ASSERT_TRUE(store_->PutWinner(Winner("after", 2.0)).ok());
  auto after = store_->GetWinner("after");
  ASSERT_TRUE(after.ok() && after->has_value()) << after.status().ToString();
  EXPECT_EQ((**after).cubin, Winner("after", 2.0).cubin);
  page = store_->ListWinnerPage(all);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->total, 1);
}

}  // namespace
}  // namespace dice::cache
