// cache/src/sqlite_util.h — small SQLite helpers shared by the cache's
// schema (schema.cc) and its queries (store.cc). Private to cache/src.
//
// Every error names the database path and what was being done, and maps
// SQLite's result code to a StatusCode: damaged or foreign files
// (SQLITE_NOTADB, SQLITE_CORRUPT, SQLITE_FORMAT) are kCorrupt, everything
// else (locks, disk full, permissions) kIoError.
//
// Thread-safety: none of their own; callers hold the Store's mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "dice/core/status.h"

namespace dice::cache::sqlite {

/// Busy timeout of every cache connection (and of the WAL switch), ms.
inline constexpr int kBusyTimeoutMs = 10000;

/// kCorrupt for a damaged/foreign file's result code, kIoError otherwise.
/// `rc` may be an extended result code.
StatusCode CodeFor(int rc);

/// "cache database <path>: <what>: <sqlite message>" with CodeFor(rc).
/// `db` may be null (then SQLite's generic text for rc is used).
Status Error(sqlite3* db, int rc, const std::string& path, const std::string& what);

/// Runs SQL text without parameters (PRAGMAs, BEGIN/COMMIT, DDL; several
/// statements separated by ';' are allowed). Errors: the statement text and
/// SQLite's message, code per CodeFor.
Status Exec(sqlite3* db, const std::string& path, const char* sql);

/// Column `col` of the current row as bytes (TEXT or BLOB; NUL bytes kept);
/// "" for NULL.
std::string ColumnText(sqlite3_stmt* stmt, int col);

/// Binds text / blob parameter `i` (1-based) with its explicit length, so
/// NUL bytes survive; SQLite copies the bytes. Returns SQLite's code.
int BindText(sqlite3_stmt* s, int i, const std::string& v);
int BindBlob(sqlite3_stmt* s, int i, const std::string& v);

/// Unix time now, seconds.
int64_t NowUnixSeconds();

/// Switches the connection to the WAL journal. The first switch needs an
/// exclusive lock that a concurrent opener may hold briefly, and SQLite does
/// not always consult the busy handler there, so this retries on
/// SQLITE_BUSY/SQLITE_LOCKED for up to kBusyTimeoutMs. Errors: kIoError when
/// SQLite answers with another journal mode (e.g. on a file system without
/// shared memory) or the retries time out; CodeFor otherwise.
Status EnableWalJournal(sqlite3* db, const std::string& path);

/// RAII BEGIN IMMEDIATE ... COMMIT: the write lock is taken up front, so two
/// processes never deadlock upgrading a read transaction (in WAL mode that
/// fails with SQLITE_BUSY_SNAPSHOT without calling the busy handler). Rolls
/// back on destruction unless Commit() succeeded. `path` must outlive it.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  /// BEGIN IMMEDIATE. Errors as Exec (kIoError when the lock is not had
  /// within the busy timeout).
  Status Begin() {
    DICE_RETURN_IF_ERROR(Exec(db_, path_, "BEGIN IMMEDIATE"));
    open_ = true;
    return Status::Ok();
  }
  /// COMMIT; on failure the destructor still rolls back.
  Status Commit() {
    Status st = Exec(db_, path_, "COMMIT");
    if (st.ok()) open_ = false;
    return st;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool open_ = false;
};

}  // namespace dice::cache::sqlite
