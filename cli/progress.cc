// cli/progress.h: notices, warnings and progress lines of the `dice` tool.
#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdarg>

namespace dice::cli {
namespace {

// True while an in-place progress line is on screen without its newline.
bool g_pending = false;

void EndPendingLine() {
  if (!g_pending) return;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  g_pending = false;
}

// Columns of the terminal on stdout (80 when unknown).
size_t TerminalWidth() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// `text` cut to at most `width` characters (never inside a UTF-8 sequence).
std::string CutTo(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  size_t n = width;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

std::string Fixed(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

}  // namespace

void LineBufferStdout() { std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ); }

void Notice(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) return;
  EndPendingLine();
  va_list args;
  va_start(args, format);
  std::vfprintf(stdout, format, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Warn(const std::string& text) {
  if (!LogEnabled(LogLevel::kWarn)) return;
  EndPendingLine();
  std::fprintf(stderr, "dice: warning: %s\n", text.c_str());
}

ProgressLine::ProgressLine() : ProgressLine(::isatty(STDOUT_FILENO) ? Mode::kInPlace : Mode::kLines) {}

double ProgressLine::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::Update(const std::string& text) {
  if (!LogEnabled(LogLevel::kInfo)) return;
  if (mode_ == Mode::kLines) {
    EndPendingLine();
    std::printf("%s\n", text.c_str());
  } else {
    // Carriage return, erase the line (ECMA-48 EL 2), the text cut so it never wraps.
    std::printf("\r\033[2K%s", CutTo(text, TerminalWidth() - 1).c_str());
    g_pending = true;
  }
  std::fflush(stdout);
}

void ProgressLine::Finish() {
  if (mode_ == Mode::kInPlace) EndPendingLine();
}

std::string FormatDuration(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 10) return Fixed("%.1f s", seconds);
  if (seconds < 60) return Fixed("%.0f s", seconds);
  const long long s = static_cast<long long>(seconds + 0.5);
  char buf[48];
  if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

bool IsMilestone(int64_t done, int64_t total) {
  if (done <= 0 || done >= total) return true;
  return done * 10 / total != (done - 1) * 10 / total;
}

void ShowCount(ProgressLine& line, const std::string& what, int64_t done, int64_t total) {
  if (line.mode() == ProgressLine::Mode::kLines && !IsMilestone(done, total)) return;
  line.Update("dice: " + what + " " + std::to_string(done) + "/" + std::to_string(total) + " entries (" +
              FormatDuration(line.elapsed_s()) + ")");
}

std::string FormatTuneProgress(int group, int groups, const runtime::TuneProgress& p) {
  // Elapsed time first: a narrow terminal cuts the line's end.
  std::string out = "group " + std::to_string(group) + "/" + std::to_string(groups) + " " +
                    std::string(runtime::TunePhaseName(p.phase)) + " (" + FormatDuration(p.elapsed_s) + "): ";
  if (p.from_cache) {
    out += "cached winner";
    if (p.best_us > 0) out += " (" + Fixed("%.1f", p.best_us) + " µs)";
  } else {
    out += std::to_string(p.generated) + " candidate(s), " + std::to_string(p.compiled) + " compiled, " +
           std::to_string(p.verified) + " verified, " + std::to_string(p.timed) + " timed, ";
    // While the worker measures: how many have their result (any outcome).
    if (p.phase == runtime::TunePhase::kMeasure) {
      out += std::to_string(p.finished) + "/" + std::to_string(p.generated) + " finished, ";
    }
    out += "best " + (p.best_us > 0 ? Fixed("%.1f", p.best_us) + " µs" : std::string("-"));
    if (p.baseline_us > 0) out += " vs baseline " + Fixed("%.1f", p.baseline_us) + " µs";
  }
  if (!p.description.empty()) out += " | " + std::string(p.description);
  return out;
}

void ShowTuneProgress(ProgressLine& line, const std::string& prefix, int group, int groups, const runtime::TuneProgress& p) {
  const bool milestone = p.phase == runtime::TunePhase::kGenerate || p.phase == runtime::TunePhase::kCompile ||
                         p.phase == runtime::TunePhase::kMeasure || p.phase == runtime::TunePhase::kDone;
  if (line.mode() == ProgressLine::Mode::kLines && !milestone) return;
  line.Update(prefix + FormatTuneProgress(group, groups, p));
  if (p.phase == runtime::TunePhase::kDone) line.Finish();
}

TuneHeartbeat::TuneHeartbeat(ProgressLine& line, std::string prefix, double every_s)
    : line_(line), prefix_(std::move(prefix)), every_s_(every_s > 0 ? every_s : 10.0),
      thread_([this] { Run(); }) {}

TuneHeartbeat::~TuneHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TuneHeartbeat::Show(int group, int groups, const runtime::TuneProgress& p) {
  std::lock_guard<std::mutex> lock(mu_);
  ShowTuneProgress(line_, prefix_, group, groups, p);
  group_ = group;
  groups_ = groups;
  last_ = p;
  description_ = std::string(p.description);  // the view is valid only during the callback
  last_.description = {};
  live_ = p.phase != runtime::TunePhase::kDone;
  at_ = std::chrono::steady_clock::now();
  since_event_s_ = 0;
}

void TuneHeartbeat::Run() {
  const auto every = std::chrono::duration<double>(every_s_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!live_) {
      wake_.wait_for(lock, every);
      continue;
    }
    const auto due = at_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(every);
    if (wake_.wait_until(lock, due, [this, due] { return stop_ || at_ >= due || !live_; })) continue;
    // No event for every_s: the same state, its clock brought up to now.
    const auto now = std::chrono::steady_clock::now();
    since_event_s_ += std::chrono::duration<double>(now - at_).count();
    at_ = now;
    runtime::TuneProgress p = last_;
    p.elapsed_s += since_event_s_;
    line_.Update(prefix_ + FormatTuneProgress(group_, groups_, p) + ", still working" +
                 (description_.empty() ? std::string() : " | " + description_));
  }
}

bool StepEta::ParseStep(const std::string& line, int64_t* k, int64_t* n) {
  for (size_t at = line.find("step "); at != std::string::npos; at = line.find("step ", at + 1)) {
    size_t i = at + 5, k_end = i;
    while (k_end < line.size() && k_end - i < 18 && line[k_end] >= '0' && line[k_end] <= '9') ++k_end;
    if (k_end == i || k_end >= line.size() || line[k_end] != '/') continue;
    size_t n_end = k_end + 1;
    while (n_end < line.size() && n_end - k_end < 19 && line[n_end] >= '0' && line[n_end] <= '9') ++n_end;
    if (n_end == k_end + 1) continue;
    *k = std::stoll(line.substr(i, k_end - i));
    *n = std::stoll(line.substr(k_end + 1, n_end - k_end - 1));
    return true;
  }
  return false;
}

std::string StepEta::Annotate(const std::string& line) {
  int64_t k = 0, n = 0;
  if (!ParseStep(line, &k, &n) || k < 1 || k >= n) return line;
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = k;
    first_at_ = now;
  }
  // Mean seconds per step: since the first step line once a later one is
  // seen (model loading excluded), else since the command began.
  double per_step;
  if (k > first_step_) {
    per_step = std::chrono::duration<double>(now - first_at_).count() / static_cast<double>(k - first_step_);
  } else {
    per_step = std::chrono::duration<double>(now - start_).count();
  }
  return line + ", ETA " + FormatDuration(per_step * static_cast<double>(n - k));
}

}  // namespace dice::cli
