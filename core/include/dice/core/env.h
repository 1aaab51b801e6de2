// dice/core/env.h — integer settings read from the environment, one rule
// for all of them (DICE_REMOTE_TIMEOUT_MS, DICE_CPU_TIMING_THREADS,
// DICE_CACHE_READ_CONNECTIONS, ...).
//
// The rule: unset or empty means the default; a whole decimal integer inside
// the variable's range is taken; anything else (junk, trailing text, out of
// range, overflow) also means the default, after one warning on stderr per
// variable and process. A setting exported for a whole fleet must not stop
// every command, and must not be ignored in silence either (DICE_LOG_LEVEL
// follows the same rule, core/log.h).
//
// Header-only, so that every layer can use it without a link dependency;
// includes neither torch nor spdlog. Thread-safe.
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "dice/core/log.h"

namespace dice {
inline namespace core {

/// What ParseEnvInt made of one variable's value.
struct EnvIntReading {
  int64_t value = 0;    ///< the value to use: the integer read, or the default
  std::string problem;  ///< "" when the text was absent or fine; else why the default is used
};

/// Reads `text`, the value of the environment variable `name` (nullptr =
/// unset), as a decimal integer in [min, max]; `fallback` is returned as
/// given (it need not lie in the range, e.g. -1 for "not set"). Unset or empty:
/// {fallback, ""}. A whole decimal integer (optional sign, no blanks, no
/// trailing characters) within [min, max]: {it, ""}. Anything else:
/// {fallback, "NAME='text' is not an integer in [min, max]; using the
/// default F"}. Pure: touches neither the environment nor stderr.
inline EnvIntReading ParseEnvInt(const char* name, const char* text, int64_t fallback, int64_t min, int64_t max) {
  if (text == nullptr || *text == '\0') return {fallback, ""};
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  const bool whole = end != text && *end == '\0' && errno != ERANGE &&
                     std::isspace(static_cast<unsigned char>(text[0])) == 0;
  if (whole && v >= min && v <= max) return {static_cast<int64_t>(v), ""};
  return {fallback, std::string(name) + "='" + text + "' is not an integer in [" + std::to_string(min) + ", " +
                        std::to_string(max) + "]; using the default " + std::to_string(fallback)};
}

/// The integer setting $name under ParseEnvInt's rule, read now (each call
/// reads the environment again). On junk or an out-of-range value it returns
/// `fallback` and prints "dice: warning: <problem>" on stderr once per
/// variable name in this process (and only when LogEnabled(kWarn)), however
/// often it is called. Thread-safe (the once-set takes a lock; call it at
/// start-up or construction time, not on a hot path).
inline int64_t EnvInt(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const EnvIntReading r = ParseEnvInt(name, std::getenv(name), fallback, min, max);
  if (!r.problem.empty()) {
    static std::mutex mu;
    static std::set<std::string>* warned = new std::set<std::string>;  // leaked: read during static destruction
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = warned->insert(name).second;
    }
    if (first && LogEnabled(LogLevel::kWarn)) {
      std::fprintf(stderr, "dice: warning: %s\n", r.problem.c_str());
      std::fflush(stderr);
    }
  }
  return r.value;
}

}  // namespace core
}  // namespace dice
