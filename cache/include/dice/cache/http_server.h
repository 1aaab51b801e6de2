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
//        With "Accept: application/vnd.dice.winner" (AcceptsWinnerBinary) the
//        200 answer is WinnerToWireBinary(rec) with that Content-Type instead
//        (no base64); errors stay JSON. Both answers carry "Vary: Accept".
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
//        "page_size":S,"total":T,"next_after":K}; entries newest first,
//        without source and cubin; arch optional (all archs when absent or
//        empty); page is 1-based, page_size in [1, kMaxPageSize]; anything
//        else → 400. next_after is the last entry's key when the page is
//        full (more may follow), else null.
//   GET  /v1/kernels?after=K&page_size=S[&arch=A]  (keyset pages)
//        the page of entries that follow entry K in that order: the same
//        body with "after":K instead of "page". One index seek, whatever
//        the depth (page=P walks P*S entries). 400 when K is not 64
//        lowercase hex, when page is given too, or when the cache has no
//        entry K (removed since: start again without after).
//   POST /v1/kernels/batch           body {"keys":["<task_key>",...]} (1 to
//        kMaxBatchKeys keys, each 64 lowercase hex; else 400). 200
//        {"entries":[WinnerToWireJson(rec,true)...],"missing":[keys without
//        an entry],"damaged":[keys whose row fails its content hash]}.
//        A read: no token needed.
//   GET  / and /dashboard            200 text/html: one page (kDashboardPageSize
//        rows) of the entries, filtered and sorted by the query parameters
//        arch, op, verified (1|0), sort (newest|speedup|hits), page
//        (ParseDashboardQuery; anything else → 400); RenderDashboard.
//   GET  /entry/{task_key}           200 text/html: one key's winner (source,
//        launch plan, IR, every field) and its attempts (RenderEntryPage);
//        404 when the key has neither; 400 for a malformed key.
//   Both pages HTML-escape every stored field; damaged entries (content hash
//   mismatch, a launch plan that is not a JSON object) and unverified ones
//   are marked as such.
// The list route and the dashboard read one page in SQL
// (Store::ListWinnerPage): their cost does not grow with the cache.
// Logging: one spdlog line per request at info level, after the answer is
// written: method, path (query string and headers left out, so a bearer
// token never reaches a log), route label, status, response body bytes as
// sent (after compression, when the client asked for it), request body
// bytes and milliseconds from the end of the headers to the answer written.
// Paths are matched against fixed patterns only; no request ever maps to a
// file (a "../" or "%2e%2e" path is a 404 or 400).
//
// Thread-safety: requests are served by a pool of worker threads (concurrent
// clients are fine; the Store serialises database access). Start/Stop must
// not be called concurrently with each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
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
/// Rows on one dashboard page.
inline constexpr int kDashboardPageSize = 50;

/// `text` with &, <, >, " and ' replaced by HTML character references
/// (HTML5 "escaping a string"), safe inside element text and quoted
/// attribute values.
std::string HtmlEscape(const std::string& text);

/// What the dashboard shows: GET /?arch=sm_90&op=relu&verified=1&sort=speedup&page=2.
struct DashboardQuery {
  std::string arch;   ///< "" = every arch
  std::string op;     ///< "" = every op; else an IR op name the group uses ("relu")
  int verified = -1;  ///< 1 verified only, 0 unverified only, -1 both
  WinnerOrder order = WinnerOrder::kNewest;  ///< sort=newest|speedup|hits
  int page = 1;       ///< 1-based, kDashboardPageSize rows each
};

/// Reads the dashboard's query parameters (httplib::Params). Each is
/// optional and an empty value means unset (an HTML form sends them all):
/// arch 1..32 of [A-Za-z0-9_], op 1..32 of [a-z0-9_], verified "1" or "0",
/// sort "newest" | "speedup" | "hits", page a positive integer (< 10^8).
/// Errors: kInvalidArgument naming the parameter.
Expected<DashboardQuery> ParseDashboardQuery(const std::multimap<std::string, std::string>& params);

