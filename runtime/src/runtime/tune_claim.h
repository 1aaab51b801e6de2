// Private: a Tuner's hold on the tuning claim of one task key
// (dice/cache/tuning_claim.h). Of the processes sharing a cache, the one that
// holds the claim tunes the key; the claim is released when the TuneClaim
// goes (after Persist stored the winner or the failure, or on any error).
// Thread-compatible.
#pragma once

#include <string>

#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::runtime {

class TuneClaim {
 public:
  /// Holds nothing (claims off).
  TuneClaim() = default;
  /// Claims `key` in `store` as `owner` for `ttl_s` seconds (rounded up to
  /// whole seconds). A value that does not hold() means another owner's
  /// live claim; holder() then says whose ("pid 12 on host h (...), 40 s
  /// left"). Errors: those of Store::ClaimTuning, with context.
  /// REQUIRES: store non-null and outliving the TuneClaim.
  static Expected<TuneClaim> Take(cache::Store* store, const std::string& key, const cache::ClaimOwner& owner,
                                  double ttl_s);
  /// Releases a held claim (a store error is logged as a warning: the claim
  /// then expires on its own).
  ~TuneClaim();
  TuneClaim(TuneClaim&& other) noexcept;
  TuneClaim& operator=(TuneClaim&& other) noexcept;
  TuneClaim(const TuneClaim&) = delete;
  TuneClaim& operator=(const TuneClaim&) = delete;

  bool held() const { return held_; }
  /// Who holds the claim when this does not ("" when held or claims off).
  const std::string& holder() const { return holder_; }

 private:
  void Release();
  cache::Store* store_ = nullptr;
  std::string key_;
  cache::ClaimOwner owner_;
  bool held_ = false;
  std::string holder_;
};

}  // namespace dice::runtime
