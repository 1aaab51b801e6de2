// cli/report.h — the tuning report: one JSON document, one HTML page.
//
// `dice tune --json F` writes the report document; `dice tune --report
// F.html` and `dice report RESULTS.json|CACHE_DIR [-o F.html]` render one
// self-contained HTML page from it with RenderReportHtml (inline CSS, an
// inline SVG bar plot, no script and nothing fetched from the network). The
// document (docs/CLI.md "The tuning report"):
//
//   {"model": "m.pt", "gpu": true, "compile_only": false, "frozen": true,
//    "before_us": 812.0,      original model as loaded ("eager"), median µs
//    "captured_us": 640.5,    captured model: frozen, inlined, no dice group in its graph
//    "after_us": 402.1,       captured model with its fusion groups serving the winners
//    "capture_speedup": 1.27, "winners_speedup": 1.59, "speedup": 2.02,   (attribution.h)
//    "outputs_match": true, "match_detail": "max abs err 1e-06",
//    "groups": [{"task_key", "description", "baseline_us", "best_us", "speedup",
//                "winner", "from_cache", "tried", "compiled", "verified",
//                "calls_per_forward", "saved_us", "saved_per", "tune_seconds",
//                "by_generator": {"dice": {...}, "template": {...}}   (GeneratorSummary)
//                "candidates": [{"origin", "hash", "outcome", "error",
//                                "compile_ms", "time_us", "speedup"}]}]}
//
// The three end-to-end times are timed side by side, round-robin.
// saved_us = (baseline_us - best_us) × calls_per_forward ("saved_per":
// "forward"), or per call ("call", calls_per_forward null) when the calls
// of one forward are not known.
// A time or speedup that was not measured (compile-only: no GPU; a
// candidate never timed; a group without a winner) is null, never 0. The
// report of a cache directory has "source": "cache" and one group per
// winner, whose candidates are the key's rows of the attempts table.
// Torch-free. Plain functions over values; thread-safe.
#pragma once

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <utility>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "dice/cache/http_server.h"
#include "dice/core/status.h"
#include "dice/runtime/tuner.h"

