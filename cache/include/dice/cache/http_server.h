// dice/cache/http_server.h — the shared kernel cache served over HTTP.
//
// A CacheServer exposes one SQLite Store (store.h) through a small versioned
// JSON API (cpp-httplib, DESIGN.md "HTTP sharing"); CacheClient
// (http_client.h) speaks it. The server stores and returns bytes only: it
// never compiles, loads or runs a kernel it receives; clients re-verify a
// pulled kernel on their own GPU.
//
// API, version 1 (every error body is {"error": "<reason>"}):
//   GET  /v1/health                  200 {"status":"ok","schema":<kSchemaVersion>}
//   GET  /metrics                    200 Prometheus text format 0.0.4:
//        dice_cache_http_requests_total{route="...",code="..."} and
//        dice_cache_entries (winners in the database).
//   GET  /v1/kernels/{task_key}      200 WinnerToWireJson(rec, true); 404 unknown key;
//                                    400 key not ^[0-9a-f]{64}$; 500 damaged row.
//   PUT  /v1/kernels/{task_key}      body WinnerToWireJson(rec, true), at most
//        max_body_bytes (else 413). Requires "Authorization: Bearer <token>":
//        missing → 401, wrong → 403, server started without a token → 403
//        (writes disabled). 400 for a malformed key, malformed JSON, a body
//        task_key different from the path key, or a content_hash that is not
//        ContentHash(rec) ("content hash mismatch"). The store's rule decides
//        (the better speedup stays; ties keep the earlier):
//        201 {"stored":true,...} or 200 {"stored":false,...}. Nothing is
//        written on any 4xx.
//   GET  /v1/kernels?arch=sm_90&page=1&page_size=100
//        200 {"entries":[WinnerToWireJson(rec,false)...],"page":P,
//        "page_size":S,"total":T}; entries newest first, without source and
//        cubin; arch optional (all archs when absent); page is 1-based,
//        page_size in [1, kMaxPageSize]; anything else → 400.
//   POST /v1/kernels/batch           body {"keys":["<task_key>",...]} (1 to
//        kMaxBatchKeys keys, each 64 lowercase hex; else 400). 200
//        {"entries":[WinnerToWireJson(rec,true)...],"missing":[keys without
//        an entry],"damaged":[keys whose row fails its content hash]}.
//        A read: no token needed.
//   GET  / and /dashboard            200 text/html: a plain table of the
//        entries (ops, input shapes, arch, speedup, origin, age, key), newest
//        first, at most kDashboardRows rows; every field HTML-escaped.
// Paths are matched against fixed patterns only; no request ever maps to a
// file (a "../" or "%2e%2e" path is a 404 or 400).
//
// Thread-safety: requests are served by a pool of worker threads (concurrent
// clients are fine; the Store serialises database access). Start/Stop must
// not be called concurrently with each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/store.h"
#include "dice/core/base64.h"
#include "dice/core/status.h"

namespace dice::cache {

/// Default request-body limit for PUT (bytes): 64 MiB, well above a cubin.
inline constexpr size_t kDefaultMaxBodyBytes = size_t{64} << 20;
/// Largest page_size the list endpoint accepts.
inline constexpr int kMaxPageSize = 1000;
/// Default page_size of the list endpoint.
inline constexpr int kDefaultPageSize = 100;
/// Most keys one batch get may ask for.
inline constexpr int kMaxBatchKeys = 256;
/// Most rows the dashboard page lists (newest first).
inline constexpr int kDashboardRows = 1000;

/// `text` with &, <, >, " and ' replaced by HTML character references
/// (HTML5 "escaping a string"), safe inside element text and quoted
/// attribute values.
std::string HtmlEscape(const std::string& text);

/// The dashboard page (API v1 "GET /"): a complete HTML5 document with one
/// table row per winner in `entries` (summaries suffice: source and cubin
/// are not shown): ops (ir::Summary of graph_canonical, or "?" when it does
/// not parse), input specs, arch, speedup ("%.2fx"), origin, age relative to
/// `now` (unix seconds; "45s", "3m", "5h", "2d") and the first 16 hex digits
/// of the key. Every field is HTML-escaped.
std::string RenderDashboard(const std::vector<WinnerRecord>& entries, int64_t now, size_t total_entries);

/// True when `key` is a task key as the API accepts it: exactly 64 lowercase
/// hex digits (Task::Key). Anything else (upper case, "..", slashes) is not.
bool IsValidTaskKey(const std::string& key);

/// The wire form of a WinnerRecord (API v1): a JSON object with every
/// WinnerRecord field under its own name, except that the cubin travels as
/// standard base64 (RFC 4648, padded) under "cubin_base64". With
/// `with_payload` false, "source" and "cubin_base64" are left out (the list
/// endpoint). content_hash is sent as held in `rec` (callers set it with
/// ContentHash).
std::string WinnerToWireJson(const WinnerRecord& rec, bool with_payload);

/// Parses the wire form back. Requires every field of a full record
/// (with payload) with the right JSON type; created_at may be absent (0).
/// Errors: kInvalidArgument naming the first missing/mistyped field, bad
/// base64 or malformed JSON. Does not check content_hash (callers do).
Expected<WinnerRecord> WinnerFromWireJson(const std::string& json);

/// Same for a list entry (no source, no cubin_base64; they stay empty).
Expected<WinnerRecord> WinnerSummaryFromWireJson(const std::string& json);

// Cubins travel as base64: dice::Base64Encode / Base64Decode (dice/core/base64.h).
using dice::Base64Decode;
using dice::Base64Encode;

/// An HTTP server over one cache database. Non-copyable; the destructor
/// stops it.
class CacheServer {
 public:
  CacheServer();
  ~CacheServer();
  CacheServer(const CacheServer&) = delete;
  CacheServer& operator=(const CacheServer&) = delete;

  /// Opens the database at `db_path` (Store::Open; created when absent),
  /// binds `host`:`port` (port 0 = an ephemeral port chosen by the kernel;
  /// read it back with port()) and serves on background threads until Stop.
  /// `token` is the bearer token PUT requires; an empty token disables
  /// writes (every PUT → 403) and makes a read-only mirror.
  /// `max_body_bytes` bounds a request body (413 above it).
  /// Returns when the socket is listening (a client may connect at once).
  /// Errors: kInvalidArgument when already running or max_body_bytes is 0;
  /// Store::Open's errors; kIoError when the address cannot be bound (names
  /// host:port).
  Status Start(const std::string& db_path, const std::string& host, int port,
               const std::string& token, size_t max_body_bytes = kDefaultMaxBodyBytes);

  /// Graceful shutdown: stops accepting, lets requests in flight finish,
  /// joins the worker threads and closes the database (a later Start may
  /// reopen it). No-op when not running.
  void Stop();

  /// True between a successful Start and Stop.
  bool running() const;
  /// The bound TCP port (the ephemeral one for port 0); 0 when not running.
  int port() const;
  /// "http://<host>:<port>" of the running server ("" when not running).
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::cache
