// Shared by the cache tests: a fixture with a fresh cache directory and an
// open Store in it, and a raw SQL probe on a connection of its own.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <gtest/gtest.h>

#include "dice/cache/store.h"

namespace dice::cache::testing {

/// Runs `sql` on a connection of its own (busy timeout 10 s) to the SQLite
/// file `path`; returns the first column of the first row ("" when none).
/// A failing prepare is a test failure naming SQLite's message.
inline std::string RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  const int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
  EXPECT_EQ(rc, SQLITE_OK) << sqlite3_errmsg(db);
  if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

/// The tables of schema v1 as schema.cc's step 0 created them (winners with
/// the payload before the summary columns, attempts, meta), frozen here so
/// that tests build files of old versions as those versions wrote them.
inline constexpr const char* kSchemaV1Tables =
      "CREATE TABLE winners (task_key TEXT PRIMARY KEY NOT NULL, graph_canonical TEXT NOT NULL,"
      " input_specs TEXT NOT NULL, arch TEXT NOT NULL, gpu_name TEXT NOT NULL, origin TEXT NOT NULL,"
      " candidate_hash TEXT NOT NULL, source TEXT NOT NULL, cubin BLOB NOT NULL, launch_plan_json TEXT NOT NULL,"
      " baseline_us REAL NOT NULL, best_us REAL NOT NULL, speedup REAL NOT NULL, reduced_precision INTEGER NOT NULL,"
      " versions_json TEXT NOT NULL, created_at INTEGER NOT NULL, content_hash TEXT NOT NULL);"
      "CREATE TABLE attempts (task_key TEXT NOT NULL, candidate_hash TEXT NOT NULL, origin TEXT NOT NULL,"
      " outcome TEXT NOT NULL, error TEXT NOT NULL, time_us REAL NOT NULL, created_at INTEGER NOT NULL,"
      " PRIMARY KEY (task_key, candidate_hash));"
      "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);";

/// The columns schema.cc's step 1 added to winners (schema v2).
inline constexpr const char* kSchemaV2Columns =
      "ALTER TABLE winners ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;"
      "ALTER TABLE winners ADD COLUMN pulled_from TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE winners ADD COLUMN hits INTEGER NOT NULL DEFAULT 0;"
      "ALTER TABLE winners ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;";

/// Creates the SQLite file `path` (absent or empty) as schema v4 left a
/// cache: schema.cc's steps 0-3 verbatim (winners with the payload before
/// the summary columns, attempts, meta, the v3 page indexes, tuning_claims),
/// user_version and meta('schema_version') 4, no rows. The SQL failing is a
/// test failure.
inline void CreateVersion4Cache(const std::string& path) {
  const std::string ddl =
      std::string(kSchemaV1Tables) + "INSERT INTO meta(key, value) VALUES ('created_by', 'dice');" +
      kSchemaV2Columns +
      "CREATE INDEX winners_newest ON winners(created_at DESC, arch, verified);"
      "CREATE INDEX winners_arch_newest ON winners(arch, created_at DESC, verified);"
      "CREATE INDEX winners_speedup ON winners(speedup DESC, arch, verified);"
      "CREATE INDEX winners_hits ON winners(hits DESC, arch, verified);"
      "CREATE TABLE tuning_claims (task_key TEXT PRIMARY KEY NOT NULL, owner_pid INTEGER NOT NULL,"
      " owner_host TEXT NOT NULL, owner_token TEXT NOT NULL, claimed_at INTEGER NOT NULL,"
      " expires_at INTEGER NOT NULL);"
      "PRAGMA user_version = 4;"
      "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '4');";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, ddl.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
}

/// Inserts `r` as it is (content_hash included: set it first) into the
/// winners table of the SQLite file `path`, naming every column, so it
/// works on any schema version from v2 on. `rowid` > 0 sets the rowid.
/// The SQL failing is a test failure.
inline void InsertWinnerRow(const std::string& path, const WinnerRecord& r, int64_t rowid = 0) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  const std::string sql = std::string("INSERT INTO winners (") + (rowid > 0 ? "rowid, " : "") +
                          "task_key, graph_canonical, input_specs, arch, gpu_name, origin, candidate_hash, source,"
                          " cubin, launch_plan_json, baseline_us, best_us, speedup, reduced_precision, versions_json,"
                          " created_at, content_hash, verified, pulled_from, hits, last_used_at) VALUES (" +
                          (rowid > 0 ? std::to_string(rowid) + ", " : "") +
                          "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,"
                          " ?20, ?21)";
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  auto text = [s](int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  text(1, r.task_key);
  text(2, r.graph_canonical);
  text(3, r.input_specs);
  text(4, r.arch);
  text(5, r.gpu_name);
  text(6, r.origin);
  text(7, r.candidate_hash);
  text(8, r.source);
  sqlite3_bind_blob(s, 9, r.cubin.data(), static_cast<int>(r.cubin.size()), SQLITE_TRANSIENT);
  text(10, r.launch_plan_json);
  sqlite3_bind_double(s, 11, r.baseline_us);
  sqlite3_bind_double(s, 12, r.best_us);
  sqlite3_bind_double(s, 13, r.speedup);
  sqlite3_bind_int(s, 14, r.reduced_precision ? 1 : 0);
  text(15, r.versions_json);
  sqlite3_bind_int64(s, 16, r.created_at);
  text(17, r.content_hash);
  sqlite3_bind_int(s, 18, r.verified ? 1 : 0);
  text(19, r.pulled_from);
  sqlite3_bind_int64(s, 20, r.hits);
  sqlite3_bind_int64(s, 21, r.last_used_at);
  EXPECT_EQ(sqlite3_step(s), SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(s);
  sqlite3_close(db);
}

/// A fresh directory under the system temp dir (mkdtemp, named
/// "dice-<test>-XXXXXX") holding an open Store at DatabasePath(dir_);
/// both are removed after the test.
class StoreInTempDirTest : public ::testing::Test {
 protected:
  explicit StoreInTempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("dice-" + prefix_ + "-XXXXXX")).string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    db_path_ = DatabasePath(dir_);
    auto s = Store::Open(db_path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string prefix_, dir_, db_path_;
  std::unique_ptr<Store> store_;
};

/// Every field of two winner records equal (the cubin byte for byte, NULs
/// included): what a wire or store round trip must keep.
inline void ExpectSameRecord(const WinnerRecord& a, const WinnerRecord& b) {
  EXPECT_EQ(a.task_key, b.task_key);
  EXPECT_EQ(a.graph_canonical, b.graph_canonical);
  EXPECT_EQ(a.input_specs, b.input_specs);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.gpu_name, b.gpu_name);
  EXPECT_EQ(a.origin, b.origin);
  EXPECT_EQ(a.candidate_hash, b.candidate_hash);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.launch_plan_json, b.launch_plan_json);
  EXPECT_DOUBLE_EQ(a.baseline_us, b.baseline_us);
  EXPECT_DOUBLE_EQ(a.best_us, b.best_us);
  EXPECT_DOUBLE_EQ(a.speedup, b.speedup);
  EXPECT_EQ(a.reduced_precision, b.reduced_precision);
  EXPECT_EQ(a.versions_json, b.versions_json);
  EXPECT_EQ(a.created_at, b.created_at);
  EXPECT_EQ(a.content_hash, b.content_hash);
}

}  // namespace dice::cache::testing