/// The Store query of a dashboard page: its filters and order, offset
/// (page - 1) * kDashboardPageSize, limit kDashboardPageSize, content hashes
/// checked (so damaged rows are marked).
WinnerQuery ToWinnerQuery(const DashboardQuery& query);

/// The dashboard page (API v1 "GET /"): a complete HTML5 document with a
/// filter form, and one table row per entry of `page` (Store::ListWinnerPage
/// for ToWinnerQuery(query)): ops (ir::Summary of graph_canonical, "?" when
/// it does not parse), inputs, arch, GPU, state ("verified", "unverified
/// (...)" or "damaged: <why>"; the row's class is verified / unverified /
/// damaged), hits, baseline and best µs ("%.2f"), speedup ("%.2fx"), the
/// candidate hash's first 12 hex digits, origin, age relative to `now` (unix
/// seconds; "45s", "3m", "5h", "2d") and the key's first 16 hex digits
/// linking to /entry/{key}; then links to the previous and next pages.
/// Column heads hits, speedup and age sort by them. An empty cache says how
/// to fill it (dice tune / dice cache pull / push); filters that match
/// nothing say so. Every stored field is HTML-escaped.
std::string RenderDashboard(const WinnerPage& page, const DashboardQuery& query, int64_t now);

/// The detail page of one task key (API v1 "GET /entry/{key}"): the
/// winner's state and every field, its launch plan (indented when it is a
/// JSON object, else verbatim), IR and CUDA source (`entry` from
/// ListWinnerPage with with_source and check_content; null when the key has
/// no winner), then `attempts` (candidate, origin, outcome, µs, age, error).
/// Every stored field is HTML-escaped.
std::string RenderEntryPage(const std::string& task_key, const WinnerSummary* entry,
                            const std::vector<AttemptRecord>& attempts, int64_t now);

/// The HTML page of a dashboard route's error (`status`, e.g. 400 for a
/// malformed key, 404 for an unknown one): the message, HTML-escaped, and a
/// link back to the dashboard. The JSON API routes answer errors as JSON.
std::string RenderErrorPage(int status, const std::string& message);

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

/// Media type of the binary wire form of a winner (GET /v1/kernels/{key}).
inline constexpr std::string_view kWinnerBinaryType = "application/vnd.dice.winner";
/// Longest Accept header AcceptsWinnerBinary reads (bytes); longer ones
/// keep JSON.
inline constexpr size_t kMaxAcceptBytes = 4096;

/// The binary wire form of a full record (API v1, GET with Accept
/// kWinnerBinaryType): one line of JSON holding WinnerToWireJson's fields,
/// "source" and "cubin_bytes" (the cubin's length in bytes) but not
/// "cubin_base64", then '\n', then the cubin's bytes as they are. The line
/// holds no raw '\n' (JSON escapes it). Size: ~0.6 KB + the cubin.
std::string WinnerToWireBinary(const WinnerRecord& rec);

/// Parses the binary form back (takes the body by value; the cubin is
/// moved out of it). Errors: kInvalidArgument when there is no '\n', the
/// header line is not a JSON object with every field of a full record (as
/// WinnerFromWireJson requires them, "cubin_bytes" an unsigned integer
/// instead of "cubin_base64"), or cubin_bytes differs from the number of
/// bytes after the line. Does not check content_hash (callers do).
Expected<WinnerRecord> WinnerFromWireBinary(std::string body);

/// True when the Accept header value `accept` asks for kWinnerBinaryType:
/// one of its comma-separated media ranges is that type (case-insensitive,
/// parameters allowed) without a weight of q=0. Wildcards (*/*,
/// application/*), an absent or malformed header, or one longer than
/// kMaxAcceptBytes give false: the JSON form, as before.
bool AcceptsWinnerBinary(std::string_view accept);

/// True when the Content-Type value `content_type` is kWinnerBinaryType
/// (case-insensitive, parameters ignored).
bool IsWinnerBinaryType(std::string_view content_type);

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
