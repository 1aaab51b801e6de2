// dice/cache/remote_cache.h — the runtime's view of a shared cache server:
// look a task key up remotely when the local cache misses, without ever
// slowing the model down when the server is slow or gone.
//
// Each lookup is one GET /v1/kernels/{key} (CacheClient) with a short
// timeout (default 300 ms). A transport failure, timeout or 5xx starts a
// back-off: for the next `backoff_initial` (doubling after each further
// failure, capped at `backoff_max`) every lookup returns "miss" at once
// without touching the network; the first success resets it. A 404 is a
// plain miss (no back-off). A record that arrives damaged (content hash,
// wrong key) is dropped and counted as a failure.
//
// A record whose (task key, candidate hash) is already in the local attempts
// table (e.g. a pulled copy that failed re-verification here) is not pulled
// again, unless options.trust. A found record is written to the local Store with pulled_from = the
// server URL and verified = options.trust (DESIGN.md "HTTP sharing": a
// pulled kernel is re-verified on the local GPU before first use unless the
// user trusts the server; the runtime does that through the Tuner).
//
// Thread-safety: all methods are thread-safe (one mutex; lookups are
// serialised, which the back-off makes cheap when the server is down).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dice/cache/http_client.h"
#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

/// How the runtime talks to a cache server.
struct RemoteCacheOptions {
  std::string url;      ///< "http://host:port"; empty = no remote cache
  std::string token;    ///< bearer token (only writes need one; sent anyway)
  bool trust = false;   ///< store pulled entries as verified (skip re-verification)
  std::chrono::milliseconds timeout{300};          ///< connect/read/write timeout per request
  std::chrono::milliseconds backoff_initial{1000};  ///< quiet period after the first failure
  std::chrono::milliseconds backoff_max{60000};     ///< longest quiet period

  /// url from $DICE_REMOTE_CACHE, token from $DICE_REMOTE_TOKEN, trust from
  /// $DICE_TRUST_REMOTE ("1", "true", "yes"), timeout from
  /// $DICE_REMOTE_TIMEOUT_MS (1..60000). Errors: kInvalidArgument for a URL
  /// that does not start with http:// or https://, or a bad timeout.
  static Expected<RemoteCacheOptions> FromEnv();
};

/// Counters of one RemoteCache (for reports and tests).
struct RemoteCacheCounters {
  int64_t lookups = 0;    ///< Lookup calls
  int64_t requests = 0;   ///< of those, sent to the server
  int64_t hits = 0;       ///< found and stored locally
  int64_t misses = 0;     ///< 404
  int64_t failures = 0;   ///< transport errors, timeouts, 5xx, damaged records
  int64_t skipped = 0;    ///< answered "miss" at once because of the back-off
};

class RemoteCache {
 public:
  /// REQUIRES: !options.url.empty().
  explicit RemoteCache(RemoteCacheOptions options);
  ~RemoteCache();
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  /// Looks `task_key` up on the server; when found, stores it in `local`
  /// (pulled_from = url, verified = trust; Store::PutWinner's rule applies)
  /// and returns the record as stored. nullopt on a miss, during back-off,
  /// or on any failure — `why` (optional) then says which. Never blocks
  /// longer than about 2x options.timeout (connect + read), and returns at
  /// once (no I/O) during a back-off.
  std::optional<WinnerRecord> Lookup(const std::string& task_key, Store* local, std::string* why = nullptr);

  RemoteCacheCounters counters() const;
  const RemoteCacheOptions& options() const { return options_; }

 private:
  RemoteCacheOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<CacheClient> client_;
  std::chrono::steady_clock::time_point quiet_until_{};
  std::chrono::milliseconds backoff_{0};
  RemoteCacheCounters counters_;
};

}  // namespace dice::cache
