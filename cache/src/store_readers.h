// cache/src/store_readers.h — the read connections of a Store (ReaderPool).
// Private to cache/src.
//
// Why: SQLite in WAL mode lets any number of readers run beside the one
// writer, each on its own snapshot of the last committed transaction
// (https://sqlite.org/wal.html, "Concurrency"). A Store with one connection
// and one mutex serialised every read behind every write and behind every
// other read: the server's list route, 16 clients at 100k entries, got
// 135-220 pages/s (docs/PERF.md "HTTP kernel cache at 100k entries"). So
// the reads that a server answers (GetWinner, ListWinnerPage, ListWinners,
// ListAttempts) take a read connection of this pool, while writes stay on
// the Store's one write connection and mutex.
//
// Connections are opened on demand (a Store used by one thread opens one),
// read-only (SQLITE_OPEN_READONLY), up to a maximum; a caller finding all of
// them leased waits for one. A statement that was reset holds no read lock,
// so an idle connection never keeps a snapshot (or a checkpoint) back.
// Read-after-write holds: a read that starts after a write committed (on
// any connection of the file) sees it.
//
// Thread-safety: Acquire and a Lease's release may run on any thread; the
// leased connection is used by the lease holder only.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store_connection.h"

namespace dice::cache {

/// A bounded pool of read-only SQLite connections to one database file.
class ReaderPool {
 public:
  /// Read connections at most, by default: the server runs 32 request
  /// threads on machines of 2 to 16 cores; beyond a few readers the reads
  /// queue on the cores, not on the connections.
  static constexpr int kDefaultMaxReaders = 4;

  /// Page cache of each read connection, KiB (SQLite's default is 2,000).
  /// A list page walks its index up to the page's offset: at 100k entries
  /// the created_at index alone is 3.9 MB, so with 2 MB every deep page
  /// re-read most of it from the file (pread), ~1.7 ms of a page's ~3 ms
  /// of SQL. 16 MiB holds the four page indexes; 4 readers cost 64 MiB at
  /// most, allocated as pages are read.
  static constexpr int kReaderCacheKiB = 16384;

  /// PRAGMA mmap_size of each read connection, bytes. Pages inside the map
  /// are read in place instead of by pread into the page cache: a
  /// summary's columns lie after the cubin, so every list row walks the
  /// cubin's overflow chain (~17 pages of 4 KiB at 66 KB), and every GET
  /// copies them. Debian's SQLite caps the map at 0x7fff0000 bytes
  /// (SQLITE_MAX_MMAP_SIZE), which this asks for: a larger file is read in
  /// place up to there and by pread beyond. SQLite remaps after the file
  /// changes size (https://sqlite.org/mmap.html); read-only connections
  /// never write through the map.
  static constexpr long long kReaderMmapBytes = 0x7fff0000LL;

  /// The maximum from $DICE_CACHE_READ_CONNECTIONS: an integer 0..64, 0 =
  /// no read connections (every read on the write connection, as before
  /// there were readers: an A/B switch for benchmarks); unset:
  /// kDefaultMaxReaders; anything else: kDefaultMaxReaders after one warning
  /// (EnvInt, dice/core/env.h).
  static int MaxFromEnv();

  /// `max_readers` 0..64 (clamped); 0: Acquire always returns an empty lease.
  explicit ReaderPool(int max_readers = MaxFromEnv());
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  /// A leased read connection; returned to the pool when destroyed. Empty
  /// (false) when no read connection could be opened.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    explicit operator bool() const { return conn_ != nullptr; }
    Connection& operator*() const { return *conn_; }

   private:
    friend class ReaderPool;
    Lease(ReaderPool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
    ReaderPool* pool_ = nullptr;
    std::unique_ptr<Connection> conn_;
  };

  /// An idle connection to `path` (every call passes the same path), a new
  /// one while fewer than the maximum are open, else waits for one to come
  /// back. Empty when opening one fails (a file system without shared
  /// memory for a second connection, descriptors exhausted); from then on
  /// the pool stays empty, and Store::Impl::Read uses the write connection.
  Lease Acquire(const std::string& path);

  /// Read connections opened so far (leased or idle).
  int open_count() const;

 private:
  void Release(std::unique_ptr<Connection> conn);

  const int max_;
  mutable std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
  int open_ = 0;                                   // guarded by mu_
  bool failed_ = false;                            // guarded by mu_: an open failed (or max 0), use none
};

}  // namespace dice::cache
