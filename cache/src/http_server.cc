// cpp-httplib implementation of dice/cache/http_server.h. Notes:
//  - The socket is bound in Start (bind_to_port / bind_to_any_port) before
//    the accept loop starts on its thread, so a client may connect as soon
//    as Start returns (the kernel queues it in the listen backlog).
//  - Routes are fixed regular expressions over the decoded path; there is
//    no mount point, so no request is ever turned into a file access.
//  - The body limit is httplib's payload_max_length: an oversized request is
//    answered 413 before any handler runs.
//  - Tokens are compared with CRYPTO_memcmp (constant time) after a length
//    check.
//  - The request log line is written by httplib's logger hook, after the
//    answer went out, from the worker thread that served the request; the
//    pre-routing hook stamps the start in a thread_local (httplib runs a
//    request's hooks and handler on one thread). Requests refused before
//    routing (414, a malformed request line) are logged with 0 ms.
//  - The HTML pages are rendered in dashboard.cc; the wire forms of a
//    record (JSON and binary, Accept negotiation) live in wire_record.cc.
#include "dice/cache/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>

// spdlog as the other layers use it: header-only, on Debian's external fmt.
// dice_cache does not link fmt, so fmt is header-only here unless the
// target brings the shared library (FMT_SHARED).
#ifndef SPDLOG_FMT_EXTERNAL
#define SPDLOG_FMT_EXTERNAL 1
#endif
#if !defined(FMT_SHARED) && !defined(FMT_HEADER_ONLY)
#define FMT_HEADER_ONLY 1
#endif
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <utility>

#include "admission_gate.h"
#include "dice/core/env.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

// httplib serves a keep-alive connection on one worker until it closes or
// idles for the keep-alive timeout, so each open client connection holds a
// worker: with fewer workers than connections, a request waits up to that
// timeout (2 s) behind idle connections. 32 covers a 16-thread fleet burst
// with room; an idle worker costs a stack, not CPU.
constexpr int kWorkerThreads = 32;

// Requests one keep-alive connection may carry before the server closes it.
constexpr size_t kKeepAliveMaxRequests = 10000;

// How many list and batch handlers run at once (AdmissionGate):
// $DICE_CACHE_SERVE_HANDLERS (0..1024), by default 0 = no limit. Measured
// at 16 clients on 2 cores (docs/PERF.md, session 25): a gate of 2 cut a
// list-only run's keyset page p99 from 21-23 to 9.4 ms, but in the mixed
// run it left the gated lists a smaller share of the cores than the
// ungated GETs, and page=N lists (old clients, 3-5 ms of handler each) went
// from p99 34 to 47-55 ms; keyset lists there were as fast without it.
size_t HandlersFromEnv() { return static_cast<size_t>(EnvInt("DICE_CACHE_SERVE_HANDLERS", 0, 0, 1024)); }

json ErrorJson(const std::string& msg) { return json{{"error", msg}}; }

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

// Parses a positive integer query parameter; false when malformed.
bool ParsePositive(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v <= 0) return false;
  *out = v;
  return true;
}

// Reason phrase for the error statuses the server produces on its own.
std::string ReasonPhrase(int status) {
  switch (status) {
    case 400: return "bad request";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 413: return "request body too large";
    case 414: return "request URI too long";
    default: return "HTTP status " + std::to_string(status);
  }
}

// The route label a request is counted under in /metrics.
std::string RouteOf(const httplib::Request& req) {
  if (req.path == "/v1/health") return "health";
  if (req.path == "/metrics") return "metrics";
  if (req.path == "/v1/kernels") return "list_kernels";
  if (req.path == "/v1/kernels/batch" && req.method == "POST") return "batch_get";
  if (req.path == "/" || req.path == "/dashboard") return "dashboard";
  if (req.path.rfind("/entry/", 0) == 0) return "entry";
  if (req.path.rfind("/v1/kernels/", 0) == 0) return req.method == "PUT" ? "put_kernel" : "get_kernel";
  return "other";
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The path as a log shows it: at most 200 bytes, control bytes, backslashes
// and non-ASCII as \xNN (a decoded %0a cannot forge a log line).
std::string LogPath(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (path.size() > 200) out += "...";
  return out;
}

// When the request this worker thread serves began (set by the pre-routing
// hook, cleared by the logger).
thread_local std::chrono::steady_clock::time_point t_request_start{};

void LogRequest(const httplib::Request& req, const httplib::Response& res) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = t_request_start == std::chrono::steady_clock::time_point{}
                        ? 0.0
                        : std::chrono::duration<double, std::milli>(now - t_request_start).count();
  t_request_start = {};
  // The arguments below cost two strings per request: skip them when the
  // line would be dropped (the default level of `cache serve` is info).
  if (!spdlog::should_log(spdlog::level::info)) return;
  spdlog::info("dice cache serve: {} {} route={} status={} bytes={} in={} ms={:.2f}",
               req.method.empty() ? "-" : req.method, LogPath(req.path), RouteOf(req), res.status, res.body.size(),
               req.body.size(), ms);
}

}  // namespace

