// cpp-httplib implementation of dice/cache/http_client.h.
#include "dice/cache/http_client.h"

#include <httplib.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>
#include <nlohmann/json.hpp>
#include <utility>

#include "dice/cache/http_server.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

// The server's {"error": ...} text, or the start of the body.
std::string ServerError(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto it = j.find("error");
    if (it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return body.substr(0, 200);
}

// Maps a failed transport or an unexpected HTTP status to a Status naming
// the request.
Status RequestError(const std::string& what, const httplib::Result& res) {
  if (!res) {
    const httplib::Error err = res.error();
    const StatusCode code =
        err == httplib::Error::ConnectionTimeout || err == httplib::Error::Read ? StatusCode::kTimeout
                                                                                  : StatusCode::kIoError;
    return Status(code, what + ": " + httplib::to_string(err));
  }
  const int status = res->status;
  const StatusCode code = status >= 400 && status < 500 ? StatusCode::kInvalidArgument : StatusCode::kIoError;
  return Status(code, what + ": HTTP " + std::to_string(status) + ": " + ServerError(res->body));
}

}  // namespace

struct CacheClient::Impl {
  std::mutex mu;  // httplib serialises requests on one client too; this keeps the setup simple
  std::unique_ptr<httplib::Client> http;
  std::string token;
};

CacheClient::CacheClient(std::string base_url, std::string token, std::chrono::milliseconds timeout)
    : base_url_(std::move(base_url)), impl_(std::make_unique<Impl>()) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  impl_->token = std::move(token);
  impl_->http = std::make_unique<httplib::Client>(base_url_);
  impl_->http->set_connection_timeout(timeout);
  impl_->http->set_read_timeout(timeout);
  impl_->http->set_write_timeout(timeout);
  impl_->http->set_keep_alive(true);
  impl_->http->set_tcp_nodelay(true);  // headers and body go out at once (no Nagle / delayed-ACK stall)
}

CacheClient::~CacheClient() = default;

Expected<int> CacheClient::Health() {
  const std::string what = "GET " + base_url_ + "/v1/health";
  if (!impl_->http->is_valid()) return Status(StatusCode::kInvalidArgument, what + ": invalid base URL");
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto res = impl_->http->Get("/v1/health");
  if (!res || res->status != 200) return RequestError(what, res);
  json j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || j.value("status", "") != "ok" || !j.contains("schema") || !j["schema"].is_number_integer()) {
    return Status(StatusCode::kIoError, what + ": unexpected health body: " + res->body.substr(0, 200));
  }
  return j["schema"].get<int>();
}

Expected<std::optional<WinnerRecord>> CacheClient::Get(const std::string& task_key) {
  const std::string path = "/v1/kernels/" + task_key;
  const std::string what = "GET " + base_url_ + path;
  if (!IsValidTaskKey(task_key)) {
    return Status(StatusCode::kInvalidArgument, what + ": task key must be 64 lowercase hex digits");
  }
  if (!impl_->http->is_valid()) return Status(StatusCode::kInvalidArgument, what + ": invalid base URL");
  std::lock_guard<std::mutex> lock(impl_->mu);
  // The binary form when the server has it (no base64 either side); a
  // server that does not know it answers JSON, read as before.
  const httplib::Headers accept{{"Accept", std::string(kWinnerBinaryType) + ", application/json;q=0.5"}};
  auto res = impl_->http->Get(path, accept);
  if (res && res->status == 404) return std::optional<WinnerRecord>();
  if (!res || res->status != 200) return RequestError(what, res);
  auto rec = IsWinnerBinaryType(res->get_header_value("Content-Type")) ? WinnerFromWireBinary(std::move(res->body))
                                                                        : WinnerFromWireJson(res->body);
  if (!rec.ok()) return Status(StatusCode::kCorrupt, what + ": malformed entry: " + rec.status().message());
  if (rec->task_key != task_key) {
    return Status(StatusCode::kCorrupt, what + ": server returned the entry for another key " + rec->task_key);
  }
  const std::string hash = ContentHash(*rec);
  if (hash != rec->content_hash) {
    return Status(StatusCode::kCorrupt, what + ": content hash mismatch (entry says " + rec->content_hash +
                                            ", bytes hash to " + hash + "); entry rejected");
  }
  return std::optional<WinnerRecord>(std::move(*rec));
}

