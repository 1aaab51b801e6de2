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
//  - The HTML pages are rendered in dashboard.cc.
#include "dice/cache/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

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
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <utility>

#include "wire_scan.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

// httplib serves a keep-alive connection on one worker until it closes or
// idles for the keep-alive timeout, so each open client connection holds a
// worker: with fewer workers than connections, a request waits up to that
// timeout (2 s) behind idle connections. 32 covers a 16-thread fleet burst
// with room; an idle worker costs a stack, not CPU.
constexpr int kWorkerThreads = 32;

// Reads a required field of the given JSON type into `out`.
Status TakeString(const json& j, const char* name, std::string* out) {
  auto it = j.find(name);
  if (it == j.end()) return Status(StatusCode::kInvalidArgument, std::string("missing field '") + name + "'");
  if (!it->is_string()) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

Status TakeNumber(const json& j, const char* name, double* out) {
  auto it = j.find(name);
  if (it == j.end()) return Status(StatusCode::kInvalidArgument, std::string("missing field '") + name + "'");
  if (!it->is_number()) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not a number");
  *out = it->get<double>();
  if (!std::isfinite(*out)) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not finite");
  return Status::Ok();
}

// Parses the wire object; `with_payload` selects whether source and
// cubin_base64 are required. With `spliced_cubin`, `text` is the object
// with cubin_base64's value cut out ("", wire::SplitPayload) and the
// cubin, already decoded, is taken from there.
Expected<WinnerRecord> ParseWireText(const std::string& text, bool with_payload, std::string* spliced_cubin) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(StatusCode::kInvalidArgument, "malformed JSON");
  if (!j.is_object()) return Status(StatusCode::kInvalidArgument, "JSON body is not an object");
  WinnerRecord r;
  DICE_RETURN_IF_ERROR(TakeString(j, "task_key", &r.task_key));
  DICE_RETURN_IF_ERROR(TakeString(j, "graph_canonical", &r.graph_canonical));
  DICE_RETURN_IF_ERROR(TakeString(j, "input_specs", &r.input_specs));
  DICE_RETURN_IF_ERROR(TakeString(j, "arch", &r.arch));
  DICE_RETURN_IF_ERROR(TakeString(j, "gpu_name", &r.gpu_name));
  DICE_RETURN_IF_ERROR(TakeString(j, "origin", &r.origin));
  DICE_RETURN_IF_ERROR(TakeString(j, "candidate_hash", &r.candidate_hash));
  DICE_RETURN_IF_ERROR(TakeString(j, "launch_plan_json", &r.launch_plan_json));
  DICE_RETURN_IF_ERROR(TakeString(j, "versions_json", &r.versions_json));
  DICE_RETURN_IF_ERROR(TakeString(j, "content_hash", &r.content_hash));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "baseline_us", &r.baseline_us));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "best_us", &r.best_us));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "speedup", &r.speedup));
  auto rp = j.find("reduced_precision");
  if (rp == j.end() || !rp->is_boolean()) {
    return Status(StatusCode::kInvalidArgument, "missing or non-boolean field 'reduced_precision'");
  }
  r.reduced_precision = rp->get<bool>();
  auto ca = j.find("created_at");
  if (ca != j.end()) {
    if (!ca->is_number_integer()) return Status(StatusCode::kInvalidArgument, "field 'created_at' is not an integer");
    r.created_at = ca->get<int64_t>();
  }
  if (with_payload) {
    DICE_RETURN_IF_ERROR(TakeString(j, "source", &r.source));
    std::string b64;
    DICE_RETURN_IF_ERROR(TakeString(j, "cubin_base64", &b64));
    if (spliced_cubin != nullptr) {
      if (!b64.empty()) return Status(StatusCode::kInternal, "cubin_base64 was not cut out");
      r.cubin = std::move(*spliced_cubin);
    } else {
      auto cubin = Base64Decode(b64);
      if (!cubin.ok()) return cubin.status().WithContext("field 'cubin_base64'");
      r.cubin = std::move(*cubin);
    }
  }
  return r;
}

