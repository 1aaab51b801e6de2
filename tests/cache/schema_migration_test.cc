// Schema v5 (cache/src/schema.cc): winners rebuilt with the summary columns
// before the payload, and winner_counts kept by triggers. A v4 cache
// migrates with every row, rowid, page and bundle as before; processes
// opening an old file at once migrate it once; a newer file stays refused.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_test_support.h"
#include "dice/cache/bundle.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;
using testing::RawSql;

// The winners columns by name (any schema version from v2 on).
constexpr const char* kColumns =
    "task_key, graph_canonical, input_specs, arch, gpu_name, origin, candidate_hash, source, cubin,"
    " launch_plan_json, baseline_us, best_us, speedup, reduced_precision, versions_json, created_at, content_hash,"
    " verified, pulled_from, hits, last_used_at";

// Every winners row of `path` ordered by rowid, each cell as its storage
// class and bytes ("rowid" first): what must survive the migration exactly.
std::vector<std::vector<std::string>> DumpWinners(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  const std::string sql = std::string("SELECT rowid, ") + kColumns + " FROM winners ORDER BY rowid";
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  while (s != nullptr && sqlite3_step(s) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < sqlite3_column_count(s); ++i) {
      const int type = sqlite3_column_type(s, i);
      const char* bytes = static_cast<const char*>(sqlite3_column_blob(s, i));
      row.push_back(std::to_string(type) + ":" +
                    (bytes != nullptr ? std::string(bytes, static_cast<size_t>(sqlite3_column_bytes(s, i))) : ""));
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return rows;
}

// The task keys of `sql` (one column) on `path`, in order.
std::vector<std::string> KeysOf(const std::string& path, const std::string& sql) {
  std::vector<std::string> keys;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  while (s != nullptr && sqlite3_step(s) == SQLITE_ROW) {
    keys.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return keys;
}

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'e';
  return k;
}

// Entry n with a cubin of `cubin_bytes` pseudo-random bytes (NULs included).
WinnerRecord Entry(int n, const std::string& arch, bool verified, int64_t created_at, size_t cubin_bytes) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = " + std::string(n % 2 ? "relu" : "sigmoid") +
                      "(%0)\noutput %1\n";
  r.input_specs = "f32[8," + std::to_string(n + 1) + "]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:t" + std::to_string(n);
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "extern \"C\" __global__ void k" + std::to_string(n) + "() { /* µs — ünïcode */ }";
  std::mt19937 gen(static_cast<unsigned>(n));
  r.cubin.resize(cubin_bytes);
  for (char& c : r.cubin) c = static_cast<char>(gen() & 0xff);
  r.launch_plan_json = R"({"grid":[)" + std::to_string(n + 1) + R"(,1,1]})";
  r.baseline_us = 10.0 + n;
  r.best_us = 1.0 + 0.5 * n;
  r.speedup = r.baseline_us / r.best_us;
  r.reduced_precision = n % 3 == 0;
  r.versions_json = R"({"dice":"0.1"})";
  r.created_at = created_at;
  r.verified = verified;
  r.pulled_from = verified ? "" : "http://peer:8470";
  r.hits = 7 * n;
  r.last_used_at = n % 2 ? created_at + 60 : 0;
  r.content_hash = ContentHash(r);
  return r;
}

class SchemaMigrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-schema-v5-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = DatabasePath(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A v4 cache of eight rows: two archs, both verified states, two rows
  // (0 and 7) of one arch, verified state and second (the rowid breaks
  // their tie in the newest order), a 700 KB cubin
  // and one empty one, and a rowid gap (a removed row).
  void WriteVersion4Cache() {
    testing::CreateVersion4Cache(path_);
    entries_ = {Entry(0, "sm_90", true, 1700000100, 60000),  Entry(1, "sm_80", true, 1700000200, 51200),
                Entry(2, "sm_90", false, 1700000200, 90000), Entry(3, "sm_90", true, 1700000050, 700000),
                Entry(4, "sm_80", false, 1700000300, 0),     Entry(5, "sm_90", true, 1700000400, 300),
                Entry(6, "sm_80", true, 1700000150, 52000),  Entry(7, "sm_90", true, 1700000100, 64000)};
    int64_t rowid = 1;
    for (const WinnerRecord& e : entries_) {
      testing::InsertWinnerRow(path_, e, rowid);
      rowid += e.task_key == Key(3) ? 2 : 1;  // leave rowid 5 unused
    }
    RawSql(path_, "INSERT INTO attempts VALUES ('" + Key(1) + "', 'c1', 'template:x', 'slower', '', 3.5, 1700000000)");
  }

  std::string dir_, path_;
  std::vector<WinnerRecord> entries_;
};

