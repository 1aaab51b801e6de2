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

}  // namespace dice::cache::testing