namespace dice::cli {

/// What `dice tune` measured end to end (median µs over --reps rounds,
/// round-robin; attribution.h).
struct EndToEnd {
  bool timed = false;        ///< a GPU run; false: compile-only, the times below are not written
  double before_us = 0;      ///< the original model as loaded ("eager")
  double captured_us = 0;    ///< the captured model: frozen, inlined, no dice group in its graph
  double after_us = 0;       ///< the captured model with its groups serving the winners
  bool outputs_match = false;
  std::string match_detail;  ///< "max abs err 3e-07" or why the outputs differ
  bool frozen = true;        ///< torch.jit.freeze succeeded (OptimizeReport::frozen)
  /// Calls of one forward per task key (CallsPerTask); a key missing: not known.
  std::map<std::string, int64_t> calls_per_forward;
  /// The conv regions' layout (OptimizeReport::memory_format: "contiguous"
  /// or "channels_last"), why, and the two timed forwards in µs
  /// (contiguous, channels_last; 0 = not measured, written as null).
  std::string memory_format = "contiguous";
  std::string memory_format_reason;
  std::pair<double, double> memory_format_us{0, 0};
  /// The attention pass's choice (OptimizeReport::attention: "unfused" or
  /// "sdpa"), why, and the two measured µs (0 = not timed).
  std::string attention = "unfused";
  std::string attention_reason;
  std::pair<double, double> attention_us{0, 0};
  /// The convs' cuDNN algorithm choice (OptimizeReport::conv_algorithm:
  /// "heuristic" or "benchmark"), why, and the two measured µs
  /// (heuristic, benchmark; 0 = not timed, written as null).
  std::string conv_algorithm = "heuristic";
  std::string conv_algorithm_reason;
  std::pair<double, double> conv_algorithm_us{0, 0};
  /// The SDPA kernel the calls are pinned to (OptimizeReport::attention_backend:
  /// "dispatch" or a backend), why, and each backend's µs or error.
  std::string attention_backend = "dispatch";
  std::string attention_backend_reason;
  struct SdpaBackendRow {
    std::string backend;  ///< "dispatch", "flash", "efficient", "cudnn", "math"
    double us = 0;        ///< median µs of the whole forward; 0 = not timed (written as null)
    std::string error;    ///< why it was not timed; empty when timed
  };
  std::vector<SdpaBackendRow> attention_backends;
  /// Capture rewrites that fusion groups then take (OptimizeReport):
  /// inference batch_norms made a multiply-add, in-place ops made functional,
  /// global average pools made a mean.
  int batch_norms_folded = 0;
  bool functional = false;
  int global_pools_as_mean = 0;
  int identity_copies_removed = 0;  ///< clone / detach copies removed
};

/// Per candidate source, what a group's candidates came to (issue 21 item
/// 4: decoded, compiled, verified, the best DICE time against the best
/// template time, whether DICE won): {"dice": {...}, "template": {...}},
/// keyed by the origin's prefix ("dice:sample3" -> "dice"; a skipped
/// generator's "generator:dice" -> "dice"). Each value has
///   "candidates": rows (for DICE: samples decoded, parse failures included),
///   "parsed": rows that were a candidate (not parse_error / skipped),
///   "compiled": rows that compiled (every outcome after compile),
///   "verified": rows that passed the verifier (slower, winner, verified),
///   "best_us": the least time_us among them (µs; null when none was timed),
///   "won": whether the group's winner origin has this prefix.
/// `cands` is a report document's "candidates" array; rows without an
/// origin count under "". Never throws; non-object rows are skipped.
nlohmann::json GeneratorSummary(const nlohmann::json& cands, const std::string& winner_origin);

/// One fusion group's entry of the report document: the TuneReport's
/// fields (baseline_us, best_us, speedup in µs and x; null when `timed` is
/// false or the value is 0), what its winner saved (calls_per_forward, or
/// null when not known; saved_us and saved_per of SavedByWinner, null
/// without a winner or when not timed) and one "candidates" row per outcome:
/// origin, hash, outcome (OutcomeName), error, compile_ms (null when 0),
/// time_us and speedup = baseline_us / time_us (null when not timed).
nlohmann::json GroupJson(const runtime::TuneReport& report, bool timed,
                         std::optional<int64_t> calls_per_forward = std::nullopt);

/// The whole `dice tune --json` document for `model` (see the header comment);
/// "memory_format": {"format", "reason", "contiguous_us", "channels_last_us"}
/// and "attention": {"choice", "reason", "unfused_us", "sdpa_us"} (times
/// null when not measured).
nlohmann::json TuneDocument(const std::string& model, const std::vector<runtime::TuneReport>& groups, const EndToEnd& e2e);

/// The report document of the kernel cache in `cache_dir`: "source":
/// "cache", "cache": the database path, one group per winner (newest first;
/// description = op summary and input specs, arch, gpu_name, verified,
/// pulled_from) with the key's attempts as its candidates (compile_ms null:
/// the table does not keep it). Attempts of a key without a winner are not
/// listed (cache::Store lists attempts per key only). Errors: kNotFound
/// when the directory has no kernels.db (nothing is created); those of
/// Store::Open, ListWinners and ListAttempts.
Expected<nlohmann::json> CacheDocument(const std::string& cache_dir);

/// The report escapes text with the dashboard's HtmlEscape (& < > " ' to
/// character references; dice/cache/http_server.h): one escaper for both pages.
using cache::HtmlEscape;

/// The report page of `doc` (the schema above): a header (model, GPU or
/// compile-only), "End to end" (before / captured / after µs and the
/// attribution: capture alone = before/captured, winners = captured/after,
/// total = before/after; a note when the model was captured unfrozen), an SVG bar plot of each group's speedup (one
/// <rect class="bar"> per group with a speedup, a line at 1x), and per
/// group a table with one row per candidate (origin, outcome, error, compile
/// ms, µs, speedup) and the winner. Every string of `doc` is HTML-escaped; a
/// null or missing number shows as "—". Never fails: fields of the wrong
/// type read as missing.
std::string RenderReportHtml(const nlohmann::json& doc);

/// Writes RenderReportHtml(doc) to `path` (created or truncated). Errors:
/// kIoError naming the path and errno text.
Status WriteReport(const nlohmann::json& doc, const std::string& path);

/// Adds `report` to `app` and its entry to `table`: `dice report
/// RESULTS.json|CACHE_DIR [-o FILE.html]` (default report.html). Exit codes:
/// 0 written, 2 a source that is neither a readable JSON document nor a
/// cache directory, 1 the page cannot be written.
void RegisterReport(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
