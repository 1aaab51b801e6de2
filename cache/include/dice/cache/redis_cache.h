// dice/cache/redis_cache.h — a Redis server as the shared kernel cache
// (DICE_REMOTE_CACHE=redis://[[user]:password@]host[:port][/db], remote_url.h),
// beside the HTTP server (http_server.h) and holding the same records.
//
// Layout, format v1: one Redis hash per task key,
//   dice:v1:kernel:<task_key> = {"speedup": "<%.17g>", "entry": WinnerToWireJson(rec, true)}
// so an entry is the very bytes the HTTP API sends, content_hash included.
// Put is one EVAL (atomic on the server): the entry is written when the key
// has none or its stored speedup is < rec.speedup (ties keep the earlier),
// the rule of Store::PutWinner and of the HTTP server. Get is one EVAL too:
// it returns the entry only when it is at most max_entry_bytes long (else
// its length, so an oversized entry never crosses the network), and the
// entry is checked on receipt as CacheClient::Get checks it (its task_key,
// its content_hash): a damaged entry is never returned. The client does not
// verify or run kernels; the runtime marks pulled entries unverified and
// re-verifies them on its own GPU (remote_cache.h).
//
// Redis drops keys when it reaches maxmemory under every maxmemory-policy
// but "noeviction": kernels would vanish silently. EvictionPolicy() reads the
// policy (CONFIG GET) so a caller can warn; RemoteCache does, once.
//
// Connection: one TCP connection (hiredis), opened by the first call and
// again after any transport error; connect, each read and each write are
// bounded by `timeout`. Each connect sends AUTH (user and password, or the
// password alone) when the URL has a password and SELECT when its database
// is not 0. SIGPIPE is blocked on the calling thread while a command is
// sent, so a server that went away cannot kill the process. Every message
// names the server as MaskUrlCredentials(url): no Status, log line or
// pulled_from ever holds the password.
//
// Thread-safety: all methods are thread-safe; calls are serialised on the
// one connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/cache/http_server.h"
#include "dice/cache/remote_url.h"
#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

/// Prefix of every key this cache writes (format v1); the task key follows.
inline constexpr const char* kRedisKeyPrefix = "dice:v1:kernel:";

class RedisCacheClient {
 public:
  /// `url`: a parsed redis:// URL (REQUIRES: url.scheme == kRedis);
  /// `shown_url`: how messages name the server (MaskUrlCredentials of the
  /// text `url` came from). `timeout`: connect, read and write timeout.
  /// `max_entry_bytes`: the largest entry (wire JSON, bytes) Put sends and
  /// Get accepts; the HTTP server's default body limit by default.
  /// Connects lazily (no I/O here).
  RedisCacheClient(RemoteUrl url, std::string shown_url,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(2000),
                   size_t max_entry_bytes = kDefaultMaxBodyBytes);
  ~RedisCacheClient();
  RedisCacheClient(const RedisCacheClient&) = delete;
  RedisCacheClient& operator=(const RedisCacheClient&) = delete;

  /// PING (connecting, AUTH and SELECT first when needed).
  /// Errors: kTimeout when the server did not answer in time; kIoError for
  /// no connection, a refused AUTH or SELECT, or an error reply.
  Status Ping();

  /// The entry for `task_key`, or nullopt when the server has none.
  /// Errors: kInvalidArgument for a key that is not 64 lowercase hex (nothing
  /// sent) or an entry longer than max_entry_bytes (refused, not
  /// transferred); kTimeout; kIoError as Ping; kCorrupt for a malformed
  /// entry, one for another key, or one whose content_hash is not
  /// ContentHash of its bytes ("content hash mismatch").
  Expected<std::optional<WinnerRecord>> Get(const std::string& task_key);

  /// Stores `rec` with its content_hash recomputed (ContentHash) unless the
  /// server holds an entry for rec.task_key with a speedup >= rec.speedup.
  /// Returns true when stored, false when the server kept its entry.
  /// Errors: kInvalidArgument for an invalid key, a speedup that is not
  /// finite, or an entry longer than max_entry_bytes (nothing sent);
  /// kTimeout; kIoError as Ping (also a full server: Redis's OOM reply).
  Expected<bool> Put(WinnerRecord rec);

  /// The server's maxmemory-policy ("noeviction", "allkeys-lru", ...).
  /// Errors: kUnsupported when the server refuses CONFIG GET (managed
  /// services often rename it); kTimeout; kIoError as Ping.
  Expected<std::string> EvictionPolicy();

  /// Sends one command (binary-safe arguments) and returns its reply as
  /// text: a string or status reply's bytes, an integer in decimal, "" for
  /// nil, an array's elements (recursively) joined by '\n'. For tests and
  /// diagnostics. Errors: kInvalidArgument for an empty argv or an error
  /// reply (its text); kTimeout; kIoError as Ping.
  Expected<std::string> Command(const std::vector<std::string>& argv);

  /// The server as messages name it (credentials masked).
  const std::string& shown_url() const { return shown_url_; }

 private:
  struct Impl;
  std::string shown_url_;
  std::unique_ptr<Impl> impl_;
};

/// The warning to give once for a Redis cache whose maxmemory-policy is
/// `policy`: "" for "noeviction" (Redis refuses writes when full instead of
/// dropping keys), else one sentence naming `shown_url`, the policy, the
/// consequence and the fix.
std::string EvictionPolicyWarning(const std::string& shown_url, const std::string& policy);

}  // namespace dice::cache
