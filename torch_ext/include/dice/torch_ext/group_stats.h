// dice/torch_ext/group_stats.h — per-group run-time statistics (DESIGN.md
// "profile").
//
// Every registered fusion group (group_table.h) counts its calls, the calls
// a winner kernel served (hits) and the calls the fallback ran, with the
// reason of each fallback; in observe mode it also times the fallback. The
// counters are atomics bumped by the ops; a snapshot here is consistent per
// group, not across groups. No torch types. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dice::torch_ext {

/// One group's statistics.
struct GroupStats {
  int id = 0;
  std::string summary;                     ///< "mul+add+gelu"
  std::string canonical;                   ///< IR text
  std::vector<std::string> input_specs;    ///< inputs of the newest input signature seen, TensorSpec::ToString ("f32[1024,8192]")
  std::string task_key;                    ///< task key of the newest input signature seen ("" until computed)
  std::vector<std::string> task_keys;      ///< every distinct task key seen (one per input signature), in order
  int64_t calls = 0;
  int64_t hits = 0;                        ///< calls served by a winner kernel
  int64_t fallbacks = 0;                   ///< calls served by the original subgraph
  double total_us = 0;                     ///< timed calls only (observe mode), µs
  int64_t timed_calls = 0;
  /// The winner loaded for the newest task key, as the tuner timed it in
  /// isolation (µs, medians): PyTorch's baseline and the winner; 0 when no
  /// winner is loaded for that key. The backend orders its in-context region
  /// measurements by baseline - best (the expected saving per call).
  double winner_baseline_us = 0;
  double winner_best_us = 0;
  std::vector<std::pair<std::string, int64_t>> fallback_reasons;  ///< reason -> count ("no GPU", "no winner", ...), most frequent first
};

/// Snapshot of every group's statistics, by id.
std::vector<GroupStats> GetGroupStats();
/// Zeroes the counters and fallback reasons and forgets which input
/// signatures were captured (groups stay registered).
void ResetGroupStats();
/// A text table: id, summary, inputs, calls, hits, fallbacks, total µs, mean
/// µs, top fallback reason; sorted by total µs (then calls), descending.
std::string FormatProfile(const std::vector<GroupStats>& stats);

/// Every registered group's statistics (GetGroupStats) as a JSON array of
/// objects: id, summary, canonical, torch_ops, input_specs and task_key (of
/// the newest input signature), task_keys (every distinct key seen), calls,
/// hits, fallbacks, timed_calls, total_us (µs, observe mode),
/// winner_baseline_us and winner_best_us (µs, the loaded winner of the
/// newest task key; 0 when none), fallback_reasons (object: reason -> count). The dice::group_stats op
/// (run_group.h) returns it.
std::string GroupStatsJson();

}  // namespace dice::torch_ext
