// The attribution of `dice tune`'s end-to-end gain (cli/attribution.h). Torch-free.
#include "attribution.h"

#include <algorithm>
#include <cstdio>

namespace dice::cli {
namespace {

std::optional<double> Ratio(double a, double b) {
  if (!(a > 0) || !(b > 0)) return std::nullopt;
  return a / b;
}

std::string Times(const std::optional<double>& v) {
  if (!v) return "not measured";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", *v);
  return buf;
}

}  // namespace

Attribution Attribute(double original_us, double captured_us, double optimized_us) {
  return {Ratio(original_us, captured_us), Ratio(captured_us, optimized_us), Ratio(original_us, optimized_us)};
}

std::string AttributionLine(const Attribution& a, bool frozen, const std::string& memory_format) {
  const std::string layout = memory_format == "channels_last" ? ", channels_last" : "";
  std::string line = (frozen ? "capture alone (freeze, folding" : "capture alone (not frozen: no folding") + layout + "): ";
  line += Times(a.capture) + "; dice winners: " + Times(a.winners) + (a.winners ? " on top" : "") + "; total " +
          Times(a.total);
  return line;
}

WinnerSaving SavedByWinner(double baseline_us, double best_us, std::optional<int64_t> calls_per_forward) {
  WinnerSaving s;
  s.calls_per_forward = calls_per_forward;
  if (baseline_us > 0 && best_us > 0) {
    s.saved_us = (baseline_us - best_us) * static_cast<double>(calls_per_forward.value_or(1));
  }
  return s;
}

std::map<std::string, int64_t> CallsPerTask(const std::vector<GroupCalls>& groups) {
  std::map<std::string, int64_t> calls;
  std::vector<std::string> ambiguous;
  for (const GroupCalls& g : groups) {
    if (g.calls <= 0 || g.task_keys.empty()) continue;
    if (g.task_keys.size() == 1) {
      calls[g.task_keys.front()] += g.calls;
    } else {
      ambiguous.insert(ambiguous.end(), g.task_keys.begin(), g.task_keys.end());
    }
  }
  for (const std::string& key : ambiguous) calls.erase(key);
  return calls;
}

std::vector<double> RoundRobinMedians(size_t variants, int reps, int warmup,
                                      const std::function<double(size_t variant)>& time_once) {
  for (int w = 0; w < warmup; ++w) {
    for (size_t v = 0; v < variants; ++v) time_once(v);
  }
  std::vector<std::vector<double>> us(variants);
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < variants; ++i) {
      const size_t v = (i + static_cast<size_t>(r)) % variants;
      us[v].push_back(time_once(v));
    }
  }
  std::vector<double> medians;
  for (auto& t : us) {
    std::sort(t.begin(), t.end());
    medians.push_back(t.empty() ? 0.0 : t[t.size() / 2]);
  }
  return medians;
}

}  // namespace dice::cli
