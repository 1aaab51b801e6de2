// dice/core/log.h: the process's log level, mirrored into spdlog.
#include "dice/core/log.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace dice {
inline namespace core {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "info";
}

Expected<LogLevel> ParseLogLevel(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  std::string name;
  for (size_t i = b; i < e; ++i) name += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  if (name == "warning") return LogLevel::kWarn;
  for (LogLevel l : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError,
                     LogLevel::kOff}) {
    if (name == LogLevelName(l)) return l;
  }
  return Status(StatusCode::kInvalidArgument,
                "unknown log level '" + std::string(text) + "' (expected trace|debug|info|warn|error|off)");
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  spdlog::set_level(ToSpdlog(level));
}

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool LogEnabled(LogLevel level) {
  const LogLevel current = GetLogLevel();
  return level != LogLevel::kOff && current != LogLevel::kOff && level >= current;
}

Status InitLogLevelFromEnv() {
  const char* env = std::getenv("DICE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return Status::Ok();
  auto level = ParseLogLevel(env);
  if (!level.ok()) return level.status().WithContext("DICE_LOG_LEVEL");
  SetLogLevel(*level);
  return Status::Ok();
}

}  // namespace core
}  // namespace dice
