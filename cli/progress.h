// cli/progress.h — what a long `dice` command shows while it works. Torch-free.
//
// Diagnostics (notices, warnings, progress) go through the process's log
// level (dice/core/log.h: DICE_LOG_LEVEL, --log-level): progress and notices
// at info, warnings at warn. Result tables are printed with printf and stay
// on stdout at every level.
//
// A ProgressLine shows the latest state of one long operation on stdout. On
// a terminal it is rewritten in place ('\r' + clear line, cut to the
// terminal's width); piped or in a log file each update is a line of its own.
// Not thread-safe: used from the command's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "dice/core/log.h"
#include "dice/runtime/tuner.h"

namespace dice::cli {

/// Makes stdout line-buffered (setvbuf _IOLBF) so that piped output appears
/// line by line instead of at exit. Call first thing in main.
void LineBufferStdout();

/// Prints the printf-formatted text and a newline on stdout when
/// LogEnabled(level); first ends a pending in-place progress line.
void Notice(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

/// "dice: warning: <text>" on stderr when LogEnabled(kWarn).
void Warn(const std::string& text);

/// A progress line on stdout, shown at log level info.
class ProgressLine {
 public:
  enum class Mode {
    kInPlace,  ///< a terminal: each Update rewrites the line
    kLines,    ///< piped or logged: each Update is a line
  };
  /// kInPlace when stdout is a terminal (isatty), kLines otherwise.
  ProgressLine();
  explicit ProgressLine(Mode mode) : mode_(mode), start_(std::chrono::steady_clock::now()) {}
  ~ProgressLine() { Finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  Mode mode() const { return mode_; }

  /// Seconds since construction.
  double elapsed_s() const;

  /// Shows `text` (one line, no newline) as the current state.
  void Update(const std::string& text);

  /// Keeps the in-place line as it is and moves to a fresh line (so that
  /// what follows, a table or the next item, does not overwrite it). No-op
  /// in line mode or when nothing is shown.
  void Finish();

 private:
  Mode mode_;
  std::chrono::steady_clock::time_point start_;
};

/// A duration for progress texts: "0.4 s", "42 s", "3m05s", "2h07m".
std::string FormatDuration(double seconds);

/// Whether `done` of `total` items is worth a line in line mode: none, all,
/// and each further tenth.
bool IsMilestone(int64_t done, int64_t total);

/// Shows "dice: <what> <done>/<total> entries (<elapsed>)" on `line`: every
/// call in place; in line mode only at milestones (IsMilestone).
void ShowCount(ProgressLine& line, const std::string& what, int64_t done, int64_t total);

/// The progress text of one Tuner event for fusion group `group` of
/// `groups`, e.g. "group 1/2 compile (0.4 s): 6 candidate(s), 6 compiled,
/// 0 verified, 0 timed, best - | mul+relu f32[64,64]"; while the worker
/// measures, how many have a result and, once known, the baseline:
/// "group 1/2 measure (3.1 s): 6 candidate(s), 6 compiled, 2 verified,
/// 2 timed, 3/6 finished, best 4.2 µs vs baseline 10.0 µs | ..."; a cached
/// winner: "group 1/2 done (0.0 s): cached winner (12.5 µs) | ...".
std::string FormatTuneProgress(int group, int groups, const runtime::TuneProgress& p);

/// Shows one Tuner event of fusion group `group` of `groups` on `line` as
/// `prefix` + FormatTuneProgress: every event in place; in line mode only
/// those that change what is known (generate, compile, measure - one per
/// compile batch, baseline and candidate result -, done; lookup, select and
/// persist are instants). kDone ends the group's in-place line,
/// so each group's outcome stays on screen.
void ShowTuneProgress(ProgressLine& line, const std::string& prefix, int group, int groups, const runtime::TuneProgress& p);

/// Keeps a tune's progress line alive while one step takes long: a CUTLASS
/// candidate's nvcc build sends no event for ~40 s (compile-only, and in
/// the worker). Show passes each event to ShowTuneProgress; a thread
/// repeats the last one, with its elapsed time brought up to now and
/// ", still working", each `every_s` seconds (> 0) without a new event,
/// until kDone (the group is finished) or destruction. Show and the thread
/// print under one mutex; the ProgressLine must outlive it and be used only
/// through it meanwhile. Shown at log level info, as every progress line.
class TuneHeartbeat {
 public:
  TuneHeartbeat(ProgressLine& line, std::string prefix, double every_s = 10.0);
  ~TuneHeartbeat();
  TuneHeartbeat(const TuneHeartbeat&) = delete;
  TuneHeartbeat& operator=(const TuneHeartbeat&) = delete;

  /// ShowTuneProgress(line, prefix, group, groups, p), remembered for the heartbeat.
  void Show(int group, int groups, const runtime::TuneProgress& p);

 private:
  void Run();
  ProgressLine& line_;
  const std::string prefix_;
  const double every_s_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                            // guarded by mu_
  bool live_ = false;                            // guarded by mu_: an event to repeat (not kDone)
  int group_ = 0, groups_ = 0;                   // guarded by mu_
  runtime::TuneProgress last_;                   // guarded by mu_; its description cleared (a view)
  std::string description_;                      // guarded by mu_: last_'s description, copied
  std::chrono::steady_clock::time_point at_;     // guarded by mu_: when last_ came (or was repeated)
  double since_event_s_ = 0;                     // guarded by mu_: seconds from last_ to the previous repeat
  std::thread thread_;
};

/// Adds an estimate of the time left to training progress lines ("sft step
/// 12/100 loss ...", "rl step 3/10 ..."): the mean time per step since the
/// first step line seen (before a second one: since construction) times the
/// steps left.
class StepEta {
 public:
  StepEta() : start_(std::chrono::steady_clock::now()) {}
  /// True when `line` holds "step K/N" (K, N decimal; the training
  /// libraries' step lines); sets *k and *n.
  static bool ParseStep(const std::string& line, int64_t* k, int64_t* n);

  /// `line` with ", ETA <duration>" appended when it holds "step K/N" with
  /// 1 <= K < N; the line unchanged otherwise.
  std::string Annotate(const std::string& line);

 private:
  std::chrono::steady_clock::time_point start_;     ///< construction
  std::chrono::steady_clock::time_point first_at_;  ///< when the first step line was seen
  int64_t first_step_ = -1;                          ///< K of the first step line seen
};

}  // namespace dice::cli