// The brute-force order and filter of a page (store.h: the order's column,
// then arch, verified, rowid), computed on `path` with plain SQL.
std::string BruteForceOrder(const WinnerQuery& q) {
  std::string where;
  auto add = [&where](const std::string& term) { where += (where.empty() ? " WHERE " : " AND ") + term; };
  if (!q.arch.empty()) add("arch = '" + q.arch + "'");
  if (q.verified >= 0) add("verified = " + std::to_string(q.verified));
  if (!q.op.empty()) add("instr(graph_canonical, '= " + q.op + "(') > 0");
  const char* by = q.order == WinnerOrder::kSpeedup ? "speedup DESC"
                   : q.order == WinnerOrder::kHits  ? "hits DESC"
                                                    : "created_at DESC";
  return std::string("SELECT task_key FROM winners") + where + " ORDER BY " + by + ", arch, verified, rowid";
}

std::vector<WinnerQuery> EveryFilterAndOrder() {
  std::vector<WinnerQuery> out;
  for (WinnerOrder order : {WinnerOrder::kNewest, WinnerOrder::kSpeedup, WinnerOrder::kHits}) {
    for (const char* arch : {"", "sm_80", "sm_90", "sm_70"}) {
      for (int verified : {-1, 0, 1}) {
        for (const char* op : {"", "relu"}) {
          WinnerQuery q;
          q.order = order;
          q.arch = arch;
          q.verified = verified;
          q.op = op;
          q.limit = kMaxWinnerPageLimit;
          out.push_back(q);
        }
      }
    }
  }
  return out;
}

std::string Describe(const WinnerQuery& q) {
  return "order " + std::to_string(static_cast<int>(q.order)) + " arch '" + q.arch + "' verified " +
         std::to_string(q.verified) + " op '" + q.op + "' offset " + std::to_string(q.offset);
}

TEST_F(SchemaMigrationTest, Version4CacheMigratesWithEveryRowRowidAndPage) {
  WriteVersion4Cache();
  const auto before = DumpWinners(path_);
  ASSERT_EQ(before.size(), entries_.size());
  std::vector<std::vector<std::string>> pages_before;
  for (const WinnerQuery& q : EveryFilterAndOrder()) pages_before.push_back(KeysOf(path_, BruteForceOrder(q)));

  auto opened = Store::Open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  EXPECT_EQ(RawSql(path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(store.GetMeta("schema_version")->value_or(""), std::to_string(kSchemaVersion));

  // Every cell of every row, and its rowid, as it was.
  EXPECT_EQ(DumpWinners(path_), before);
  for (const WinnerRecord& e : entries_) {
    auto got = store.GetWinner(e.task_key);  // checks the content hash
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << e.task_key;
    const WinnerRecord& g = **got;
    EXPECT_EQ(g.cubin, e.cubin);
    EXPECT_EQ(g.source, e.source);
    EXPECT_EQ(g.launch_plan_json, e.launch_plan_json);
    EXPECT_EQ(g.graph_canonical, e.graph_canonical);
    EXPECT_EQ(g.content_hash, e.content_hash);
    EXPECT_EQ(g.verified, e.verified);
    EXPECT_EQ(g.pulled_from, e.pulled_from);
    EXPECT_EQ(g.hits, e.hits);
    EXPECT_EQ(g.last_used_at, e.last_used_at);
    EXPECT_EQ(g.created_at, e.created_at);
    EXPECT_DOUBLE_EQ(g.speedup, e.speedup);
    EXPECT_EQ(g.reduced_precision, e.reduced_precision);
  }
  EXPECT_EQ(store.ListAttempts(Key(1))->size(), 1u);

  // Every page, in every order and filter, holds the rows it held, in the
  // same order, with the same total; pages of 3 concatenate to the same.
  const auto queries = EveryFilterAndOrder();
  for (size_t i = 0; i < queries.size(); ++i) {
    WinnerQuery q = queries[i];
    auto page = store.ListWinnerPage(q);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    std::vector<std::string> keys;
    for (const WinnerSummary& e : page->entries) keys.push_back(e.record.task_key);
    EXPECT_EQ(keys, pages_before[i]) << Describe(q);
    EXPECT_EQ(page->total, static_cast<int64_t>(pages_before[i].size())) << Describe(q);
    q.limit = 3;
    std::vector<std::string> paged;
    for (q.offset = 0; q.offset < 9; q.offset += 3) {
      auto part = store.ListWinnerPage(q);
      ASSERT_TRUE(part.ok());
      EXPECT_EQ(part->total, static_cast<int64_t>(pages_before[i].size())) << Describe(q);
      for (const WinnerSummary& e : part->entries) paged.push_back(e.record.task_key);
    }
    EXPECT_EQ(paged, pages_before[i]) << Describe(q);
  }
  // A summary: every field but the payload, the cubin's length, content OK.
  WinnerQuery q;
  q.task_key = Key(3);
  q.check_content = true;
  auto one = store.ListWinnerPage(q);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->entries.size(), 1u);
  EXPECT_EQ(one->entries[0].cubin_bytes, 700000);
  EXPECT_TRUE(one->entries[0].content_ok);
  EXPECT_TRUE(one->entries[0].record.cubin.empty());
  EXPECT_EQ(one->entries[0].record.launch_plan_json, entries_[3].launch_plan_json);
  EXPECT_EQ(one->entries[0].record.hits, entries_[3].hits);

  // The indexes, the counts and integrity; a bundle round trip.
  EXPECT_EQ(RawSql(path_, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
                          " ('winners_newest', 'winners_arch_newest', 'winners_speedup', 'winners_hits')"),
            "4");
  EXPECT_EQ(RawSql(path_, "SELECT count(*) FROM sqlite_master WHERE name = 'winners_v5'"), "0");
  EXPECT_EQ(RawSql(path_, "SELECT n FROM winner_counts WHERE arch = 'sm_90' AND verified = 1"), "4");
  EXPECT_EQ(RawSql(path_, "SELECT n FROM winner_counts WHERE arch = 'sm_80' AND verified = 0"), "1");
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity().ToString();
  const std::string bundle = dir_ + "/all.json";
  auto exported = ExportBundle(store, bundle, "");
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_EQ(exported->entries, 6);  // the verified ones
  auto other = Store::Open(dir_ + "/other/kernels.db");
  ASSERT_TRUE(other.ok());
  auto imported = ImportBundle(**other, bundle, "", /*trust=*/true);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->stored, 6);
  auto copy = (*other)->GetWinner(Key(3));
  ASSERT_TRUE(copy.ok() && copy->has_value());
  EXPECT_EQ((*copy)->cubin, entries_[3].cubin);
  EXPECT_EQ((*copy)->content_hash, entries_[3].content_hash);

  // Reopening migrates nothing more.
  opened->reset();
  ASSERT_TRUE(Store::Open(path_).ok());
  EXPECT_EQ(DumpWinners(path_), before);
}

