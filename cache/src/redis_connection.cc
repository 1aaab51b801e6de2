// Implementation of redis_connection.h.
#include "redis_connection.h"

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <ctime>
#include <utility>

namespace dice::cache::redis_internal {
namespace {

// Blocks SIGPIPE on this thread for its lifetime, and swallows one raised
// meanwhile (a write to a socket the server closed), so the user's process
// is never killed by it: the write fails with EPIPE instead.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeGuard() {
    if (!blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// kTimeout for a read/connect that timed out, else kIoError.
Status TransportError(const redisContext* c, const std::string& what) {
  const bool timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
                                                    errno == EINPROGRESS);
  const std::string text = c->errstr[0] != '\0' ? c->errstr : "connection failed";
  return Status(timed_out ? StatusCode::kTimeout : StatusCode::kIoError,
                what + ": " + (timed_out ? "no answer within the timeout (" + text + ")" : text));
}

}  // namespace

RedisConnection::RedisConnection(RemoteUrl url, std::string shown_url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), shown_url_(std::move(shown_url)), timeout_(timeout) {}

RedisConnection::~RedisConnection() { Drop(); }

void RedisConnection::Drop() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

Status RedisConnection::Connect() {
  const std::string what = "connect to " + shown_url_;
  const timeval tv = ToTimeval(timeout_);
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  if (c == nullptr) return Status(StatusCode::kIoError, what + ": cannot allocate a hiredis context");
  if (c->err != 0) {
    Status st = TransportError(c, what);
    redisFree(c);
    return st;
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    Status st = TransportError(c, what);
    redisFree(c);
    return st;
  }
  ctx_ = c;
  if (!url_.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!url_.user.empty()) auth.push_back(url_.user);
    auth.push_back(url_.password);
    auto r = Send(auth, "AUTH to " + shown_url_);
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      const std::string reply((*r)->str, (*r)->len);
      Drop();
      return Status(StatusCode::kIoError, "AUTH to " + shown_url_ + " refused: " + reply);
    }
  }
  if (url_.db != 0) {
    auto r = Send({"SELECT", std::to_string(url_.db)}, "SELECT on " + shown_url_);
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      const std::string reply((*r)->str, (*r)->len);
      Drop();
      return Status(StatusCode::kIoError, "SELECT " + std::to_string(url_.db) + " on " + shown_url_ +
                                              " refused: " + reply);
    }
  }
  return Status::Ok();
}

Expected<ReplyPtr> RedisConnection::Send(const std::vector<std::string>& argv, const std::string& what) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  args.reserve(argv.size());
  lens.reserve(argv.size());
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = nullptr;
  {
    SigpipeGuard guard;
    raw = redisCommandArgv(ctx_, static_cast<int>(args.size()), args.data(), lens.data());
  }
  if (raw == nullptr) {
    Status st = TransportError(ctx_, what);
    Drop();
    return st;
  }
  return ReplyPtr(static_cast<redisReply*>(raw));
}

Expected<ReplyPtr> RedisConnection::Run(const std::vector<std::string>& argv, const std::string& what) {
  if (ctx_ == nullptr) {
    Status st = Connect();
    if (!st.ok()) return st;
  }
  return Send(argv, what);
}

}  // namespace dice::cache::redis_internal
