// cache/src/admission_gate.h — at most N holders at once, admitted in
// arrival order (private to cache/src; used by http_server.cc).
//
// Why: with 16 clients on 2 cores the server ran up to 16 handlers at
// once, each sharing the cores with the others and with the clients, so a
// request's time grew with everything in flight beside it. A gate of a few
// handlers makes the rest wait their turn asleep (docs/PERF.md, session 25;
// off by default: it helps list-only loads and hurts page=N lists in mixed
// ones).
// Release hands the slot straight to the oldest waiter and wakes that one
// thread only (no thundering herd, no barging by the releasing thread).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

namespace dice::cache {

class AdmissionGate {
 public:
  /// `limit`: holders at once; 0 = no limit (Acquire never waits).
  explicit AdmissionGate(size_t limit) : limit_(limit) {}
  AdmissionGate(const AdmissionGate&) = delete;
  AdmissionGate& operator=(const AdmissionGate&) = delete;

  /// Waits until a slot is free and every earlier caller was admitted.
  void Acquire() {
    if (limit_ == 0) return;
    std::unique_lock<std::mutex> lock(mu_);
    if (held_ < limit_ && waiters_.empty()) {
      ++held_;
      return;
    }
    Waiter me;
    waiters_.push_back(&me);
    me.cv.wait(lock, [&me] { return me.admitted; });
  }

  /// Gives the slot to the oldest waiter, or frees it.
  /// REQUIRES: the caller holds a slot (Acquire returned).
  void Release() {
    if (limit_ == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (waiters_.empty()) {
      --held_;
      return;
    }
    Waiter* next = waiters_.front();
    waiters_.pop_front();
    next->admitted = true;
    next->cv.notify_one();
  }

 private:
  struct Waiter {
    std::condition_variable cv;
    bool admitted = false;
  };
  const size_t limit_;
  std::mutex mu_;
  size_t held_ = 0;                // guarded by mu_
  std::deque<Waiter*> waiters_;    // guarded by mu_; oldest first
};

/// Holds a slot of `gate` for its lifetime.
class AdmissionSlot {
 public:
  explicit AdmissionSlot(AdmissionGate& gate) : gate_(gate) { gate_.Acquire(); }
  ~AdmissionSlot() { gate_.Release(); }
  AdmissionSlot(const AdmissionSlot&) = delete;
  AdmissionSlot& operator=(const AdmissionSlot&) = delete;

 private:
  AdmissionGate& gate_;
};

}  // namespace dice::cache
