// dice/runtime/select_winner.h — the decision that picks a tune's winner.
//
// A pure function of measured results (the split of Triton's autotuner and
// TVM meta_schedule: measuring and deciding apart), so every rule is tested
// without a GPU (tests/runtime/select_winner_test.cc). The Tuner (tuner.h)
// measures in a worker, then calls SelectWinner and persists what it says.
// Thread-safe: no state.
#pragma once

#include <vector>

#include "dice/runtime/outcome.h"

namespace dice::runtime {

/// One candidate as it was measured.
struct Measurement {
  Outcome outcome = Outcome::kSkipped;  ///< the worker's (kVerified, or how it failed), or kCompiled in compile-only
  double time_us = 0;                   ///< median µs when verified; <= 0 = not timed
  bool reduced_precision = false;       ///< Candidate::reduced_precision (TF32 or lower inside)
};

/// What a winner must satisfy (TuneOptions::margin, allow_reduced_precision).
struct SelectionPolicy {
  double margin = 0.05;                  ///< a winner must take < baseline_us * (1 - margin)
  bool allow_reduced_precision = false;  ///< may a reduced-precision candidate win
};

/// The decision: which candidate won and every candidate's final outcome.
struct Selection {
  int winner = -1;                ///< index into the measurements; -1 = no winner
  std::vector<Outcome> outcomes;  ///< one per measurement, same order
};

/// Picks the fastest eligible candidate and accepts it when it beats the
/// baseline by the margin. Eligible: outcome kVerified, time_us > 0, and not
/// reduced precision unless the policy allows it. Ties go to the earlier
/// candidate (the generators' order). There is no winner when the baseline
/// is unknown (baseline_us <= 0, e.g. compile-only or a failed baseline).
/// Final outcomes: the winner becomes kWinner; another kVerified candidate
/// whose time is >= baseline_us * (1 - margin) becomes kSlower (when the
/// baseline is known); every other outcome is returned unchanged.
Selection SelectWinner(double baseline_us, const std::vector<Measurement>& measured, const SelectionPolicy& policy);

}  // namespace dice::runtime