TEST_F(SchemaMigrationTest, SummaryColumnsLieBeforeThePayload) {
  auto store = Store::Open(path_);
  ASSERT_TRUE(store.ok());
  // Column positions (cid) of the new table.
  auto cid = [this](const std::string& column) {
    return std::stoi(RawSql(path_, "SELECT cid FROM pragma_table_info('winners') WHERE name = '" + column + "'"));
  };
  EXPECT_EQ(RawSql(path_, "SELECT count(*) FROM pragma_table_info('winners')"), "21");
  EXPECT_EQ(cid("cubin"), 20);
  EXPECT_EQ(cid("source"), 19);
  for (const char* summary : {"task_key", "arch", "verified", "created_at", "speedup", "hits", "last_used_at",
                              "baseline_us", "best_us", "reduced_precision", "gpu_name", "origin",
                              "candidate_hash", "input_specs", "content_hash", "pulled_from", "versions_json"}) {
    EXPECT_LT(cid(summary), cid("graph_canonical")) << summary;
  }
  EXPECT_LT(cid("graph_canonical"), cid("launch_plan_json"));
  EXPECT_LT(cid("launch_plan_json"), cid("source"));
  EXPECT_EQ(RawSql(path_, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'winners'"), "4");
}

TEST_F(SchemaMigrationTest, ProcessesOpeningAVersion4CacheAtOnceMigrateItOnce) {
  WriteVersion4Cache();
  const auto before = DumpWinners(path_);
  constexpr int kOpeners = 4;
  std::vector<std::thread> threads;
  std::vector<Status> results(kOpeners, Status::Ok());
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([this, i, &results] {
      auto s = Store::Open(path_);  // a connection of its own, as another process has
      if (!s.ok()) {
        results[i] = s.status();
        return;
      }
      auto page = (*s)->ListWinnerPage(WinnerQuery{});
      results[i] = page.ok() ? (page->total == 8 ? Status::Ok() : Status(StatusCode::kCorrupt, "total " +
                                                                             std::to_string(page->total)))
                             : page.status();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& st : results) EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(DumpWinners(path_), before);
  EXPECT_EQ(RawSql(path_, "SELECT sum(n) FROM winner_counts"), "8");
}

TEST_F(SchemaMigrationTest, NewerCacheIsRefusedAndLeftUntouched) {
  { ASSERT_TRUE(Store::Open(path_).ok()); }
  RawSql(path_, "PRAGMA user_version = " + std::to_string(kSchemaVersion + 1));
  RawSql(path_, "PRAGMA wal_checkpoint(TRUNCATE)");
  const auto bytes = fs::file_size(path_);
  const std::string schema = RawSql(path_, "SELECT group_concat(sql, ';') FROM sqlite_master");
  auto s = Store::Open(path_);
  EXPECT_EQ(s.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(fs::file_size(path_), bytes);
  EXPECT_EQ(RawSql(path_, "SELECT group_concat(sql, ';') FROM sqlite_master"), schema);
  EXPECT_EQ(RawSql(path_, "PRAGMA user_version"), std::to_string(kSchemaVersion + 1));
}

}  // namespace
}  // namespace dice::cache