bool IsValidTaskKey(const std::string& key) {
  if (key.size() != 64) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------

struct CacheServer::Impl {
  std::unique_ptr<Store> store;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<bool> loop_done{false};
  std::string host;
  int port = 0;
  std::string token;

  std::unique_ptr<AdmissionGate> gate;

  std::mutex metrics_mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (route, code) -> count

  void Count(const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(metrics_mu);
    ++requests[{RouteOf(req), res.status}];
  }

  void Install();
  void Health(httplib::Response& res);
  void Metrics(httplib::Response& res);
  void GetKernel(const httplib::Request& req, httplib::Response& res);
  void PutKernel(const httplib::Request& req, httplib::Response& res);
  void ListKernels(const httplib::Request& req, httplib::Response& res);
  void BatchGet(const httplib::Request& req, httplib::Response& res);
  void Dashboard(const httplib::Request& req, httplib::Response& res);
  void Entry(const httplib::Request& req, httplib::Response& res);
};

void CacheServer::Impl::Install() {
  httplib::Server& s = *server;
  s.Get("/v1/health", [this](const httplib::Request&, httplib::Response& res) { Health(res); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { Metrics(res); });
  // The JSON routes that read a page of the database (list, batch) run
  // inside the admission gate (HandlersFromEnv at once); the
  // answer is written to the socket after the handler returns, outside it.
  auto gated = [this](void (Impl::*handler)(const httplib::Request&, httplib::Response&)) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      AdmissionSlot slot(*gate);
      (this->*handler)(req, res);
    };
  };
  s.Get("/v1/kernels", gated(&Impl::ListKernels));
  s.Post("/v1/kernels/batch", gated(&Impl::BatchGet));
  // The HTML pages are not gated: a dashboard reads and hashes its 50 rows'
  // cubins (25-45 ms), and at 2% of a mixed run two of them held both slots
  // most of the time, so list pages queued behind them (session 25).
  s.Get("/", [this](const httplib::Request& req, httplib::Response& res) { Dashboard(req, res); });
  s.Get("/dashboard", [this](const httplib::Request& req, httplib::Response& res) { Dashboard(req, res); });
  s.Get(R"(/entry/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) { Entry(req, res); });
  // Not gated: a GET by key (0.14 ms of handler at p50, most of its cost
  // is the send after it) lost ~25% of its throughput to the hand-over and
  // kept its p99 (session 25); a write may wait up to the busy timeout
  // (10 s) for another process's write lock, and must not hold a slot the
  // reads need meanwhile.
  s.Get(R"(/v1/kernels/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) { GetKernel(req, res); });
  s.Put(R"(/v1/kernels/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) { PutKernel(req, res); });
  // Every 4xx/5xx without a body (unrouted paths, 413 from the body limit)
  // still answers with the JSON error shape.
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      Reply(res, res.status, ErrorJson(ReasonPhrase(res.status)));
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what += std::string(": ") + e.what();
    } catch (...) {
    }
    Reply(res, 500, ErrorJson(what));
  });
  // Counted before the response is written (httplib calls the post-routing
  // handler with the final status, error handler applied), so a client that
  // reads /metrics right after an answer always sees that answer counted;
  // the logger would run only after the bytes went out.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) { Count(req, res); });
  s.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = std::chrono::steady_clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_logger(LogRequest);
}

void CacheServer::Impl::Health(httplib::Response& res) {
  Reply(res, 200, json{{"status", "ok"}, {"schema", kSchemaVersion}});
}