// ParseWireText on `text`, by the fast path (wire_scan.h) where it applies
// and succeeds, else the whole text through nlohmann as before: the same
// record, and on any failure the same error, either way.
Expected<WinnerRecord> ParseWire(const std::string& text, bool with_payload) {
  if (with_payload) {
    std::string rest, cubin;
    std::string_view b64;
    if (wire::SplitPayload(text, &rest, &b64) && wire::DecodeBase64(b64, &cubin)) {
      auto fast = ParseWireText(rest, true, &cubin);
      if (fast.ok()) return fast;
    }
  }
  return ParseWireText(text, with_payload, nullptr);
}

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

std::string WinnerToWireJson(const WinnerRecord& rec, bool with_payload) {
  json j{{"task_key", rec.task_key},
         {"graph_canonical", rec.graph_canonical},
         {"input_specs", rec.input_specs},
         {"arch", rec.arch},
         {"gpu_name", rec.gpu_name},
         {"origin", rec.origin},
         {"candidate_hash", rec.candidate_hash},
         {"launch_plan_json", rec.launch_plan_json},
         {"baseline_us", rec.baseline_us},
         {"best_us", rec.best_us},
         {"speedup", rec.speedup},
         {"reduced_precision", rec.reduced_precision},
         {"versions_json", rec.versions_json},
         {"created_at", rec.created_at},
         {"content_hash", rec.content_hash}};
  // Invalid UTF-8 in a text field is replaced rather than thrown on.
  std::string out = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!with_payload) return out;
  // The payload is spliced in after the other fields: base64 text needs no
  // JSON escaping, so the serialiser never walks the cubin character by
  // character (it was the server's largest cost per GET).
  // It is encoded straight into the answer (no base64 string of its own to
  // copy), and the answer is allocated once.
  const std::string source = json(rec.source).dump(-1, ' ', false, json::error_handler_t::replace);
  const size_t b64_len = 4 * ((rec.cubin.size() + 2) / 3);
  out.reserve(out.size() + b64_len + source.size() + 32);
  out.pop_back();  // the closing '}'
  out += ",\"cubin_base64\":\"";
  const size_t at = out.size();
  out.resize(at + b64_len + 1);  // EVP_EncodeBlock writes a NUL after the text
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                reinterpret_cast<const unsigned char*>(rec.cubin.data()),
                                static_cast<int>(rec.cubin.size()));
  out.resize(at + static_cast<size_t>(n));
  out += "\",\"source\":";
  out += source;
  out += '}';
  return out;
}

Expected<WinnerRecord> WinnerFromWireJson(const std::string& text) { return ParseWire(text, true); }

Expected<WinnerRecord> WinnerSummaryFromWireJson(const std::string& text) { return ParseWire(text, false); }

// ---------------------------------------------------------------------------

struct CacheServer::Impl {
  std::unique_ptr<Store> store;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<bool> loop_done{false};
  std::string host;
  int port = 0;
  std::string token;

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
  s.Get("/v1/kernels", [this](const httplib::Request& req, httplib::Response& res) { ListKernels(req, res); });
  s.Post("/v1/kernels/batch", [this](const httplib::Request& req, httplib::Response& res) { BatchGet(req, res); });
  s.Get("/", [this](const httplib::Request& req, httplib::Response& res) { Dashboard(req, res); });
  s.Get("/dashboard", [this](const httplib::Request& req, httplib::Response& res) { Dashboard(req, res); });
  s.Get(R"(/entry/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) { Entry(req, res); });
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
  res.body = WinnerToWireJson(**rec, true);
  res.set_header("Content-Type", "application/json");
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
  query.offset = static_cast<int64_t>(page - 1) * page_size;
  query.limit = page_size;
  auto found = store->ListWinnerPage(query);
  if (!found.ok()) return Reply(res, 500, ErrorJson(found.status().ToString()));
  // Entries are spliced in as already-serialised JSON.
  std::string entries;
  for (const WinnerSummary& e : found->entries) {
    if (!entries.empty()) entries += ',';
    entries += WinnerToWireJson(e.record, false);
  }
  res.status = 200;
  res.set_content("{\"entries\":[" + entries + "],\"page\":" + std::to_string(page) + ",\"page_size\":" +
                      std::to_string(page_size) + ",\"total\":" + std::to_string(found->total) + "}",
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
  httplib::Server& s = *fresh->server;
  s.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  s.set_payload_max_length(max_body_bytes);
  s.set_tcp_nodelay(true);  // no Nagle: small JSON answers would wait ~40 ms for the peer's delayed ACK
  s.set_keep_alive_timeout(2);  // bounds how long Stop waits for idle keep-alive connections
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
