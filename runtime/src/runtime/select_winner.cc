// select_winner.cc — SelectWinner (select_winner.h).
#include "dice/runtime/select_winner.h"

namespace dice::runtime {

Selection SelectWinner(double baseline_us, const std::vector<Measurement>& measured, const SelectionPolicy& policy) {
  Selection s;
  s.outcomes.reserve(measured.size());
  const double threshold = baseline_us * (1.0 - policy.margin);
  int best = -1;
  for (size_t i = 0; i < measured.size(); ++i) {
    const Measurement& m = measured[i];
    s.outcomes.push_back(m.outcome);
    if (m.outcome != Outcome::kVerified || m.time_us <= 0) continue;
    if (m.reduced_precision && !policy.allow_reduced_precision) continue;
    if (best < 0 || m.time_us < measured[static_cast<size_t>(best)].time_us) best = static_cast<int>(i);
  }
  if (best >= 0 && baseline_us > 0 && measured[static_cast<size_t>(best)].time_us < threshold) s.winner = best;
  if (baseline_us <= 0) return s;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (s.outcomes[i] != Outcome::kVerified) continue;
    if (static_cast<int>(i) == s.winner) {
      s.outcomes[i] = Outcome::kWinner;
    } else if (measured[i].time_us >= threshold) {
      s.outcomes[i] = Outcome::kSlower;
    }
  }
  return s;
}

}  // namespace dice::runtime
