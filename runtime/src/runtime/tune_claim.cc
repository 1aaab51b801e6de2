// A Tuner's tuning claim (tune_claim.h).
#include "tune_claim.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <utility>

namespace dice::runtime {

Expected<TuneClaim> TuneClaim::Take(cache::Store* store, const std::string& key, const cache::ClaimOwner& owner,
                                    double ttl_s) {
  const int64_t ttl = static_cast<int64_t>(std::ceil(ttl_s));
  auto r = store->ClaimTuning(key, owner, ttl < 1 ? 1 : ttl);
  if (!r.ok()) return r.status().WithContext("claiming the task in the cache");
  TuneClaim c;
  if (r->claimed) {
    c.store_ = store;
    c.key_ = key;
    c.owner_ = owner;
    c.held_ = true;
    if (r->took_over) spdlog::info("dice: took over the tuning claim of {} (expired or its owner is gone)", key);
  } else {
    const int64_t left = r->holder.expires_at - r->holder.claimed_at;
    c.holder_ = r->holder.owner.Describe() + ", claimed for " + std::to_string(left) + " s";
  }
  return c;
}

void TuneClaim::Release() {
  if (!held_) return;
  held_ = false;
  auto r = store_->ReleaseTuningClaim(key_, owner_);
  if (!r.ok()) spdlog::warn("dice: releasing the tuning claim of {}: {} (it expires on its own)", key_, r.status().ToString());
}

TuneClaim::~TuneClaim() { Release(); }

TuneClaim::TuneClaim(TuneClaim&& o) noexcept
    : store_(o.store_), key_(std::move(o.key_)), owner_(std::move(o.owner_)), held_(o.held_),
      holder_(std::move(o.holder_)) {
  o.held_ = false;
}

TuneClaim& TuneClaim::operator=(TuneClaim&& o) noexcept {
  if (this != &o) {
    Release();
    store_ = o.store_;
    key_ = std::move(o.key_);
    owner_ = std::move(o.owner_);
    held_ = o.held_;
    holder_ = std::move(o.holder_);
    o.held_ = false;
  }
  return *this;
}

}  // namespace dice::runtime