void CacheServer::Impl::Metrics(httplib::Response& res) {
  std::ostringstream out;
  out << "# HELP dice_cache_http_requests_total HTTP requests served, by route and status code.\n"
      << "# TYPE dice_cache_http_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(metrics_mu);
    for (const auto& [key, count] : requests) {
      out << "dice_cache_http_requests_total{route=\"" << key.first << "\",code=\"" << key.second << "\"} "
          << count << "\n";
    }
  }
  WinnerQuery count_only;
  count_only.limit = 0;
  auto count = store->ListWinnerPage(count_only);
  if (count.ok()) {
    out << "# HELP dice_cache_entries Winners in the cache database.\n"
        << "# TYPE dice_cache_entries gauge\n"
        << "dice_cache_entries " << count->total << "\n";
  }
  res.status = 200;
  res.set_content(out.str(), "text/plain; version=0.0.4");
}

void CacheServer::Impl::GetKernel(const httplib::Request& req, httplib::Response& res) {
  const std::string key = req.matches[1];
  if (!IsValidTaskKey(key)) return Reply(res, 400, ErrorJson("task key must be 64 lowercase hex digits"));
  auto rec = store->GetWinner(key);
  if (!rec.ok()) return Reply(res, 500, ErrorJson(rec.status().ToString()));
  if (!rec->has_value()) return Reply(res, 404, ErrorJson("no entry for task key " + key));
  res.status = 200;
  // What set_content does, without its copy of the (cubin-sized) body.
  const bool binary = AcceptsWinnerBinary(req.get_header_value("Accept"));
  res.body = binary ? WinnerToWireBinary(**rec) : WinnerToWireJson(**rec, true);
  res.set_header("Content-Type", binary ? std::string(kWinnerBinaryType) : std::string("application/json"));
  res.set_header("Vary", "Accept");
}

void CacheServer::Impl::PutKernel(const httplib::Request& req, httplib::Response& res) {
  if (token.empty()) return Reply(res, 403, ErrorJson("writes are disabled on this server (no token configured)"));
  if (!req.has_header("Authorization")) {
    res.set_header("WWW-Authenticate", "Bearer");
    return Reply(res, 401, ErrorJson("missing bearer token"));
  }
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
  if (given.size() != token.size() || CRYPTO_memcmp(given.data(), token.data(), token.size()) != 0) {
    return Reply(res, 403, ErrorJson("invalid bearer token"));
  }
  const std::string key = req.matches[1];
  if (!IsValidTaskKey(key)) return Reply(res, 400, ErrorJson("task key must be 64 lowercase hex digits"));
  auto rec = WinnerFromWireJson(req.body);
  if (!rec.ok()) return Reply(res, 400, ErrorJson(rec.status().message()));
  if (rec->task_key != key) {
    return Reply(res, 400, ErrorJson("body task_key '" + rec->task_key + "' does not match the path key " + key));
  }
  const std::string expected = ContentHash(*rec);
  if (rec->content_hash != expected) {
    return Reply(res, 400, ErrorJson("content hash mismatch: body says '" + rec->content_hash +
                                     "', source/cubin/launch plan hash to " + expected));
  }
  const double speedup = rec->speedup;
  auto stored = store->PutWinner(std::move(*rec));
  if (!stored.ok()) return Reply(res, 500, ErrorJson(stored.status().ToString()));
  json body{{"stored", *stored}, {"task_key", key}, {"content_hash", expected}};
  if (!*stored) {
    body["reason"] = "kept the existing entry (its speedup is >= " + std::to_string(speedup) + ")";
  }
  Reply(res, *stored ? 201 : 200, body);
}

