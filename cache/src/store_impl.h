// cache/src/store_impl.h — what the Store's query files share: the
// connection with its prepared-statement cache and mutex (Store::Impl), and
// the winners row reader. Private to cache/src: store.cc holds the single-
// row queries and writes, store_page.cc the paged summary queries of the
// list route and the dashboard.
//
// Thread-safety: every member is used with Impl::mu held.
#pragma once

#include <sqlite3.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "dice/cache/store.h"
#include "dice/core/status.h"
#include "sqlite_util.h"

namespace dice::cache {

/// The connection, a prepared-statement cache and the mutex.
struct Store::Impl {
  sqlite3* db = nullptr;
  std::string path;
  std::mutex mu;
  std::unordered_map<std::string, sqlite3_stmt*> stmts;  // keyed by SQL text

  ~Impl() {
    for (auto& [sql, stmt] : stmts) sqlite3_finalize(stmt);
    if (db != nullptr) sqlite3_close_v2(db);
  }

  Status Error(int rc, const std::string& what) const { return sqlite::Error(db, rc, path, what); }

  // Prepared statement for `sql`, reset and with bindings cleared. Owned by
  // the cache; REQUIRES: mu held.
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

/// The winners columns in ReadWinnerRow's order (0..20).
inline constexpr const char* kWinnerColumns =
    "task_key, graph_canonical, input_specs, arch, gpu_name, origin, candidate_hash, source, cubin,"
    " launch_plan_json, baseline_us, best_us, speedup, reduced_precision, versions_json, created_at, content_hash,"
    " verified, pulled_from, hits, last_used_at";
/// The same with empty literals for source and cubin (summaries: one reader serves both).
inline constexpr const char* kWinnerSummaryColumns =
    "task_key, graph_canonical, input_specs, arch, gpu_name, origin, candidate_hash, '', '',"
    " launch_plan_json, baseline_us, best_us, speedup, reduced_precision, versions_json, created_at, content_hash,"
    " verified, pulled_from, hits, last_used_at";

/// The current row of a statement selecting kWinnerColumns (or the summary
/// form) as columns 0..20.
WinnerRecord ReadWinnerRow(sqlite3_stmt* s);

}  // namespace dice::cache
