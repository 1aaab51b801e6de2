// ReaderPool (store_readers.h): the Store's read-only connections.
#include "store_readers.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "dice/core/env.h"
#include "sqlite_util.h"

namespace dice::cache {
namespace {

// A read-only connection to `path`, checked with one read of the schema
// header (SQLite opens lazily: without it an unusable file would fail on
// the caller's first query instead of falling back). Null on failure.
std::unique_ptr<Connection> OpenReader(const std::string& path) {
  auto conn = std::make_unique<Connection>();
  conn->path = path;
  conn->read_only = true;
  int rc = sqlite3_open_v2(path.c_str(), &conn->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return nullptr;  // ~Connection closes the handle SQLite returns on failure too
  sqlite3_extended_result_codes(conn->db, 1);
  sqlite3_busy_timeout(conn->db, sqlite::kBusyTimeoutMs);
  if (!sqlite::Exec(conn->db, path, "PRAGMA schema_version").ok()) return nullptr;
  // Speed only: a failure leaves SQLite's defaults, which work too.
  const std::string tune = "PRAGMA cache_size=-" + std::to_string(ReaderPool::kReaderCacheKiB) +
                           "; PRAGMA mmap_size=" + std::to_string(ReaderPool::kReaderMmapBytes);
  sqlite3_exec(conn->db, tune.c_str(), nullptr, nullptr, nullptr);
  return conn;
}

}  // namespace

int ReaderPool::MaxFromEnv() {
  return static_cast<int>(EnvInt("DICE_CACHE_READ_CONNECTIONS", kDefaultMaxReaders, 0, 64));
}

ReaderPool::ReaderPool(int max_readers) : max_(std::clamp(max_readers, 0, 64)), failed_(max_ == 0) {}

ReaderPool::~ReaderPool() = default;

ReaderPool::Lease::Lease(Lease&& other) noexcept : pool_(other.pool_), conn_(std::move(other.conn_)) {
  other.pool_ = nullptr;
}

ReaderPool::Lease& ReaderPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (conn_ != nullptr) pool_->Release(std::move(conn_));
    pool_ = other.pool_;
    conn_ = std::move(other.conn_);
    other.pool_ = nullptr;
  }
  return *this;
}

ReaderPool::Lease::~Lease() {
  if (conn_ != nullptr) pool_->Release(std::move(conn_));
}

ReaderPool::Lease ReaderPool::Acquire(const std::string& path) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(conn));
    }
    if (failed_) return Lease();
    if (open_ < max_) break;
    returned_.wait(lock);
  }
  ++open_;  // reserved while opening outside the lock
  lock.unlock();
  std::unique_ptr<Connection> conn = OpenReader(path);
  lock.lock();
  if (conn == nullptr) {
    --open_;
    failed_ = true;
    returned_.notify_all();  // waiters fall back too
    return Lease();
  }
  return Lease(this, std::move(conn));
}

int ReaderPool::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

void ReaderPool::Release(std::unique_ptr<Connection> conn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(conn));
  }
  returned_.notify_one();
}

}  // namespace dice::cache
