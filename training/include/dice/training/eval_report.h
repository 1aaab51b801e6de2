// dice/training/eval_report.h — how pass@k results are reported: each mean
// pass@k with its 95% bootstrap interval over tasks, and a stage against
// another on the same tasks with a paired bootstrap of the difference
// (issue 21; stats.h for the method). Torch-free: `dice train compare`
// and the tests use it without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/training/eval.h"
#include "dice/training/stats.h"

namespace dice::training {

/// Per k of `report.ks`: the mean over `report.tasks` of each task's
/// pass_at_k[j] with its bootstrap interval (BootstrapMean). Errors: those
/// of BootstrapMean (no task); kInvalidArgument when a task lacks a value
/// for some k.
Expected<std::vector<Interval>> PassAtKIntervals(const EvalReport& report, const BootstrapOptions& options);

/// ", pass@1 0.4100 [0.3200, 0.5000], pass@8 ..." for the eval summary line
/// (report.pass_at_k_ci per report.ks).
std::string FormatPassAtK(const EvalReport& report);

/// Reads an eval JSON (`dice train eval --json`): its ks and, per task, id
/// and pass_at_k. Errors: kNotFound / kIoError for the file; kCorrupt naming
/// the file for JSON that is not an eval report.
Expected<EvalReport> ReadEvalJson(const std::string& path);

/// One k of a comparison: both stages' means with their own intervals and
/// the paired difference (new - base) with its interval.
struct StageComparisonRow {
  int64_t k = 1;
  Interval base, next, difference;
};

struct StageComparison {
  int64_t tasks = 0;                ///< tasks in both reports (the pairs)
  int64_t base_only = 0, new_only = 0;  ///< tasks in one report only: left out
  std::vector<StageComparisonRow> rows;  ///< per k in both reports
};

/// Pairs the tasks of two eval reports by id and compares each k both
/// report. Errors: kInvalidArgument when no task id or no k is common;
/// those of BootstrapMean.
Expected<StageComparison> CompareStages(const EvalReport& base, const EvalReport& next,
                                        const BootstrapOptions& options);

/// CompareStages on two eval JSON files. Errors: those of ReadEvalJson
/// (naming the file) and CompareStages.
Expected<StageComparison> CompareEvalFiles(const std::string& base_json, const std::string& new_json,
                                           const BootstrapOptions& options);

/// The comparison as lines ("pass@1: base 0.1000 [0.0500, 0.1600], new ...,
/// difference +0.2000 [0.1100, 0.2900] (above 0)").
std::vector<std::string> FormatComparison(const StageComparison& comparison);

}  // namespace dice::training
