// dice/core/log.h — one process-wide log level for DICE's own output.
//
// The level names are those of DICE_LOG_LEVEL, shared with the Python side
// (torch_ext/python/dice_torch/logs.py): trace | debug | info | warn | error
// | off ("warning" is read as warn, as in Python). SetLogLevel sets the level
// of spdlog's default logger (what the runtime, cache and generator log
// through) and the level LogEnabled answers for output that does not go
// through spdlog (the `dice` CLI's progress lines and warnings, code compiled
// with LibTorch, which cannot include spdlog next to LibTorch's own fmt).
// This header includes neither spdlog nor torch. The default level is info.
// Thread-safe: the level is an atomic; reading it takes no lock.
#pragma once

#include <string_view>

#include "dice/core/status.h"

namespace dice {
inline namespace core {

/// Severity, lowest first; kOff silences everything.
enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

/// The level's DICE_LOG_LEVEL name: "trace", "debug", "info", "warn",
/// "error", "off". The view points to static storage.
std::string_view LogLevelName(LogLevel level);

/// Reads a level name (case-insensitive, surrounding blanks ignored;
/// "warning" = warn). Errors: kInvalidArgument naming the text and listing
/// the accepted names, e.g. "unknown log level 'bogus' (expected
/// trace|debug|info|warn|error|off)".
Expected<LogLevel> ParseLogLevel(std::string_view text);

/// Sets the process's level (and spdlog's default logger's).
void SetLogLevel(LogLevel level);

/// The process's level (kInfo until SetLogLevel is called).
LogLevel GetLogLevel();

/// True when a message of `level` is shown at the current level: level >=
/// GetLogLevel() and neither is kOff.
bool LogEnabled(LogLevel level);

/// Sets the level from $DICE_LOG_LEVEL; unset or empty leaves it as it is.
/// Errors: kInvalidArgument, as ParseLogLevel, prefixed with
/// "DICE_LOG_LEVEL" (the level is then left as it was).
Status InitLogLevelFromEnv();

}  // namespace core
}  // namespace dice
