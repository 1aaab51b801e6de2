// SQLite implementation of dice/cache/store.h: opening the file and the
// queries. The schema and its migrations are in schema.cc, the SQLite
// helpers (errors, binding, transactions, WAL switch) in sqlite_util.cc,
// the paged summary queries (ListWinnerPage) in store_page.cc.
// See the header for the contract; notes on the choices made here:
//  - One write connection per Store, opened with SQLITE_OPEN_NOMUTEX: the
//    Store's own mutex serialises every call on it, so SQLite's
//    per-connection mutex would be redundant. The reads a server answers
//    (GetWinner, ListWinnerPage, ListWinners, ListAttempts) run on read-only
//    connections of their own instead (store_readers.h: WAL lets readers
//    run beside the writer), each leased by one thread at a time.
//  - Every write runs in a BEGIN IMMEDIATE transaction: the write lock is
//    taken up front, so two processes never deadlock upgrading a read
//    transaction (which in WAL mode fails with SQLITE_BUSY_SNAPSHOT without
//    calling the busy handler).
//  - Open reads the file before writing anything to it: a file that is not a
//    SQLite database, a SQLite database that is not a DICE cache, or a cache
//    written by a newer build is reported and left byte-for-byte untouched.
#include "dice/cache/store.h"

#include <openssl/evp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "dice/core/ir.h"
#include "schema.h"
#include "sqlite_util.h"
#include "store_impl.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;
using sqlite::BindBlob;
using sqlite::BindText;
using sqlite::ColumnText;
using sqlite::NowUnixSeconds;
using sqlite::Transaction;

}  // namespace

std::string ContentHash(const WinnerRecord& rec) {
  // SHA-256 over each field preceded by its length ("<n>:<bytes>", source,
  // cubin, launch plan), so bytes cannot move between fields without
  // changing the hash. Fed to the digest piece by piece: the same digest as
  // hashing the concatenation, without copying the cubin into it (the
  // server hashes every GET's entry, the client every answer).
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  for (const std::string* field : {&rec.source, &rec.cubin, &rec.launch_plan_json}) {
    const std::string length = std::to_string(field->size()) + ':';
    ok = ok && EVP_DigestUpdate(ctx, length.data(), length.size()) == 1 &&
         EVP_DigestUpdate(ctx, field->data(), field->size()) == 1;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, digest, &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) {  // allocation failure inside OpenSSL: hash the concatenation instead
    std::string bytes;
    for (const std::string* field : {&rec.source, &rec.cubin, &rec.launch_plan_json}) {
      bytes += std::to_string(field->size()) + ':' + *field;
    }
    return ir::Sha256Hex(bytes);
  }
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

// ---------------------------------------------------------------------------
// Store

Store::Store(std::string path, std::unique_ptr<Impl> impl)
    : path_(std::move(path)), impl_(std::move(impl)) {}

Store::~Store() = default;

Expected<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  if (path.empty()) return Status(StatusCode::kInvalidArgument, "cache database path is empty");
  fs::path file(path);
  fs::path dir = file.parent_path();
  if (dir.empty()) dir = ".";

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Status(StatusCode::kIoError, "cannot create cache directory " + dir.string() +
                                            " for " + path + ": " + ec.message());
  }
  if (!fs::is_directory(dir, ec)) {
    return Status(StatusCode::kIoError,
                  "cache directory " + dir.string() + " for " + path + " is not a directory");
  }
  // WAL needs to create <path>-wal and <path>-shm beside the file.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status(StatusCode::kIoError, "cache directory " + dir.string() + " is not writable: " +
                                            std::strerror(errno));
  }
  bool existed = fs::exists(file, ec);
  if (existed) {
    if (fs::is_directory(file, ec)) {
      return Status(StatusCode::kIoError, "cache database " + path + " is a directory");
    }
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
      return Status(StatusCode::kIoError,
                    "cache database " + path + " is not readable and writable: " + std::strerror(errno));
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  int rc = sqlite3_open_v2(path.c_str(), &impl->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = sqlite::Error(impl->db, rc, path, "open");
    return Status(rc == SQLITE_NOTADB ? StatusCode::kCorrupt : StatusCode::kIoError, st.message());
  }
  sqlite3_extended_result_codes(impl->db, 1);
  sqlite3_busy_timeout(impl->db, sqlite::kBusyTimeoutMs);
  if (sqlite3_db_readonly(impl->db, "main") == 1) {
    return Status(StatusCode::kIoError, "cache database " + path + " could only be opened read-only");
  }

  // First touch is a read: a foreign file fails here with SQLITE_NOTADB
  // before anything has been written to it.
  auto version = ReadSchemaVersion(impl->db, path);
  if (!version.ok()) return version.status();

  // Switching to WAL needs an exclusive lock the first time (retried for
  // up to the busy timeout: a concurrent opener may hold the file briefly).
  DICE_RETURN_IF_ERROR(sqlite::EnableWalJournal(impl->db, path));
  // NORMAL is crash-safe in WAL mode (a kill -9 loses nothing committed; a
  // power loss may drop the last transactions but never corrupts).
  DICE_RETURN_IF_ERROR(impl->Exec("PRAGMA synchronous=NORMAL"));
  DICE_RETURN_IF_ERROR(MigrateSchema(impl->db, path));
  return std::unique_ptr<Store>(new Store(path, std::move(impl)));
}

