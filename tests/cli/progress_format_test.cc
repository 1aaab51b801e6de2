// The progress printer of `dice tune` / `dice warmup` (cli/progress.h), fed
// by a fake sink: the Tuner's events of a GPU tune (per compile batch,
// baseline and candidate result while the worker measures) as they would
// arrive, with stdout captured. CPU only; no worker, no GPU.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "progress.h"

namespace dice::cli {
namespace {

using runtime::TunePhase;
using runtime::TuneProgress;

// Captures what is written to stdout (fd 1) between construction and Take().
class CapturedStdout {
 public:
  CapturedStdout() {
    std::fflush(stdout);
    path_ = ::testing::TempDir() + "dice-progress-format-XXXXXX";
    int fd = ::mkstemp(path_.data());
    EXPECT_GE(fd, 0);
    saved_ = ::dup(STDOUT_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    ::close(fd);
  }
  ~CapturedStdout() { Restore(); }
  std::string Take() {
    Restore();
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    ::unlink(path_.c_str());
    return ss.str();
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

TuneProgress Event(TunePhase phase, int compiled, int finished, int verified, double best_us, double baseline_us,
                   double elapsed_s) {
  TuneProgress p;
  p.phase = phase;
  p.generated = 3;
  p.compiled = compiled;
  p.finished = finished;
  p.verified = verified;
  p.timed = verified;
  p.best_us = best_us;
  p.baseline_us = baseline_us;
  p.elapsed_s = elapsed_s;
  p.description = "mul+relu f32[32,32]";
  return p;
}

// What the Tuner sends for one group of a GPU tune: generate, the batch
// handed over, a compile batch, the baseline, two results, answered, select,
// persist, done.
std::vector<TuneProgress> GpuTuneEvents() {
  return {Event(TunePhase::kGenerate, 0, 0, 0, 0, 0, 0.1),     Event(TunePhase::kMeasure, 0, 0, 0, 0, 0, 0.2),
          Event(TunePhase::kMeasure, 2, 1, 0, 0, 0, 1.5),      Event(TunePhase::kMeasure, 2, 1, 0, 0, 10.0, 2.0),
          Event(TunePhase::kMeasure, 2, 2, 1, 8.0, 10.0, 2.5), Event(TunePhase::kMeasure, 2, 3, 2, 4.0, 10.0, 3.0),
          Event(TunePhase::kMeasure, 2, 3, 2, 4.0, 10.0, 3.0), Event(TunePhase::kSelectWinner, 2, 0, 2, 4.0, 10.0, 3.0),
          Event(TunePhase::kPersist, 2, 0, 2, 4.0, 10.0, 3.0),  Event(TunePhase::kDone, 2, 0, 2, 4.0, 10.0, 3.1)};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

TEST(ProgressFormat, MeasureLineCountsFinishedCandidatesBestAndBaseline) {
  EXPECT_EQ(FormatTuneProgress(1, 2, Event(TunePhase::kMeasure, 2, 2, 1, 8.0, 10.0, 2.5)),
            "group 1/2 measure (2.5 s): 3 candidate(s), 2 compiled, 1 verified, 1 timed, 2/3 finished, "
            "best 8.0 µs vs baseline 10.0 µs | mul+relu f32[32,32]");
  // Before the baseline and any result: nothing invented.
  EXPECT_EQ(FormatTuneProgress(1, 2, Event(TunePhase::kMeasure, 0, 0, 0, 0, 0, 0.2)),
            "group 1/2 measure (0.2 s): 3 candidate(s), 0 compiled, 0 verified, 0 timed, 0/3 finished, best - | "
            "mul+relu f32[32,32]");
}

TEST(ProgressFormat, CompileOnlyLineIsUnchanged) {
  // The compile-only line docs/CLI.md quotes: no finished count, no baseline.
  EXPECT_EQ(FormatTuneProgress(1, 2, Event(TunePhase::kCompile, 3, 0, 0, 0, 0, 0.4)),
            "group 1/2 compile (0.4 s): 3 candidate(s), 3 compiled, 0 verified, 0 timed, best - | "
            "mul+relu f32[32,32]");
}

TEST(ProgressFormat, LogModePrintsOneLinePerWorkerEventInOrder) {
  CapturedStdout out;
  {
    ProgressLine line(ProgressLine::Mode::kLines);
    for (const TuneProgress& p : GpuTuneEvents()) ShowTuneProgress(line, "dice: ", 1, 1, p);
  }
  const std::vector<std::string> lines = Lines(out.Take());
  // select and persist are instants: every other event is a line of its own.
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0].rfind("dice: group 1/1 generate", 0), 0u) << lines[0];
  for (size_t i = 1; i <= 6; ++i) EXPECT_EQ(lines[i].rfind("dice: group 1/1 measure", 0), 0u) << lines[i];
  EXPECT_NE(lines[2].find("1/3 finished, best -"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("vs baseline 10.0 µs"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("2/3 finished, best 8.0 µs"), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find("3/3 finished, best 4.0 µs"), std::string::npos) << lines[5];
  EXPECT_EQ(lines[7].rfind("dice: group 1/1 done", 0), 0u) << lines[7];
  for (const std::string& l : lines) EXPECT_EQ(l.find('\r'), std::string::npos) << "no in-place rewrite in a log";
}

TEST(ProgressFormat, TerminalModeRewritesOneLineInPlaceAndEndsItWhenDone) {
  CapturedStdout out;
  {
    ProgressLine line(ProgressLine::Mode::kInPlace);
    for (const TuneProgress& p : GpuTuneEvents()) ShowTuneProgress(line, "dice: ", 1, 1, p);
  }
  const std::string text = out.Take();
  // Every event (select and persist too) rewrites the line; one newline ends it at done.
  size_t rewrites = 0;
  for (size_t at = text.find("\r\033[2K"); at != std::string::npos; at = text.find("\r\033[2K", at + 1)) ++rewrites;
  EXPECT_EQ(rewrites, GpuTuneEvents().size());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.rfind("done"), std::string::npos);
}

TEST(ProgressFormat, LogLevelWarnHidesTheProgressLines) {
  const LogLevel before = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  CapturedStdout out;
  {
    ProgressLine line(ProgressLine::Mode::kLines);
    for (const TuneProgress& p : GpuTuneEvents()) ShowTuneProgress(line, "dice: ", 1, 1, p);
  }
  const std::string text = out.Take();
  SetLogLevel(before);
  EXPECT_EQ(text, "");
}

// A step with no event for longer than the heartbeat's period (an nvcc
// build): the last state is repeated with its clock brought up to now, and
// nothing more once the group is done.
TEST(ProgressFormat, HeartbeatRepeatsTheLastStateWhileAStepTakesLongAndStopsWhenDone) {
  CapturedStdout out;
  {
    ProgressLine line(ProgressLine::Mode::kLines);
    TuneHeartbeat beat(line, "dice: ", 0.05);
    beat.Show(1, 1, Event(TunePhase::kGenerate, 0, 0, 0, 0, 0, 0.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // ~8 periods without an event
    beat.Show(1, 1, Event(TunePhase::kDone, 3, 0, 0, 0, 0, 0.3));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // done: no repeats
  }
  const std::vector<std::string> lines = Lines(out.Take());
  ASSERT_GE(lines.size(), 3u);  // at least one repeat, even on a loaded machine
  EXPECT_EQ(lines.front().rfind("dice: group 1/1 generate (0.0 s)", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind("dice: group 1/1 done", 0), 0u) << lines.back();
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind("dice: group 1/1 generate (", 0), 0u) << lines[i];
    EXPECT_NE(lines[i].find(", still working | mul+relu f32[32,32]"), std::string::npos) << lines[i];
    EXPECT_EQ(lines[i].find("(0.0 s)"), std::string::npos) << "the clock is brought up to now: " << lines[i];
  }
  EXPECT_LE(lines.size(), 11u) << "at most one repeat per period, none after done";
}

}  // namespace
}  // namespace dice::cli
