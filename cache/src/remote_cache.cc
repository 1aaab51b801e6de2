// Implementation of dice/cache/remote_cache.h.
#include "dice/cache/remote_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "dice/cache/redis_cache.h"
#include "dice/cache/remote_url.h"
#include "dice/core/env.h"

namespace dice::cache {
namespace {

// The HTTP cache server (http_server.h) through CacheClient.
class HttpBackend : public RemoteBackend {
 public:
  explicit HttpBackend(const RemoteCacheOptions& o) : client_(o.url, o.token, o.timeout) {}
  Expected<std::optional<WinnerRecord>> Get(const std::string& task_key) override { return client_.Get(task_key); }
  Expected<bool> Put(WinnerRecord rec) override { return client_.Put(std::move(rec)); }

 private:
  CacheClient client_;
};

// A Redis server through RedisCacheClient; reads its maxmemory-policy after
// the first Get that reaches it and warns once when entries can be evicted.
class RedisBackend : public RemoteBackend {
 public:
  RedisBackend(RemoteUrl url, const std::string& shown, const RemoteCacheOptions& o)
      : client_(std::move(url), shown, o.timeout, o.max_entry_bytes), warn_(o.warn) {}
  Expected<std::optional<WinnerRecord>> Get(const std::string& task_key) override {
    auto got = client_.Get(task_key);
    if (got.ok() || got.status().code() == StatusCode::kCorrupt) CheckEvictionOnce();
    return got;
  }
  Expected<bool> Put(WinnerRecord rec) override {
    auto put = client_.Put(std::move(rec));
    if (put.ok()) CheckEvictionOnce();
    return put;
  }

 private:
  void CheckEvictionOnce() {
    if (checked_) return;
    checked_ = true;
    auto policy = client_.EvictionPolicy();
    std::string text;
    if (policy.ok()) {
      text = EvictionPolicyWarning(client_.shown_url(), *policy);
    } else if (policy.status().code() == StatusCode::kUnsupported) {
      text = "cannot read the maxmemory-policy of Redis cache " + client_.shown_url() + " (" +
             policy.status().message() + "); unless it is 'noeviction', entries can be dropped silently";
    }
    if (text.empty()) return;
    if (warn_) {
      warn_(text);
    } else {
      std::fprintf(stderr, "dice: warning: %s\n", text.c_str());
    }
  }

  RedisCacheClient client_;
  std::function<void(const std::string&)> warn_;
  bool checked_ = false;  // guarded by RemoteCache::mu_ (every call holds it)
};

}  // namespace

Expected<RemoteCacheOptions> RemoteCacheOptions::FromEnv() {
  RemoteCacheOptions o;
  if (const char* url = std::getenv("DICE_REMOTE_CACHE")) o.url = url;
  if (!o.url.empty()) {
    auto parsed = ParseRemoteUrl(o.url);
    if (!parsed.ok()) return parsed.status().WithContext("DICE_REMOTE_CACHE");
  }
  if (const char* token = std::getenv("DICE_REMOTE_TOKEN")) o.token = token;
  if (const char* trust = std::getenv("DICE_TRUST_REMOTE")) {
    const std::string t = trust;
    o.trust = t == "1" || t == "true" || t == "yes";
  }
  // Junk or out of range: the default, after one warning (dice/core/env.h).
  o.timeout = std::chrono::milliseconds(EnvInt("DICE_REMOTE_TIMEOUT_MS", o.timeout.count(), 1, 60000));
  return o;
}

RemoteCache::RemoteCache(RemoteCacheOptions options)
    : options_(std::move(options)), shown_url_(MaskUrlCredentials(options_.url)) {
  auto url = ParseRemoteUrl(options_.url);
  if (!url.ok()) {
    url_error_ = url.status();
  } else if (url->scheme == RemoteScheme::kRedis) {
    backend_ = std::make_unique<RedisBackend>(std::move(*url), shown_url_, options_);
  } else {
    backend_ = std::make_unique<HttpBackend>(options_);
  }
}

RemoteCache::~RemoteCache() = default;

std::optional<WinnerRecord> RemoteCache::Lookup(const std::string& task_key, Store* local, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.lookups;
  if (!backend_) {
    if (why) *why = url_error_.message();
    return std::nullopt;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < quiet_until_) {
    ++counters_.skipped;
    if (why) {
      *why = "remote cache " + shown_url_ + " is backing off after a failure (" +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet_until_ - now).count()) +
             " ms left)";
    }
    return std::nullopt;
  }
  ++counters_.requests;
  auto got = backend_->Get(task_key);
  if (!got.ok()) {
    // kInvalidArgument: a malformed key (nothing sent) or a 4xx answer — the
    // server is alive, so no back-off. Anything else: transport, 5xx, damage.
    if (got.status().code() == StatusCode::kInvalidArgument) {
      if (why) *why = got.status().message();
      return std::nullopt;
    }
    ++counters_.failures;
    backoff_ = backoff_.count() == 0 ? options_.backoff_initial : std::min(backoff_ * 2, options_.backoff_max);
    quiet_until_ = std::chrono::steady_clock::now() + backoff_;
    if (why) *why = got.status().message() + " (remote lookups paused for " + std::to_string(backoff_.count()) + " ms)";
    return std::nullopt;
  }
  backoff_ = std::chrono::milliseconds(0);
  quiet_until_ = {};
  if (!got->has_value()) {
    ++counters_.misses;
    if (why) *why = "remote cache " + shown_url_ + " has no entry for " + task_key;
    return std::nullopt;
  }
  return Keep(std::move(**got), task_key, local, why);
}

// REQUIRES: mu_ held. Stores a found record locally (unless it was already
// tried here) and returns what the local cache serves.
std::optional<WinnerRecord> RemoteCache::Keep(WinnerRecord rec, const std::string& task_key, Store* local,
                                              std::string* why) {
  if (local != nullptr && !options_.trust) {
    // This kernel was already tried here (a pulled copy that failed
    // re-verification leaves its attempt behind): do not pull it again.
    auto tried = local->WasAttempted(task_key, rec.candidate_hash);
    if (tried.ok() && *tried) {
      ++counters_.misses;
      if (why) *why = "remote kernel for " + task_key + " was already tried on this machine (see its attempts)";
      return std::nullopt;
    }
  }
  rec.verified = options_.trust;
  rec.pulled_from = shown_url_;
  rec.hits = 0;
  rec.last_used_at = 0;
  if (local != nullptr) {
    auto stored = local->PutWinner(rec);
    if (!stored.ok()) {
      if (why) *why = "pulled " + task_key + " but could not store it locally: " + stored.status().message();
      return std::nullopt;
    }
    if (!*stored) {
      // The local store kept its own entry (e.g. a verified one): serve that.
      auto kept = local->GetWinner(task_key);
      if (!kept.ok() || !kept->has_value()) {
        if (why) *why = "pulled " + task_key + " but the local cache kept another entry it cannot read back";
        return std::nullopt;
      }
      ++counters_.hits;
      return std::move(**kept);
    }
  }
  ++counters_.hits;
  return rec;
}

Expected<bool> RemoteCache::Push(const WinnerRecord& rec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!backend_) return url_error_;
  if (!rec.verified) {
    return Status(StatusCode::kInvalidArgument, "push " + rec.task_key + " to " + shown_url_ +
                                                    ": the entry is unverified (only kernels verified on a GPU "
                                                    "are pushed)");
  }
  return backend_->Put(rec);
}

RemoteCacheCounters RemoteCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace dice::cache
