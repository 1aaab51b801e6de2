// cache/src/store_impl.h — what the Store's query files share: the Store's
// state (Store::Impl: the one write connection, store_connection.h, with its
// mutex, and the pool of read connections, store_readers.h) and the winners
// row reader. Private
// to cache/src: store.cc holds the single-row queries and writes,
// store_page.cc the paged summary queries of the list route and the
// dashboard, store_readers.cc the read connections.
//
// Thread-safety: the write connection (Impl's Connection base) is used with
// Impl::mu held; a read connection by the one thread holding its lease.
#pragma once

#include <sqlite3.h>

#include <mutex>
#include <string>
#include <utility>

#include "dice/cache/store.h"
#include "dice/core/status.h"
#include "sqlite_util.h"
#include "store_readers.h"

namespace dice::cache {

/// The Store's state: the write connection (the Connection base; every
/// write, and the reads that must see the writer's own state, under `mu`)
/// and the read connections (`readers`; Impl::Read).
struct Store::Impl : Connection {
  std::mutex mu;
  ReaderPool readers;

  /// Runs `fn(Connection&)` on a read connection of the pool, or, when no
  /// read connection could be opened, on the write connection under `mu`
  /// (the behaviour before there were readers). `fn` must only read.
  template <typename Fn>
  auto Read(Fn&& fn) -> decltype(fn(std::declval<Connection&>())) {
    ReaderPool::Lease lease = readers.Acquire(path);
    if (lease) return fn(*lease);
    std::lock_guard<std::mutex> lock(mu);
    return fn(static_cast<Connection&>(*this));
  }
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
