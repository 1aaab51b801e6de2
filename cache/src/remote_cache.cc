// Implementation of dice/cache/remote_cache.h.
#include "dice/cache/remote_cache.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace dice::cache {

Expected<RemoteCacheOptions> RemoteCacheOptions::FromEnv() {
  RemoteCacheOptions o;
  if (const char* url = std::getenv("DICE_REMOTE_CACHE")) o.url = url;
  if (!o.url.empty() && o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "DICE_REMOTE_CACHE '" + o.url + "' is not an http:// or https:// URL");
  }
  if (const char* token = std::getenv("DICE_REMOTE_TOKEN")) o.token = token;
  if (const char* trust = std::getenv("DICE_TRUST_REMOTE")) {
    const std::string t = trust;
    o.trust = t == "1" || t == "true" || t == "yes";
  }
  if (const char* ms = std::getenv("DICE_REMOTE_TIMEOUT_MS")) {
    char* end = nullptr;
    const long v = std::strtol(ms, &end, 10);
    if (end == ms || *end != '\0' || v < 1 || v > 60000) {
      return Status(StatusCode::kInvalidArgument,
                    std::string("DICE_REMOTE_TIMEOUT_MS '") + ms + "' is not an integer in [1, 60000]");
    }
    o.timeout = std::chrono::milliseconds(v);
  }
  return o;
}

RemoteCache::RemoteCache(RemoteCacheOptions options) : options_(std::move(options)) {
  client_ = std::make_unique<CacheClient>(options_.url, options_.token, options_.timeout);
}

RemoteCache::~RemoteCache() = default;

std::optional<WinnerRecord> RemoteCache::Lookup(const std::string& task_key, Store* local, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.lookups;
  const auto now = std::chrono::steady_clock::now();
  if (now < quiet_until_) {
    ++counters_.skipped;
    if (why) {
      *why = "remote cache " + options_.url + " is backing off after a failure (" +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet_until_ - now).count()) +
             " ms left)";
    }
    return std::nullopt;
  }
  ++counters_.requests;
  auto fail = [&](const std::string& reason) -> std::optional<WinnerRecord> {
    ++counters_.failures;
    backoff_ = backoff_.count() == 0 ? options_.backoff_initial : std::min(backoff_ * 2, options_.backoff_max);
    quiet_until_ = std::chrono::steady_clock::now() + backoff_;
    if (why) *why = reason + " (remote lookups paused for " + std::to_string(backoff_.count()) + " ms)";
    return std::nullopt;
  };
  auto got = client_->Get(task_key);
  if (!got.ok()) {
    // kInvalidArgument: a malformed key (nothing sent) or a 4xx answer — the
    // server is alive, so no back-off. Anything else: transport, 5xx, damage.
    if (got.status().code() == StatusCode::kInvalidArgument) {
      if (why) *why = got.status().message();
      return std::nullopt;
    }
    return fail(got.status().message());
  }
  backoff_ = std::chrono::milliseconds(0);
  quiet_until_ = {};
  if (!got->has_value()) {
    ++counters_.misses;
    if (why) *why = "remote cache " + options_.url + " has no entry for " + task_key;
    return std::nullopt;
  }
  WinnerRecord rec = std::move(**got);
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
  rec.pulled_from = options_.url;
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

RemoteCacheCounters RemoteCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace dice::cache
