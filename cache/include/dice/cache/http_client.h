// dice/cache/http_client.h — client of the shared kernel cache (API v1,
// http_server.h).
//
// Get/Put/List map to the server's endpoints; every error is a dice::Status
// whose message names the method, the URL and, when the server answered,
// the HTTP status and its {"error": ...} text. A pulled record is checked
// on receipt (its content_hash must equal ContentHash of its bytes and its
// task_key the requested key), so a record damaged in transit or by the
// server is never returned. The client does not verify or run kernels; the
// runtime re-verifies a pulled kernel on its own GPU before use.
//
// Thread-safety: all methods are safe to call from several threads; calls on
// one CacheClient are serialised on one keep-alive connection, so use one
// client per thread for parallel requests.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

class CacheClient {
 public:
  /// `base_url`: "http://host:port" (also "https://..."; no path).
  /// `token`: bearer token sent with Put (empty: none is sent).
  /// `timeout`: connect, read and write timeout of each request.
  CacheClient(std::string base_url, std::string token,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
  ~CacheClient();
  CacheClient(const CacheClient&) = delete;
  CacheClient& operator=(const CacheClient&) = delete;

  /// GET /v1/health; returns the server's schema version.
  /// Errors: kIoError (no connection, unexpected status or body).
  Expected<int> Health();

  /// GET /v1/kernels/{task_key}: the winner or nullopt (404). Asks for the
  /// binary wire form (Accept: kWinnerBinaryType, http_server.h) and reads
  /// whichever form the answer's Content-Type names (JSON from servers
  /// without it).
  /// Errors: kInvalidArgument for a key that is not 64 lowercase hex (no
  /// request is sent) or a 4xx answer; kTimeout when the server did not
  /// answer in time; kIoError for no connection or a 5xx; kCorrupt when the
  /// body is malformed, its content_hash is not ContentHash of its bytes, or
  /// its task_key differs from the requested one.
  Expected<std::optional<WinnerRecord>> Get(const std::string& task_key);

  /// POST /v1/kernels/batch, in chunks of kMaxBatchKeys keys: the entries
  /// the server holds for `task_keys` (keys it lacks are simply absent from
  /// the result; order follows the server's answer). Every entry is checked
  /// like Get's (content hash, key asked for).
  /// Errors: kInvalidArgument for an invalid key (no request sent) or a 4xx;
  /// kTimeout; kIoError for no connection or a 5xx; kCorrupt for a malformed
  /// body or entry, an entry for a key not asked for, or a hash mismatch.
  Expected<std::vector<WinnerRecord>> GetMany(const std::vector<std::string>& task_keys);

  /// PUT /v1/kernels/{rec.task_key} with content_hash recomputed
  /// (ContentHash). Returns true when the server stored it, false when it
  /// kept its existing entry (a speedup >= rec.speedup).
  /// Errors: kInvalidArgument for an invalid key or a 4xx answer (401 no
  /// token, 403 wrong token or writes disabled, 413 too large, 400 rejected);
  /// kTimeout; kIoError for no connection or a 5xx.
  Expected<bool> Put(WinnerRecord rec);

  /// GET /v1/kernels?arch=... following every page: the winners for `arch`
  /// (all archs when empty), newest first, without source and cubin. After
  /// the first page it follows the server's next_after (keyset pages,
  /// after=KEY); a server that sends none is walked by page number.
  /// Errors as Get (kCorrupt for a malformed page or next_after;
  /// kInvalidArgument when the entry a keyset page follows was removed
  /// meanwhile: the server's 400).
  Expected<std::vector<WinnerRecord>> List(const std::string& arch = std::string());

  const std::string& base_url() const { return base_url_; }

 private:
  struct Impl;
  std::string base_url_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::cache
