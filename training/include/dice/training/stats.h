// dice/training/stats.h — confidence intervals for pass@k over tasks
// (issue 21: every pass@k quoted with a 95% interval; stage comparisons by
// a paired bootstrap on the same tasks). Torch-free, deterministic.
//
// Percentile bootstrap (Efron & Tibshirani 1993, ch. 13): `resamples` times,
// draw n tasks with replacement from the n per-task values and take the
// statistic's mean; the interval is [Q(a/2), Q(1 - a/2)] of those means with
// a = 1 - confidence, where Q(q) is the smallest resampled mean whose
// empirical CDF is >= q (the inverse of the empirical CDF). The draws come
// from SplitMix64 seeded with `seed`, so the interval is the same on every
// platform and run. The paired bootstrap draws the same task indices for
// both stages and takes the mean of the per-task differences (new - base),
// so task difficulty cancels out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

struct BootstrapOptions {
  int64_t resamples = 10000;  ///< bootstrap draws; >= 1
  double confidence = 0.95;   ///< in (0, 1)
  uint64_t seed = 0;
};

/// A point estimate with its bootstrap interval (lo <= estimate <= hi up to
/// the percentile's discreteness).
struct Interval {
  double estimate = 0;  ///< the statistic on the tasks as given (the mean, or the mean difference)
  double lo = 0, hi = 0;
};

/// Mean of `per_task` (e.g. each task's pass@k) and its percentile bootstrap
/// interval over tasks. Errors: kInvalidArgument for no task, resamples < 1
/// or confidence outside (0, 1).
Expected<Interval> BootstrapMean(const std::vector<double>& per_task, const BootstrapOptions& options);

/// Mean of new_per_task[i] - base_per_task[i] and its paired percentile
/// bootstrap interval (same resampled tasks for both). Errors: those of
/// BootstrapMean; kInvalidArgument when the two differ in length.
Expected<Interval> PairedBootstrapDifference(const std::vector<double>& base_per_task,
                                             const std::vector<double>& new_per_task,
                                             const BootstrapOptions& options);

/// "0.4100 [0.3200, 0.5000]" (4 decimals), how every pass@k is printed.
std::string FormatInterval(const Interval& interval);

}  // namespace dice::training
