// outcome.cc — Outcome names (outcome.h). The table is the persisted format:
// the attempts table and --json output hold these strings.
#include "dice/runtime/outcome.h"

#include <array>
#include <utility>

namespace dice::runtime {
namespace {

constexpr std::array<std::pair<Outcome, std::string_view>, 10> kNames = {{
    {Outcome::kCompiled, "compiled"},
    {Outcome::kCompileError, "compile_error"},
    {Outcome::kParseError, "parse_error"},
    {Outcome::kVerifyFailed, "verify_failed"},
    {Outcome::kCrashed, "crashed"},
    {Outcome::kTimeout, "timeout"},
    {Outcome::kSlower, "slower"},
    {Outcome::kWinner, "winner"},
    {Outcome::kVerified, "verified"},
    {Outcome::kSkipped, "skipped"},
}};

}  // namespace

std::string_view OutcomeName(Outcome outcome) {
  for (const auto& [value, name] : kNames) {
    if (value == outcome) return name;
  }
  return "unknown";  // unreachable for a valid enumerator
}

std::optional<Outcome> ParseOutcome(std::string_view name) {
  for (const auto& [value, text] : kNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

bool IsVerified(Outcome outcome) {
  return outcome == Outcome::kVerified || outcome == Outcome::kSlower || outcome == Outcome::kWinner;
}

bool IsCompiled(Outcome outcome) {
  return outcome == Outcome::kCompiled || IsVerified(outcome) || outcome == Outcome::kVerifyFailed ||
         outcome == Outcome::kCrashed || outcome == Outcome::kTimeout;
}

}  // namespace dice::runtime
