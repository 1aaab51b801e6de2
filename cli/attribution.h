// cli/attribution.h — where `dice tune`'s end-to-end gain came from.
// Torch-free: plain functions over values; thread-safe.
//
// `dice tune` times three models side by side (RoundRobinMedians):
//   original   the model as loaded (TorchScript, not frozen: "eager");
//   captured   the model after capture alone: frozen (torch.jit.freeze:
//              parameters become constants, conv-batchnorm folding, constant
//              propagation) and inlined, with no dice fusion group in its
//              graph (the graph before the fusion pass);
//   optimized  the captured model with its fusion groups serving the winners.
// The total gain splits into a product (Attribute):
//   total = original / optimized = capture × winners,
//   capture = original / captured, winners = captured / optimized.
// What each winner added is credited from the tuner's own timing of its
// group (WinnerSaving): saved_us = (baseline_us - best_us) × calls per
// forward, or per call when the calls of one forward are not known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dice::cli {

/// The attribution of one `dice tune` run; nullopt = not measured.
struct Attribution {
  std::optional<double> capture;  ///< original_us / captured_us
  std::optional<double> winners;  ///< captured_us / optimized_us
  std::optional<double> total;    ///< original_us / optimized_us
};

/// The attribution of three median times in µs. A time that is not
/// positive was not measured: every ratio that needs it is nullopt. When all
/// three are measured, *total == *capture × *winners up to rounding.
Attribution Attribute(double original_us, double captured_us, double optimized_us);

/// The attribution in one line, e.g. "capture alone (freeze, folding):
/// 1.95x; dice winners: 1.04x on top; total 2.03x". `frozen` false (freezing
/// was off or failed) names capture "(not frozen: no folding)". A ratio not
/// measured reads "not measured" (compile-only runs time nothing).
/// `memory_format` "channels_last" (optimize()'s memory-format pass kept it)
/// is named in capture's parentheses: "(freeze, folding, channels_last)".
std::string AttributionLine(const Attribution& a, bool frozen, const std::string& memory_format = "contiguous");

/// What one group's winner saved by the tuner's timing of the group.
struct WinnerSaving {
  std::optional<double> saved_us;           ///< nullopt: no winner, or a time not measured
  std::optional<int64_t> calls_per_forward; ///< nullopt: saved_us is per call
};

/// (baseline_us - best_us) × calls_per_forward (µs per forward), or per call
/// when calls_per_forward is nullopt. saved_us is nullopt when either time is
/// not positive (no winner; compile-only). May be negative: a cached winner
/// that now times slower than PyTorch.
WinnerSaving SavedByWinner(double baseline_us, double best_us, std::optional<int64_t> calls_per_forward);

/// One fusion group's calls during one forward and the task keys it has seen
/// (torch_ext GroupStats::calls, ::task_keys).
struct GroupCalls {
  std::vector<std::string> task_keys;
  int64_t calls = 0;
};

/// Calls per forward of each task key: the sum of the calls of the groups
/// whose only task key it is. A key that some called group shares with other
/// keys (calls of several input signatures, which cannot be split) is left
/// out: its calls are not known. Groups with no calls are ignored.
std::map<std::string, int64_t> CallsPerTask(const std::vector<GroupCalls>& groups);

/// Median of `time_once(v)` per variant v in [0, variants), µs, timed
/// round-robin: `warmup` untimed calls of each variant first, then `reps`
/// rounds, each calling every variant once, the order rotated by one per
/// round (round r starts at variant r % variants) so that drift and order
/// effects hit every variant alike. `time_once` returns the µs of one call.
/// REQUIRES: reps >= 1. Returns `variants` medians (upper median for even reps).
std::vector<double> RoundRobinMedians(size_t variants, int reps, int warmup,
                                      const std::function<double(size_t variant)>& time_once);

}  // namespace dice::cli
