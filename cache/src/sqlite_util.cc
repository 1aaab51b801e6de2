// SQLite helpers of the cache (sqlite_util.h).
#include "sqlite_util.h"

#include <chrono>
#include <thread>

namespace dice::cache::sqlite {

StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_FORMAT:
      return StatusCode::kCorrupt;
    default:
      return StatusCode::kIoError;
  }
}

Status Error(sqlite3* db, int rc, const std::string& path, const std::string& what) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Status(CodeFor(rc), "cache database " + path + ": " + what + ": " + msg);
}

Status Exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Status(CodeFor(rc), "cache database " + path + ": '" + sql + "': " + msg);
}

std::string ColumnText(sqlite3_stmt* stmt, int col) {
  const void* p = sqlite3_column_blob(stmt, col);  // works for TEXT and BLOB, keeps NULs
  int n = sqlite3_column_bytes(stmt, col);
  if (p == nullptr || n <= 0) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
}

int BindText(sqlite3_stmt* s, int i, const std::string& v) {
  return sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

int BindBlob(sqlite3_stmt* s, int i, const std::string& v) {
  return sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status EnableWalJournal(sqlite3* db, const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    std::string got = rc == SQLITE_ROW ? ColumnText(stmt, 0) : std::string();
    sqlite3_finalize(stmt);
    if (rc == SQLITE_ROW && got == "wal") return Status::Ok();
    if (rc == SQLITE_ROW) {
      return Status(StatusCode::kIoError,
                    "cache database " + path + ": cannot enable WAL journal (mode is " + got + ")");
    }
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) {
      return Error(db, rc, path, "PRAGMA journal_mode=WAL");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Error(db, rc, path, "PRAGMA journal_mode=WAL (timed out)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace dice::cache::sqlite