void CacheServer::Impl::ListKernels(const httplib::Request& req, httplib::Response& res) {
  int page = 1, page_size = kDefaultPageSize;
  if (req.has_param("page") && !ParsePositive(req.get_param_value("page"), &page)) {
    return Reply(res, 400, ErrorJson("page must be a positive integer"));
  }
  if (req.has_param("page_size") &&
      (!ParsePositive(req.get_param_value("page_size"), &page_size) || page_size > kMaxPageSize)) {
    return Reply(res, 400, ErrorJson("page_size must be an integer in [1, " + std::to_string(kMaxPageSize) + "]"));
  }
  WinnerQuery query;
  query.arch = req.get_param_value("arch");
  query.limit = page_size;
  const bool keyset = req.has_param("after");
  if (keyset) {
    if (req.has_param("page")) return Reply(res, 400, ErrorJson("after and page exclude each other"));
    query.after = req.get_param_value("after");
    if (!IsValidTaskKey(query.after)) return Reply(res, 400, ErrorJson("after must be a task key (64 lowercase hex digits)"));
  } else {
    query.offset = static_cast<int64_t>(page - 1) * page_size;
  }
  auto found = store->ListWinnerPage(query);
  if (!found.ok() && found.status().code() == StatusCode::kNotFound) {
    return Reply(res, 400, ErrorJson("after: no entry for task key " + query.after +
                                     " (removed since the previous page?); list again without after"));
  }
  if (!found.ok()) return Reply(res, 500, ErrorJson(found.status().ToString()));
  // Entries are spliced in as already-serialised JSON.
  std::string entries;
  for (const WinnerSummary& e : found->entries) {
    if (!entries.empty()) entries += ',';
    entries += WinnerToWireJson(e.record, false);
  }
  // The last key of a full page: where the next keyset page starts.
  const bool full = static_cast<int>(found->entries.size()) == page_size;
  const std::string next = full ? json(found->entries.back().record.task_key).dump() : "null";
  const std::string where = keyset ? "\"after\":" + json(query.after).dump() : "\"page\":" + std::to_string(page);
  res.status = 200;
  res.set_content("{\"entries\":[" + entries + "]," + where + ",\"page_size\":" + std::to_string(page_size) +
                      ",\"total\":" + std::to_string(found->total) + ",\"next_after\":" + next + "}",
                  "application/json");
}

void CacheServer::Impl::BatchGet(const httplib::Request& req, httplib::Response& res) {
  json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Reply(res, 400, ErrorJson("malformed JSON"));
  if (!j.is_object() || !j.contains("keys") || !j["keys"].is_array()) {
    return Reply(res, 400, ErrorJson("body must be {\"keys\": [task keys]}"));
  }
  const json& keys = j["keys"];
  if (keys.empty() || keys.size() > static_cast<size_t>(kMaxBatchKeys)) {
    return Reply(res, 400, ErrorJson("keys must hold 1 to " + std::to_string(kMaxBatchKeys) + " task keys, got " +
                                     std::to_string(keys.size())));
  }
  for (const json& k : keys) {
    if (!k.is_string() || !IsValidTaskKey(k.get<std::string>())) {
      return Reply(res, 400, ErrorJson("every key must be 64 lowercase hex digits"));
    }
  }
  std::string entries;
  json missing = json::array(), damaged = json::array();
  for (const json& k : keys) {
    const std::string key = k.get<std::string>();
    auto rec = store->GetWinner(key);
    if (!rec.ok()) {
      if (rec.status().code() != StatusCode::kCorrupt) return Reply(res, 500, ErrorJson(rec.status().ToString()));
      damaged.push_back(key);
    } else if (!rec->has_value()) {
      missing.push_back(key);
    } else {
      if (!entries.empty()) entries += ',';
      entries += WinnerToWireJson(**rec, true);
    }
  }
  // Entries are spliced in as already-serialised JSON (no re-parse of cubins).
  res.status = 200;
  res.set_content("{\"entries\":[" + entries + "],\"missing\":" + missing.dump() + ",\"damaged\":" + damaged.dump() + "}",
                  "application/json");
}

void CacheServer::Impl::Dashboard(const httplib::Request& req, httplib::Response& res) {
  auto query = ParseDashboardQuery(req.params);
  if (!query.ok()) return Reply(res, 400, ErrorJson(query.status().message()));
  auto page = store->ListWinnerPage(ToWinnerQuery(*query));
  if (!page.ok()) return Reply(res, 500, ErrorJson(page.status().ToString()));
  res.status = 200;
  res.set_content(RenderDashboard(*page, *query, UnixNow()), "text/html; charset=utf-8");
}

