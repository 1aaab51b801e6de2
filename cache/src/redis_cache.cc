// Implementation of dice/cache/redis_cache.h over hiredis (redis_connection.h).
#include "dice/cache/redis_cache.h"

#include <cmath>
#include <cstdio>
#include <mutex>
#include <utility>

#include "redis_connection.h"

namespace dice::cache {
namespace {

using redis_internal::ReplyPtr;

// KEYS[1] = the entry's key, ARGV[1] = the size limit (bytes). Returns nil
// (no entry), the entry's length (over the limit: not sent) or the entry.
constexpr const char* kGetScript =
    "local n = redis.call('HSTRLEN', KEYS[1], 'entry') "
    "if n > tonumber(ARGV[1]) then return n end "
    "return redis.call('HGET', KEYS[1], 'entry')";

// KEYS[1] = the entry's key, ARGV[1] = its speedup, ARGV[2] = the entry.
// Keeps a stored entry whose speedup is >= ARGV[1] (ties keep the earlier).
constexpr const char* kPutScript =
    "local cur = redis.call('HGET', KEYS[1], 'speedup') "
    "if cur and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end "
    "redis.call('HSET', KEYS[1], 'speedup', ARGV[1], 'entry', ARGV[2]) "
    "return 1";

std::string ReplyText(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) {
        if (i > 0) out += '\n';
        out += ReplyText(r->element[i]);
      }
      return out;
    }
    default:
      return std::string();
  }
}

Status TooLarge(const std::string& what, long long bytes, size_t limit) {
  return Status(StatusCode::kInvalidArgument, what + ": entry of " + std::to_string(bytes) +
                                                  " bytes exceeds the limit of " + std::to_string(limit) +
                                                  " bytes; refused");
}

}  // namespace

struct RedisCacheClient::Impl {
  Impl(RemoteUrl url, const std::string& shown, std::chrono::milliseconds timeout, size_t max_entry_bytes)
      : conn(std::move(url), shown, timeout), max_entry_bytes(max_entry_bytes) {}
  std::mutex mu;  // serialises calls on the one connection
  redis_internal::RedisConnection conn;
  size_t max_entry_bytes;
};

RedisCacheClient::RedisCacheClient(RemoteUrl url, std::string shown_url, std::chrono::milliseconds timeout,
                                   size_t max_entry_bytes)
    : shown_url_(std::move(shown_url)),
      impl_(std::make_unique<Impl>(std::move(url), shown_url_, timeout, max_entry_bytes)) {}

RedisCacheClient::~RedisCacheClient() = default;

Status RedisCacheClient::Ping() {
  const std::string what = "PING " + shown_url_;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->conn.Run({"PING"}, what);
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_ERROR) return Status(StatusCode::kIoError, what + ": " + ReplyText(r->get()));
  return Status::Ok();
}

Expected<std::optional<WinnerRecord>> RedisCacheClient::Get(const std::string& task_key) {
  const std::string what = "GET " + shown_url_ + " " + task_key;
  if (!IsValidTaskKey(task_key)) {
    return Status(StatusCode::kInvalidArgument, what + ": task key must be 64 lowercase hex digits");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->conn.Run({"EVAL", kGetScript, "1", kRedisKeyPrefix + task_key,
                            std::to_string(impl_->max_entry_bytes)},
                           what);
  if (!r.ok()) return r.status();
  const redisReply* reply = r->get();
  if (reply->type == REDIS_REPLY_NIL) return std::optional<WinnerRecord>();
  if (reply->type == REDIS_REPLY_INTEGER) return TooLarge(what, reply->integer, impl_->max_entry_bytes);
  if (reply->type == REDIS_REPLY_ERROR) return Status(StatusCode::kIoError, what + ": " + ReplyText(reply));
  if (reply->type != REDIS_REPLY_STRING) return Status(StatusCode::kCorrupt, what + ": unexpected reply type");
  auto rec = WinnerFromWireJson(std::string(reply->str, reply->len));
  if (!rec.ok()) return Status(StatusCode::kCorrupt, what + ": malformed entry: " + rec.status().message());
  if (rec->task_key != task_key) {
    return Status(StatusCode::kCorrupt, what + ": the server holds the entry for another key " + rec->task_key);
  }
  const std::string hash = ContentHash(*rec);
  if (hash != rec->content_hash) {
    return Status(StatusCode::kCorrupt, what + ": content hash mismatch (entry says " + rec->content_hash +
                                            ", bytes hash to " + hash + "); entry rejected");
  }
  return std::optional<WinnerRecord>(std::move(*rec));
}

Expected<bool> RedisCacheClient::Put(WinnerRecord rec) {
  const std::string what = "PUT " + shown_url_ + " " + rec.task_key;
  if (!IsValidTaskKey(rec.task_key)) {
    return Status(StatusCode::kInvalidArgument, what + ": task key must be 64 lowercase hex digits");
  }
  if (!std::isfinite(rec.speedup)) return Status(StatusCode::kInvalidArgument, what + ": speedup is not finite");
  rec.content_hash = ContentHash(rec);
  const std::string entry = WinnerToWireJson(rec, true);
  if (entry.size() > impl_->max_entry_bytes) {
    return TooLarge(what, static_cast<long long>(entry.size()), impl_->max_entry_bytes);
  }
  char speedup[40];
  std::snprintf(speedup, sizeof(speedup), "%.17g", rec.speedup);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->conn.Run({"EVAL", kPutScript, "1", kRedisKeyPrefix + rec.task_key, speedup, entry}, what);
  if (!r.ok()) return r.status();
  const redisReply* reply = r->get();
  if (reply->type == REDIS_REPLY_ERROR) return Status(StatusCode::kIoError, what + ": " + ReplyText(reply));
  if (reply->type != REDIS_REPLY_INTEGER) return Status(StatusCode::kIoError, what + ": unexpected reply type");
  return reply->integer == 1;
}

Expected<std::string> RedisCacheClient::EvictionPolicy() {
  const std::string what = "CONFIG GET maxmemory-policy on " + shown_url_;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->conn.Run({"CONFIG", "GET", "maxmemory-policy"}, what);
  if (!r.ok()) return r.status();
  const redisReply* reply = r->get();
  if (reply->type == REDIS_REPLY_ERROR) return Status(StatusCode::kUnsupported, what + ": " + ReplyText(reply));
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
    return Status(StatusCode::kUnsupported, what + ": the server does not report it");
  }
  return ReplyText(reply->element[1]);
}

Expected<std::string> RedisCacheClient::Command(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status(StatusCode::kInvalidArgument, "empty Redis command");
  const std::string what = argv[0] + " on " + shown_url_;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->conn.Run(argv, what);
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_ERROR) return Status(StatusCode::kInvalidArgument, what + ": " + ReplyText(r->get()));
  return ReplyText(r->get());
}

std::string EvictionPolicyWarning(const std::string& shown_url, const std::string& policy) {
  if (policy == "noeviction") return std::string();
  return "Redis cache " + shown_url + " has maxmemory-policy " + policy +
         ": once it reaches maxmemory it drops kernels silently (they are tuned again on a miss); set "
         "'maxmemory-policy noeviction' on the server to keep every entry";
}

}  // namespace dice::cache