namespace {

// Payload bytes of a row, as Stats and CollectGarbage count them.
constexpr const char* kPayloadBytesExpr =
    "(length(CAST(source AS BLOB)) + length(cubin) + length(CAST(launch_plan_json AS BLOB)) +"
    " length(CAST(graph_canonical AS BLOB)))";

}  // namespace

WinnerRecord ReadWinnerRow(sqlite3_stmt* s) {
  WinnerRecord r;
  r.task_key = ColumnText(s, 0);
  r.graph_canonical = ColumnText(s, 1);
  r.input_specs = ColumnText(s, 2);
  r.arch = ColumnText(s, 3);
  r.gpu_name = ColumnText(s, 4);
  r.origin = ColumnText(s, 5);
  r.candidate_hash = ColumnText(s, 6);
  r.source = ColumnText(s, 7);
  r.cubin = ColumnText(s, 8);
  r.launch_plan_json = ColumnText(s, 9);
  r.baseline_us = sqlite3_column_double(s, 10);
  r.best_us = sqlite3_column_double(s, 11);
  r.speedup = sqlite3_column_double(s, 12);
  r.reduced_precision = sqlite3_column_int(s, 13) != 0;
  r.versions_json = ColumnText(s, 14);
  r.created_at = sqlite3_column_int64(s, 15);
  r.content_hash = ColumnText(s, 16);
  r.verified = sqlite3_column_int(s, 17) != 0;
  r.pulled_from = ColumnText(s, 18);
  r.hits = sqlite3_column_int64(s, 19);
  r.last_used_at = sqlite3_column_int64(s, 20);
  return r;
}


Expected<std::optional<WinnerRecord>> Store::GetWinner(const std::string& task_key) {
  auto found = impl_->Read([&task_key](Connection& c) -> Expected<std::optional<WinnerRecord>> {
    auto stmt = c.Prepare("SELECT " + std::string(kWinnerColumns) + " FROM winners WHERE task_key = ?1");
    if (!stmt.ok()) return stmt.status();
    sqlite3_stmt* s = *stmt;
    BindText(s, 1, task_key);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      sqlite3_reset(s);
      return std::optional<WinnerRecord>();
    }
    if (rc != SQLITE_ROW) {
      Status st = c.Error(rc, "read winner " + task_key);
      sqlite3_reset(s);
      return st;
    }
    WinnerRecord r = ReadWinnerRow(s);
    sqlite3_reset(s);
    return std::optional<WinnerRecord>(std::move(r));
  });
  // The hash is checked after the connection went back to the pool.
  if (!found.ok() || !found->has_value()) return found;
  const WinnerRecord& r = **found;
  std::string computed = ContentHash(r);
  if (computed != r.content_hash) {
    return Status(StatusCode::kCorrupt, "cache database " + impl_->path + ": winner for task key " +
                                            task_key + " fails its content hash (stored " +
                                            r.content_hash + ", computed " + computed +
                                            "); not served");
  }
  return found;
}

