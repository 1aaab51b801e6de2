// cache/src/store_connection.h — one SQLite connection of a Store with its
// prepared-statement cache. Private to cache/src: the Store's write
// connection (Store::Impl, store_impl.h) and each of its read connections
// (ReaderPool, store_readers.h) is one.
//
// Thread-safety: none of its own; used by one thread at a time (the Store's
// mutex for the write connection, a ReaderPool lease for a read one).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "dice/core/status.h"
#include "sqlite_util.h"

namespace dice::cache {

/// A SQLite connection and its prepared statements (keyed by SQL text).
/// Used by one thread at a time (the caller's lock or lease says which).
struct Connection {
  sqlite3* db = nullptr;
  std::string path;
  std::unordered_map<std::string, sqlite3_stmt*> stmts;  // keyed by SQL text
  /// A read-only connection of the pool (ReaderPool). Only there may
  /// `counts` be used: PRAGMA data_version moves on commits by *other*
  /// connections, and every write to the file is another connection's.
  bool read_only = false;
  /// Store::ListWinnerPage's totals that count the table (an op filter:
  /// count SQL + filter values -> rows) as of PRAGMA data_version
  /// `counts_version` (-1: none yet). Such a count reads every row's IR; a
  /// page on an unchanged file reuses it. (The unfiltered and arch/verified
  /// totals are sums over winner_counts, schema v5, and need no memory.)
  std::unordered_map<std::string, int64_t> counts;
  int64_t counts_version = -1;

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    for (auto& [sql, stmt] : stmts) sqlite3_finalize(stmt);
    if (db != nullptr) sqlite3_close_v2(db);
  }

  Status Error(int rc, const std::string& what) const { return sqlite::Error(db, rc, path, what); }

  // Prepared statement for `sql`, reset and with bindings cleared. Owned by
  // the cache. Errors: the SQL text and SQLite's message (sqlite::Error).
  Expected<sqlite3_stmt*> Prepare(const std::string& sql) {
    auto it = stmts.find(sql);
    if (it != stmts.end()) {
      sqlite3_reset(it->second);
      sqlite3_clear_bindings(it->second);
      return it->second;
    }
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "prepare '" + sql + "'");
    stmts.emplace(sql, stmt);
    return stmt;
  }

  Status Exec(const char* sql) { return sqlite::Exec(db, path, sql); }
};

}  // namespace dice::cache
