// Bootstrap intervals over tasks: see dice/training/stats.h. Torch-free.
#include "dice/training/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace dice::training {
namespace {

// SplitMix64 (Steele, Lea & Flood 2014): a fixed, portable sequence.
struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by rejection (no modulo bias).
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      const uint64_t v = Next();
      if (v < limit) return v % n;
    }
  }
};

Status CheckOptions(size_t n, const BootstrapOptions& o) {
  if (n == 0) return Status(StatusCode::kInvalidArgument, "bootstrap: no task");
  if (o.resamples < 1) return Status(StatusCode::kInvalidArgument, "bootstrap: resamples must be >= 1");
  if (!(o.confidence > 0 && o.confidence < 1)) {
    return Status(StatusCode::kInvalidArgument, "bootstrap: confidence must be in (0, 1)");
  }
  return Status::Ok();
}

// The smallest of the sorted `means` whose empirical CDF is >= q.
double InverseCdf(const std::vector<double>& sorted, double q) {
  const double r = static_cast<double>(sorted.size());
  // CDF of sorted[i] is (i + 1) / r: the first i with (i + 1) >= q * r.
  // A tiny tolerance keeps q * r that is an integer in exact arithmetic
  // from rounding up to the next draw.
  int64_t i = static_cast<int64_t>(std::ceil(q * r - 1e-9)) - 1;
  i = std::clamp<int64_t>(i, 0, static_cast<int64_t>(sorted.size()) - 1);
  return sorted[static_cast<size_t>(i)];
}

Interval PercentileInterval(const std::vector<double>& values, const BootstrapOptions& o) {
  const size_t n = values.size();
  Interval out;
  double total = 0;
  for (double v : values) total += v;
  out.estimate = total / static_cast<double>(n);
  SplitMix64 rng{o.seed};
  std::vector<double> means(static_cast<size_t>(o.resamples));
  for (auto& m : means) {
    double sum = 0;
    for (size_t k = 0; k < n; ++k) sum += values[rng.Below(n)];
    m = sum / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const double alpha = 1.0 - o.confidence;
  out.lo = InverseCdf(means, alpha / 2);
  out.hi = InverseCdf(means, 1.0 - alpha / 2);
  return out;
}

}  // namespace

Expected<Interval> BootstrapMean(const std::vector<double>& per_task, const BootstrapOptions& o) {
  DICE_RETURN_IF_ERROR(CheckOptions(per_task.size(), o));
  return PercentileInterval(per_task, o);
}

Expected<Interval> PairedBootstrapDifference(const std::vector<double>& base, const std::vector<double>& next,
                                             const BootstrapOptions& o) {
  if (base.size() != next.size()) {
    return Status(StatusCode::kInvalidArgument, "paired bootstrap: " + std::to_string(base.size()) + " base tasks vs " +
                                                    std::to_string(next.size()) + " new tasks");
  }
  DICE_RETURN_IF_ERROR(CheckOptions(base.size(), o));
  std::vector<double> diff(base.size());
  for (size_t i = 0; i < base.size(); ++i) diff[i] = next[i] - base[i];
  return PercentileInterval(diff, o);
}

std::string FormatInterval(const Interval& v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.4f [%.4f, %.4f]", v.estimate, v.lo, v.hi);
  return buf;
}

}  // namespace dice::training