Expected<bool> Store::PutWinner(WinnerRecord rec) {
  if (rec.task_key.empty()) {
    return Status(StatusCode::kInvalidArgument, "PutWinner: empty task key");
  }
  if (rec.created_at == 0) rec.created_at = NowUnixSeconds();
  rec.content_hash = ContentHash(rec);

  std::lock_guard<std::mutex> lock(impl_->mu);
  Transaction txn(impl_->db, impl_->path);
  DICE_RETURN_IF_ERROR(txn.Begin());
  {
    auto stmt = impl_->Prepare("SELECT speedup, verified, hits, last_used_at FROM winners WHERE task_key = ?1");
    if (!stmt.ok()) return stmt.status();
    BindText(*stmt, 1, rec.task_key);
    int rc = sqlite3_step(*stmt);
    double existing = 0.0;
    bool existing_verified = false;
    int64_t hits = 0, last_used = 0;
    if (rc == SQLITE_ROW) {
      existing = sqlite3_column_double(*stmt, 0);
      existing_verified = sqlite3_column_int(*stmt, 1) != 0;
      hits = sqlite3_column_int64(*stmt, 2);
      last_used = sqlite3_column_int64(*stmt, 3);
    }
    sqlite3_reset(*stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return impl_->Error(rc, "read winner " + rec.task_key);
    if (rc == SQLITE_ROW) {
      if (existing_verified && !rec.verified) return false;  // never trade a proven kernel for an unproven one
      if (existing_verified == rec.verified && existing >= rec.speedup) return false;  // keep the earlier / better
      if (rec.hits == 0) rec.hits = hits;
      if (rec.last_used_at == 0) rec.last_used_at = last_used;
    }
  }
  auto stmt = impl_->Prepare(
      "INSERT OR REPLACE INTO winners (task_key, graph_canonical, input_specs, arch, gpu_name,"
      " origin, candidate_hash, source, cubin, launch_plan_json, baseline_us, best_us, speedup,"
      " reduced_precision, versions_json, created_at, content_hash, verified, pulled_from, hits, last_used_at)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)");
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  BindText(s, 1, rec.task_key);
  BindText(s, 2, rec.graph_canonical);
  BindText(s, 3, rec.input_specs);
  BindText(s, 4, rec.arch);
  BindText(s, 5, rec.gpu_name);
  BindText(s, 6, rec.origin);
  BindText(s, 7, rec.candidate_hash);
  BindText(s, 8, rec.source);
  BindBlob(s, 9, rec.cubin);
  BindText(s, 10, rec.launch_plan_json);
  sqlite3_bind_double(s, 11, rec.baseline_us);
  sqlite3_bind_double(s, 12, rec.best_us);
  sqlite3_bind_double(s, 13, rec.speedup);
  sqlite3_bind_int(s, 14, rec.reduced_precision ? 1 : 0);
  BindText(s, 15, rec.versions_json);
  sqlite3_bind_int64(s, 16, rec.created_at);
  BindText(s, 17, rec.content_hash);
  sqlite3_bind_int(s, 18, rec.verified ? 1 : 0);
  BindText(s, 19, rec.pulled_from);
  sqlite3_bind_int64(s, 20, rec.hits);
  sqlite3_bind_int64(s, 21, rec.last_used_at);
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "write winner " + rec.task_key);
  DICE_RETURN_IF_ERROR(txn.Commit());
  return true;
}

Expected<bool> Store::RemoveWinner(const std::string& task_key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Transaction txn(impl_->db, impl_->path);
  DICE_RETURN_IF_ERROR(txn.Begin());
  auto del = impl_->Prepare("DELETE FROM winners WHERE task_key = ?1");
  if (!del.ok()) return del.status();
  BindText(*del, 1, task_key);
  int rc = sqlite3_step(*del);
  sqlite3_reset(*del);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "remove winner " + task_key);
  bool removed = sqlite3_changes(impl_->db) > 0;
  auto del_attempts = impl_->Prepare("DELETE FROM attempts WHERE task_key = ?1");
  if (!del_attempts.ok()) return del_attempts.status();
  BindText(*del_attempts, 1, task_key);
  rc = sqlite3_step(*del_attempts);
  sqlite3_reset(*del_attempts);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "remove attempts of " + task_key);
  DICE_RETURN_IF_ERROR(txn.Commit());
  return removed;
}