Expected<std::vector<WinnerRecord>> CacheClient::GetMany(const std::vector<std::string>& task_keys) {
  const std::string what = "POST " + base_url_ + "/v1/kernels/batch";
  for (const std::string& key : task_keys) {
    if (!IsValidTaskKey(key)) {
      return Status(StatusCode::kInvalidArgument, what + ": task key '" + key + "' is not 64 lowercase hex digits");
    }
  }
  if (!impl_->http->is_valid()) return Status(StatusCode::kInvalidArgument, what + ": invalid base URL");
  std::vector<WinnerRecord> out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t begin = 0; begin < task_keys.size(); begin += kMaxBatchKeys) {
    const size_t end = std::min(task_keys.size(), begin + static_cast<size_t>(kMaxBatchKeys));
    std::unordered_set<std::string> asked(task_keys.begin() + begin, task_keys.begin() + end);
    json body{{"keys", json::array()}};
    for (size_t i = begin; i < end; ++i) body["keys"].push_back(task_keys[i]);
    auto res = impl_->http->Post("/v1/kernels/batch", body.dump(), "application/json");
    if (!res || res->status != 200) return RequestError(what, res);
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array()) {
      return Status(StatusCode::kCorrupt, what + ": malformed batch body");
    }
    for (const json& e : j["entries"]) {
      auto rec = WinnerFromWireJson(e.dump());
      if (!rec.ok()) return Status(StatusCode::kCorrupt, what + ": malformed entry: " + rec.status().message());
      if (asked.count(rec->task_key) == 0) {
        return Status(StatusCode::kCorrupt, what + ": server returned an entry for a key not asked for: " +
                                                rec->task_key);
      }
      const std::string hash = ContentHash(*rec);
      if (hash != rec->content_hash) {
        return Status(StatusCode::kCorrupt, what + ": entry " + rec->task_key + " fails its content hash (says " +
                                                rec->content_hash + ", bytes hash to " + hash + ")");
      }
      out.push_back(std::move(*rec));
    }
  }
  return out;
}

Expected<bool> CacheClient::Put(WinnerRecord rec) {
  const std::string path = "/v1/kernels/" + rec.task_key;
  const std::string what = "PUT " + base_url_ + path;
  if (!IsValidTaskKey(rec.task_key)) {
    return Status(StatusCode::kInvalidArgument, what + ": task key must be 64 lowercase hex digits");
  }
  if (!impl_->http->is_valid()) return Status(StatusCode::kInvalidArgument, what + ": invalid base URL");
  rec.content_hash = ContentHash(rec);
  const std::string body = WinnerToWireJson(rec, true);
  httplib::Headers headers;
  if (!impl_->token.empty()) headers.emplace("Authorization", "Bearer " + impl_->token);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto res = impl_->http->Put(path, headers, body, "application/json");
  if (!res || (res->status != 200 && res->status != 201)) return RequestError(what, res);
  json j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("stored") || !j["stored"].is_boolean()) {
    return Status(StatusCode::kIoError, what + ": unexpected response body: " + res->body.substr(0, 200));
  }
  return j["stored"].get<bool>();
}

Expected<std::vector<WinnerRecord>> CacheClient::List(const std::string& arch) {
  const std::string what = "GET " + base_url_ + "/v1/kernels";
  if (!impl_->http->is_valid()) return Status(StatusCode::kInvalidArgument, what + ": invalid base URL");
  std::vector<WinnerRecord> out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  // Keyset pages (after=) once the server shows it has them (next_after in
  // its answer); a server without them is walked by page number as before.
  std::string after;
  for (int page = 1;; ++page) {
    httplib::Params params{{"page_size", std::to_string(kMaxPageSize)}};
    if (after.empty()) {
      params.emplace("page", std::to_string(page));
    } else {
      params.emplace("after", after);
    }
    if (!arch.empty()) params.emplace("arch", arch);
    auto res = impl_->http->Get("/v1/kernels", params, httplib::Headers{});
    const std::string page_what = what + " (page " + std::to_string(page) + ")";
    if (!res || res->status != 200) return RequestError(page_what, res);
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array() || !j.contains("total") ||
        !j["total"].is_number_unsigned()) {
      return Status(StatusCode::kCorrupt, page_what + ": malformed list body");
    }
    const size_t total = j["total"].get<size_t>();
    for (const json& e : j["entries"]) {
      auto rec = WinnerSummaryFromWireJson(e.dump());
      if (!rec.ok()) return Status(StatusCode::kCorrupt, page_what + ": malformed entry: " + rec.status().message());
      out.push_back(std::move(*rec));
    }
    // Stop at the end, or when a page comes back empty (entries removed meanwhile).
    if (j["entries"].empty()) break;
    auto next = j.find("next_after");
    if (next != j.end()) {
      if (!next->is_string()) break;  // null: the last page
      if (!IsValidTaskKey(next->get<std::string>())) {
        return Status(StatusCode::kCorrupt, page_what + ": malformed next_after");
      }
      after = next->get<std::string>();
    } else if (out.size() >= total) {
      break;
    }
  }
  return out;
}

}  // namespace dice::cache