void CacheServer::Impl::Entry(const httplib::Request& req, httplib::Response& res) {
  const std::string key = req.matches[1];
  // A page for people: its errors are pages too (the /v1 routes answer JSON).
  auto error_page = [&res](int status, const std::string& message) {
    res.status = status;
    res.set_content(RenderErrorPage(status, message), "text/html; charset=utf-8");
  };
  if (!IsValidTaskKey(key)) return error_page(400, "task key must be 64 lowercase hex digits, not '" + key + "'");
  WinnerQuery query;
  query.task_key = key;
  query.limit = 1;
  query.with_source = true;
  query.check_content = true;
  auto page = store->ListWinnerPage(query);
  if (!page.ok()) return error_page(500, page.status().ToString());
  auto attempts = store->ListAttempts(key);
  if (!attempts.ok()) return error_page(500, attempts.status().ToString());
  if (page->entries.empty() && attempts->empty()) return error_page(404, "no entry and no attempts for task key " + key);
  res.status = 200;
  res.set_content(RenderEntryPage(key, page->entries.empty() ? nullptr : &page->entries.front(), *attempts, UnixNow()),
                  "text/html; charset=utf-8");
}

// ---------------------------------------------------------------------------

CacheServer::CacheServer() : impl_(std::make_unique<Impl>()) {}

CacheServer::~CacheServer() { Stop(); }

Status CacheServer::Start(const std::string& db_path, const std::string& host, int port,
                          const std::string& token, size_t max_body_bytes) {
  if (running()) return Status(StatusCode::kInvalidArgument, "cache server already running on " + url());
  if (max_body_bytes == 0) return Status(StatusCode::kInvalidArgument, "max_body_bytes must be > 0");
  if (port < 0 || port > 65535) {
    return Status(StatusCode::kInvalidArgument, "port " + std::to_string(port) + " out of range");
  }
  auto store = Store::Open(db_path);
  if (!store.ok()) return store.status();

  auto fresh = std::make_unique<Impl>();
  fresh->store = std::move(*store);
  fresh->token = token;
  fresh->host = host;
  fresh->server = std::make_unique<httplib::Server>();
  fresh->gate = std::make_unique<AdmissionGate>(HandlersFromEnv());
  httplib::Server& s = *fresh->server;
  s.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  s.set_payload_max_length(max_body_bytes);
  s.set_tcp_nodelay(true);  // no Nagle: small JSON answers would wait ~40 ms for the peer's delayed ACK
  s.set_keep_alive_timeout(2);  // bounds how long Stop waits for idle keep-alive connections
  // httplib closes a keep-alive connection after 5 requests by default: a
  // client then reconnects (connect, accept, a worker handover) every 5th
  // request, ~3% of both cores at 16 GET clients (perf, docs/PERF.md
  // session 25). Idle connections still close after the timeout above.
  s.set_keep_alive_max_count(kKeepAliveMaxRequests);
  s.set_read_timeout(10);
  s.set_write_timeout(10);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which
  // lets a second server bind a port already served and the kernel split
  // the connections between the two databases. Without it, a port in use is
  // a bind error.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const char*>(&yes), sizeof(yes));
  });
  fresh->Install();

  int bound = port;
  if (port == 0) {
    bound = s.bind_to_any_port(host);
    if (bound < 0) bound = 0;
  } else if (!s.bind_to_port(host, port)) {
    bound = 0;
  }
  if (bound <= 0) {
    return Status(StatusCode::kIoError, "cache server cannot bind " + host + ":" + std::to_string(port) +
                                            (port != 0 ? " (address in use, or not an address of this machine)" : ""));
  }
  fresh->port = bound;
  Impl* raw = fresh.get();
  fresh->thread = std::thread([raw] {
    raw->server->listen_after_bind();
    raw->loop_done = true;
  });
  // stop() is a no-op until the accept loop runs: wait for it, so that a
  // Stop right after Start cannot miss it.
  while (!raw->server->is_running() && !raw->loop_done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (raw->loop_done) {
    raw->thread.join();
    return Status(StatusCode::kIoError, "cache server on " + host + ":" + std::to_string(bound) + " stopped at once");
  }
  impl_ = std::move(fresh);
  return Status::Ok();
}

void CacheServer::Stop() {
  if (!impl_ || !impl_->server) return;
  impl_->server->stop();  // closes the listening socket; workers drain
  if (impl_->thread.joinable()) impl_->thread.join();  // listen_after_bind joins the pool
  impl_ = std::make_unique<Impl>();                  // closes the database
}

bool CacheServer::running() const { return impl_ && impl_->server && !impl_->loop_done; }

int CacheServer::port() const { return running() ? impl_->port : 0; }

std::string CacheServer::url() const {
  if (!running()) return std::string();
  const std::string& h = impl_->host;
  const bool v6 = h.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + h + "]" : h) + ":" + std::to_string(impl_->port);
}

}  // namespace dice::cache