Expected<std::vector<WinnerRecord>> Store::ListWinners() {
  return impl_->Read([](Connection& c) -> Expected<std::vector<WinnerRecord>> {
    auto stmt = c.Prepare("SELECT " + std::string(kWinnerSummaryColumns) +
                          " FROM winners ORDER BY created_at DESC, task_key ASC");
    if (!stmt.ok()) return stmt.status();
    sqlite3_stmt* s = *stmt;
    std::vector<WinnerRecord> out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      out.push_back(ReadWinnerRow(s));
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return c.Error(rc, "list winners");
    return out;
  });
}

Expected<bool> Store::RecordHit(const std::string& task_key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare("UPDATE winners SET hits = hits + 1, last_used_at = ?2 WHERE task_key = ?1");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, task_key);
  sqlite3_bind_int64(*stmt, 2, NowUnixSeconds());
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "record hit " + task_key);
  return sqlite3_changes(impl_->db) > 0;
}

Expected<bool> Store::MarkVerified(const std::string& task_key, double baseline_us, double best_us) {
  if (!(best_us > 0) || !(baseline_us > 0)) {
    return Status(StatusCode::kInvalidArgument, "MarkVerified " + task_key + ": times must be > 0 µs (baseline " +
                                                    std::to_string(baseline_us) + ", best " +
                                                    std::to_string(best_us) + ")");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare(
      "UPDATE winners SET verified = 1, baseline_us = ?2, best_us = ?3, speedup = ?4 WHERE task_key = ?1");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, task_key);
  sqlite3_bind_double(*stmt, 2, baseline_us);
  sqlite3_bind_double(*stmt, 3, best_us);
  sqlite3_bind_double(*stmt, 4, baseline_us / best_us);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "mark verified " + task_key);
  return sqlite3_changes(impl_->db) > 0;
}

Expected<bool> Store::RemoveUnverifiedWinner(const std::string& task_key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare("DELETE FROM winners WHERE task_key = ?1 AND verified = 0");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, task_key);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "remove unverified winner " + task_key);
  return sqlite3_changes(impl_->db) > 0;
}

Expected<CacheStats> Store::Stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  CacheStats st;
  auto totals = impl_->Prepare(
      "SELECT count(*), coalesce(sum(verified = 0), 0), coalesce(sum(pulled_from <> ''), 0),"
      " coalesce(sum(hits), 0), coalesce(sum(" + std::string(kPayloadBytesExpr) + "), 0),"
      " coalesce(sum(baseline_us), 0), coalesce(sum(best_us), 0),"
      " (SELECT page_count FROM pragma_page_count) * (SELECT page_size FROM pragma_page_size)"
      " FROM winners");
  if (!totals.ok()) return totals.status();
  int rc = sqlite3_step(*totals);
  if (rc == SQLITE_ROW) {
    st.entries = sqlite3_column_int64(*totals, 0);
    st.unverified = sqlite3_column_int64(*totals, 1);
    st.pulled = sqlite3_column_int64(*totals, 2);
    st.hits = sqlite3_column_int64(*totals, 3);
    st.payload_bytes = sqlite3_column_int64(*totals, 4);
    const double base = sqlite3_column_double(*totals, 5), best = sqlite3_column_double(*totals, 6);
    st.total_speedup = best > 0 ? base / best : 0.0;
    st.file_bytes = sqlite3_column_int64(*totals, 7);
  }
  sqlite3_reset(*totals);
  if (rc != SQLITE_ROW) return impl_->Error(rc, "cache totals");
  // Geometric mean in C++ (SQLite's ln() is an optional build feature).
  auto speedups = impl_->Prepare("SELECT speedup FROM winners WHERE speedup > 0");
  if (!speedups.ok()) return speedups.status();
  double log_sum = 0;
  int64_t n = 0;
  while ((rc = sqlite3_step(*speedups)) == SQLITE_ROW) {
    log_sum += std::log(sqlite3_column_double(*speedups, 0));
    ++n;
  }
  sqlite3_reset(*speedups);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "cache speedups");
  st.geomean_speedup = n > 0 ? std::exp(log_sum / static_cast<double>(n)) : 0.0;
  auto archs = impl_->Prepare("SELECT arch, count(*) FROM winners GROUP BY arch ORDER BY arch");
  if (!archs.ok()) return archs.status();
  while ((rc = sqlite3_step(*archs)) == SQLITE_ROW) {
    st.archs.emplace_back(ColumnText(*archs, 0), sqlite3_column_int64(*archs, 1));
  }
  sqlite3_reset(*archs);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "cache archs");
  return st;
}

