// redis_connection.h (private to cache/) — one hiredis connection to a Redis
// server: connect with a timeout, AUTH and SELECT after each connect, one
// command at a time with SIGPIPE blocked, and errors that name the server by
// its masked URL. RedisCacheClient (redis_cache.h) speaks its record format
// over it.
//
// Thread-safety: none; the owner serialises calls.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/remote_url.h"
#include "dice/core/status.h"

namespace dice::cache::redis_internal {

/// Frees a hiredis reply.
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisConnection {
 public:
  /// No I/O here; the first Run connects. REQUIRES: url.scheme == kRedis.
  RedisConnection(RemoteUrl url, std::string shown_url, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  /// Sends `argv` (connecting first when there is no connection) and returns
  /// the reply, which may be an error reply (REDIS_REPLY_ERROR: the caller
  /// decides). `what` starts every message ("GET redis://:***@h:6379 <key>").
  /// On a transport failure the connection is dropped (the next call
  /// reconnects). Errors: kTimeout (no answer within the timeout, or a
  /// connect that timed out); kIoError (no connection, closed connection,
  /// AUTH or SELECT refused: the server's reply text, never the password).
  Expected<ReplyPtr> Run(const std::vector<std::string>& argv, const std::string& what);

 private:
  Status Connect();
  Expected<ReplyPtr> Send(const std::vector<std::string>& argv, const std::string& what);
  void Drop();

  RemoteUrl url_;
  std::string shown_url_;
  std::chrono::milliseconds timeout_;
  redisContext* ctx_ = nullptr;
};

}  // namespace dice::cache::redis_internal
