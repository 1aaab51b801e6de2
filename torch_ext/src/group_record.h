// Private: one registered fusion group's record in the process-wide group
// table (group_table.h) — the group, its counters and what its ops saw.
// The ops hold a GroupRecord* for the process's lifetime (records are never
// freed) and bump the atomics on every call without a lock; the other fields
// are guarded by the record's own mutex. No torch types.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dice/torch_ext/capture_result.h"

namespace dice::torch_ext {

struct GroupRecord {
  int id = 0;
  CapturedGroup group;  ///< immutable after registration
  std::atomic<int64_t> calls{0}, hits{0}, fallbacks{0}, timed_calls{0}, total_ns{0};
  std::mutex mu;  // guards the fields below
  std::vector<std::string> input_specs;  ///< TensorSpec::ToString of the newest input signature
  std::string task_key;                  ///< of the newest input signature
  std::vector<std::string> task_keys;    ///< every distinct key, in order
  std::map<std::string, int64_t> reasons;          ///< fallback reason -> count
  std::set<std::vector<int64_t>> captured_signatures;  ///< input signatures whose inputs were captured
  /// task key -> (baseline µs, winner µs) of the winner loaded for it (the
  /// tuner's isolated medians, cache::WinnerRecord baseline_us / best_us).
  std::map<std::string, std::pair<double, double>> winner_times;
};

/// Records that `rec` loaded a winner for `task_key` that the tuner timed at
/// `best_us` against PyTorch's `baseline_us` (µs, isolated medians; 0 when
/// unknown). Thread-safe (takes rec->mu); a null `rec` is ignored.
void NoteWinnerTimes(GroupRecord* rec, const std::string& task_key, double baseline_us, double best_us);

/// The record of group `id`, or null for an unknown id. The pointer stays
/// valid for the process's lifetime.
GroupRecord* FindGroupRecord(int id);

/// Every record, in id order (a snapshot of the table; the records live on).
std::vector<GroupRecord*> AllGroupRecords();

}  // namespace dice::torch_ext