Expected<GcResult> Store::CollectGarbage(const GcOptions& options) {
  if (options.max_payload_bytes < 0 || options.older_than_s < 0) {
    return Status(StatusCode::kInvalidArgument, "CollectGarbage: bounds must be >= 0 (max_payload_bytes " +
                                                    std::to_string(options.max_payload_bytes) + ", older_than_s " +
                                                    std::to_string(options.older_than_s) + ")");
  }
  const int64_t now = options.now != 0 ? options.now : NowUnixSeconds();
  std::lock_guard<std::mutex> lock(impl_->mu);
  GcResult result;
  {
    Transaction txn(impl_->db, impl_->path);
    DICE_RETURN_IF_ERROR(txn.Begin());
    // Every winner, least recently used first: (key, bytes, last touched).
    auto rows = impl_->Prepare("SELECT task_key, " + std::string(kPayloadBytesExpr) +
                               ", max(created_at, last_used_at) AS touched FROM winners"
                               " ORDER BY touched ASC, speedup ASC, task_key ASC");
    if (!rows.ok()) return rows.status();
    struct Row {
      std::string key;
      int64_t bytes;
      int64_t touched;
    };
    std::vector<Row> all;
    int64_t total = 0;
    int rc;
    while ((rc = sqlite3_step(*rows)) == SQLITE_ROW) {
      all.push_back({ColumnText(*rows, 0), sqlite3_column_int64(*rows, 1), sqlite3_column_int64(*rows, 2)});
      total += all.back().bytes;
    }
    sqlite3_reset(*rows);
    if (rc != SQLITE_DONE) return impl_->Error(rc, "list winners for gc");
    std::vector<const Row*> victims;
    for (const Row& r : all) {
      const bool too_old = options.older_than_s > 0 && r.touched < now - options.older_than_s;
      const bool too_big = options.max_payload_bytes > 0 && total > options.max_payload_bytes;
      if (!too_old && !too_big) continue;
      victims.push_back(&r);
      total -= r.bytes;
      result.removed_bytes += r.bytes;
    }
    for (const char* sql : {"DELETE FROM winners WHERE task_key = ?1", "DELETE FROM attempts WHERE task_key = ?1"}) {
      auto del = impl_->Prepare(sql);
      if (!del.ok()) return del.status();
      for (const Row* v : victims) {
        sqlite3_reset(*del);
        BindText(*del, 1, v->key);
        rc = sqlite3_step(*del);
        sqlite3_reset(*del);
        if (rc != SQLITE_DONE) return impl_->Error(rc, "gc remove " + v->key);
      }
    }
    DICE_RETURN_IF_ERROR(txn.Commit());
    result.removed = static_cast<int64_t>(victims.size());
    result.remaining = static_cast<int64_t>(all.size() - victims.size());
    result.remaining_bytes = total;
  }
  if (result.removed > 0) {
    // Give the space back: fold the WAL into the file, then rebuild it.
    // Both are best effort (another process may be reading); the removal
    // above is already committed.
    sqlite3_exec(impl_->db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
    sqlite3_exec(impl_->db, "VACUUM", nullptr, nullptr, nullptr);
  }
  return result;
}

Status Store::CheckIntegrity() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(impl_->db, "PRAGMA integrity_check(10)", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return impl_->Error(rc, "integrity_check");
  std::string findings;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (!findings.empty()) findings += "; ";
    findings += ColumnText(stmt, 0);
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "integrity_check");
  if (findings != "ok") {
    return Status(StatusCode::kCorrupt, "cache database " + impl_->path + " fails integrity_check: " + findings);
  }
  // Each (arch, verified) with rows in either place, where the two disagree.
  auto counts = impl_->Prepare(
      "SELECT arch, verified, coalesce((SELECT n FROM winner_counts c WHERE c.arch = g.arch AND c.verified = g.verified), 0),"
      " (SELECT count(*) FROM winners w WHERE w.arch = g.arch AND w.verified = g.verified)"
      " FROM (SELECT arch, verified FROM winner_counts UNION SELECT arch, verified FROM winners) g");
  if (!counts.ok()) return counts.status();
  while ((rc = sqlite3_step(*counts)) == SQLITE_ROW) {
    const int64_t kept = sqlite3_column_int64(*counts, 2), actual = sqlite3_column_int64(*counts, 3);
    if (kept == actual) continue;
    Status st(StatusCode::kCorrupt, "cache database " + impl_->path + ": winner_counts says " + std::to_string(kept) +
                                        " rows for arch '" + ColumnText(*counts, 0) + "', verified " +
                                        std::to_string(sqlite3_column_int(*counts, 1)) + "; the table has " +
                                        std::to_string(actual));
    sqlite3_reset(*counts);
    return st;
  }
  sqlite3_reset(*counts);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "compare winner_counts");
  return Status::Ok();
}

