// dice/cache/remote_cache.h — the runtime's view of a shared cache server:
// look a task key up remotely when the local cache misses, without ever
// slowing the model down when the server is slow or gone.
//
// The server is an HTTP cache server (http://, https://: CacheClient, one
// GET /v1/kernels/{key} per lookup) or a Redis server (redis://:
// RedisCacheClient, one EVAL per lookup), chosen by the URL's scheme
// (remote_url.h); both return records checked the same way (content hash,
// key asked for, size limit). Each lookup has a short timeout (default
// 300 ms). A transport failure, timeout or 5xx starts a
// back-off: for the next `backoff_initial` (doubling after each further
// failure, capped at `backoff_max`) every lookup returns "miss" at once
// without touching the network; the first success resets it. A 404 is a
// plain miss (no back-off). A record that arrives damaged (content hash,
// wrong key) is dropped and counted as a failure.
//
// A record whose (task key, candidate hash) is already in the local attempts
// table (e.g. a pulled copy that failed re-verification here) is not pulled
// again, unless options.trust. A found record is written to the local Store
// with pulled_from = the server's URL with its password masked and verified
// = options.trust (DESIGN.md "HTTP sharing": a
// pulled kernel is re-verified on the local GPU before first use unless the
// user trusts the server; the runtime does that through the Tuner).
//
// A Redis server whose maxmemory-policy is not "noeviction" can drop
// entries silently: after the first lookup that reaches it, RemoteCache
// says so once through options.warn.
//
// Passwords (redis://user:password@host) never appear in a `why`, a
// warning or pulled_from: they show as "***" (MaskUrlCredentials).
//
// Thread-safety: all methods are thread-safe (one mutex; lookups are
// serialised, which the back-off makes cheap when the server is down).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

/// How the runtime talks to a cache server.
struct RemoteCacheOptions {
  /// "http://host:port", "https://..." or "redis://[[user]:password@]host[:port][/db]"
  /// (remote_url.h); empty = no remote cache. Holds the password: never log it.
  std::string url;
  std::string token;    ///< HTTP bearer token (only writes need one; sent anyway)
  bool trust = false;   ///< store pulled entries as verified (skip re-verification)
  std::chrono::milliseconds timeout{300};          ///< connect/read/write timeout per request
  std::chrono::milliseconds backoff_initial{1000};  ///< quiet period after the first failure
  std::chrono::milliseconds backoff_max{60000};     ///< longest quiet period
  /// Largest entry (wire JSON, bytes) pushed to or pulled from Redis (the
  /// HTTP server applies its own body limit).
  size_t max_entry_bytes = kDefaultMaxBodyBytes;
  /// Where warnings go (the Redis eviction-policy one); empty = stderr,
  /// "dice: warning: <text>".
  std::function<void(const std::string&)> warn;

  /// url from $DICE_REMOTE_CACHE, token from $DICE_REMOTE_TOKEN, trust from
  /// $DICE_TRUST_REMOTE ("1", "true", "yes"), timeout from
  /// $DICE_REMOTE_TIMEOUT_MS (1..60000; junk or out of range is the default
  /// 300 after one warning, dice/core/env.h's EnvInt). Errors:
  /// kInvalidArgument for a URL that ParseRemoteUrl refuses (the message
  /// starts "DICE_REMOTE_CACHE: " and names the cause: unknown scheme,
  /// missing host, bad port, ...; the password masked).
  /// Programs call it at start-up: the CLI exits 2 on an error, the runtime
  /// reports it once and disables remote lookups.
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

/// One shared cache server as RemoteCache uses it. Implementations: the
/// HTTP client (CacheClient) and the Redis client (RedisCacheClient); the
/// error codes are CacheClient's (kInvalidArgument: the server is alive but
/// refused this key or entry; kNotFound never; others: transport, server
/// failure or damage).
class RemoteBackend {
 public:
  virtual ~RemoteBackend() = default;
  /// The entry for `task_key`, checked (content hash, key), or nullopt.
  virtual Expected<std::optional<WinnerRecord>> Get(const std::string& task_key) = 0;
  /// Stores `rec` unless the server holds one at least as fast; true when stored.
  virtual Expected<bool> Put(WinnerRecord rec) = 0;
};

class RemoteCache {
 public:
  /// Picks the backend by options.url's scheme; no I/O. A URL that
  /// ParseRemoteUrl refuses leaves the cache disabled: every Lookup and Push
  /// then fails at once with that error (FromEnv reports it earlier).
  /// REQUIRES: !options.url.empty().
  explicit RemoteCache(RemoteCacheOptions options);
  ~RemoteCache();
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  /// Looks `task_key` up on the server; when found, stores it in `local`
  /// (pulled_from = shown_url(), verified = trust; Store::PutWinner's rule
  /// applies) and returns the record as stored. nullopt on a miss, during
  /// back-off, or on any failure — `why` (optional) then says which. Never
  /// blocks longer than about 2x options.timeout (connect + read), and
  /// returns at once (no I/O) during a back-off.
  std::optional<WinnerRecord> Lookup(const std::string& task_key, Store* local, std::string* why = nullptr);

  /// Sends a verified winner to the server (its rule keeps the better
  /// speedup); true when the server stored it. Ignores the back-off.
  /// Errors: kInvalidArgument for an unverified record (only kernels proven
  /// on a GPU travel on), an invalid URL, or what the backend refuses;
  /// the backend's transport errors.
  Expected<bool> Push(const WinnerRecord& rec);

  RemoteCacheCounters counters() const;
  const RemoteCacheOptions& options() const { return options_; }
  /// options.url with its password masked: how messages name the server.
  const std::string& shown_url() const { return shown_url_; }

 private:
  std::optional<WinnerRecord> Keep(WinnerRecord rec, const std::string& task_key, Store* local, std::string* why);

  RemoteCacheOptions options_;
  std::string shown_url_;
  Status url_error_;  // ParseRemoteUrl's error; OK when backend_ is set
  mutable std::mutex mu_;
  std::unique_ptr<RemoteBackend> backend_;
  std::chrono::steady_clock::time_point quiet_until_{};
  std::chrono::milliseconds backoff_{0};
  RemoteCacheCounters counters_;
};

}  // namespace dice::cache
