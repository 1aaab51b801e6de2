// Private: the progress events of one Tuner::Tune (tuner.h TuneProgress).
// CountOutcomes counts what a phase produced, ProgressSink stamps each event
// with what every event carries, and FromWorkerProgress turns the worker
// pool's live counts (worker_pool.h) into a kMeasure event's counts.
// Thread-compatible: one Tune's sink is used on the thread running it.
#pragma once

#include <chrono>
#include <vector>

#include "dice/runtime/tuner.h"
#include "dice/runtime/worker_pool.h"

namespace dice::runtime {

/// Compiled / verified / timed counts of `outcomes` and the fastest verified
/// median time, µs (the report counts its own in the Tuner).
TuneProgress CountOutcomes(const std::vector<CandidateOutcome>& outcomes);

/// The counts of a worker pool's progress as a TuneProgress (phase, elapsed
/// time and description are the sink's to fill in).
TuneProgress FromWorkerProgress(const WorkerTuneProgress& w);

/// Sends one Tune's progress events; fills in what every event carries (the
/// phase, the candidate count so far, elapsed seconds since `start`,
/// from_cache, description, and the report's baseline when the counts have
/// none). A no-op without a callback. `callback` and `report` must outlive it.
class ProgressSink {
 public:
  ProgressSink(const TuneProgressCallback& callback, const TuneReport& report,
               std::chrono::steady_clock::time_point start)
      : callback_(callback), report_(report), start_(start) {}
  /// True when events go somewhere (a callback is set).
  bool active() const { return static_cast<bool>(callback_); }
  void Send(TunePhase phase, TuneProgress counts = {}) const;

 private:
  const TuneProgressCallback& callback_;
  const TuneReport& report_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dice::runtime