Status Store::RecordAttempt(AttemptRecord rec) {
  if (rec.task_key.empty() || rec.candidate_hash.empty()) {
    return Status(StatusCode::kInvalidArgument, "RecordAttempt: empty task key or candidate hash");
  }
  if (rec.created_at == 0) rec.created_at = NowUnixSeconds();
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare(
      "INSERT OR REPLACE INTO attempts (task_key, candidate_hash, origin, outcome, error, time_us,"
      " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  BindText(s, 1, rec.task_key);
  BindText(s, 2, rec.candidate_hash);
  BindText(s, 3, rec.origin);
  BindText(s, 4, rec.outcome);
  BindText(s, 5, rec.error);
  sqlite3_bind_double(s, 6, rec.time_us);
  sqlite3_bind_int64(s, 7, rec.created_at);
  int rc = sqlite3_step(s);  // a single statement is its own (IMMEDIATE-equivalent) transaction
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "record attempt " + rec.task_key + "/" + rec.candidate_hash);
  return Status::Ok();
}

Expected<std::vector<AttemptRecord>> Store::ListAttempts(const std::string& task_key) {
  return impl_->Read([&task_key](Connection& c) -> Expected<std::vector<AttemptRecord>> {
    auto stmt = c.Prepare(
        "SELECT task_key, candidate_hash, origin, outcome, error, time_us, created_at FROM attempts"
        " WHERE task_key = ?1 ORDER BY created_at ASC, candidate_hash ASC");
    if (!stmt.ok()) return stmt.status();
    sqlite3_stmt* s = *stmt;
    BindText(s, 1, task_key);
    std::vector<AttemptRecord> out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      AttemptRecord r;
      r.task_key = ColumnText(s, 0);
      r.candidate_hash = ColumnText(s, 1);
      r.origin = ColumnText(s, 2);
      r.outcome = ColumnText(s, 3);
      r.error = ColumnText(s, 4);
      r.time_us = sqlite3_column_double(s, 5);
      r.created_at = sqlite3_column_int64(s, 6);
      out.push_back(std::move(r));
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return c.Error(rc, "list attempts of " + task_key);
    return out;
  });
}

Expected<bool> Store::WasAttempted(const std::string& task_key, const std::string& candidate_hash) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare("SELECT 1 FROM attempts WHERE task_key = ?1 AND candidate_hash = ?2");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, task_key);
  BindText(*stmt, 2, candidate_hash);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return impl_->Error(rc, "read attempt " + task_key);
  return rc == SQLITE_ROW;
}

Expected<std::optional<std::string>> Store::GetMeta(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare("SELECT value FROM meta WHERE key = ?1");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, key);
  int rc = sqlite3_step(*stmt);
  std::optional<std::string> value;
  if (rc == SQLITE_ROW) value = ColumnText(*stmt, 0);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return impl_->Error(rc, "read meta " + key);
  return value;
}

Status Store::SetMeta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, key);
  BindText(*stmt, 2, value);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "write meta " + key);
  return Status::Ok();
}

std::string DefaultCacheDir() {
  const char* dir = std::getenv("DICE_CACHE_DIR");
  if (dir != nullptr && dir[0] != '\0') return dir;
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return (fs::path(home) / ".cache" / "dice").string();
  // No HOME (daemons, some containers): a per-user directory under /tmp.
  return "/tmp/dice-cache-" + std::to_string(::getuid());
}

std::string DatabasePath(const std::string& cache_dir) {
  return (fs::path(cache_dir) / "kernels.db").string();
}

}  // namespace dice::cache
