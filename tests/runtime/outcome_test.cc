// Outcome names (outcome.h): the strings the cache, the worker protocol and
// --json hold must never change.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dice/runtime/error_headline.h"
#include "dice/runtime/outcome.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

const std::vector<std::pair<Outcome, std::string>>& PersistedNames() {
  static const std::vector<std::pair<Outcome, std::string>> names = {
      {Outcome::kCompiled, "compiled"},   {Outcome::kCompileError, "compile_error"},
      {Outcome::kParseError, "parse_error"}, {Outcome::kVerifyFailed, "verify_failed"},
      {Outcome::kCrashed, "crashed"},     {Outcome::kTimeout, "timeout"},
      {Outcome::kSlower, "slower"},       {Outcome::kWinner, "winner"},
      {Outcome::kVerified, "verified"},   {Outcome::kSkipped, "skipped"}};
  return names;
}

TEST(OutcomeTest, NamesAreThePersistedStrings) {
  for (const auto& [value, name] : PersistedNames()) EXPECT_EQ(OutcomeName(value), name);
}

TEST(OutcomeTest, ParseIsTheInverseOfName) {
  for (const auto& [value, name] : PersistedNames()) {
    auto parsed = ParseOutcome(name);
    ASSERT_TRUE(parsed.has_value()) << name;
    EXPECT_EQ(*parsed, value) << name;
  }
}

TEST(OutcomeTest, ParseRejectsUnknownAndDifferentlyCasedNames) {
  for (const char* bad : {"", "Winner", "WINNER", "verify-failed", "ok", "winner "}) {
    EXPECT_FALSE(ParseOutcome(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(OutcomeTest, VerifiedAndCompiledClassesMatchTheReportCounters) {
  const std::set<Outcome> verified = {Outcome::kVerified, Outcome::kSlower, Outcome::kWinner};
  const std::set<Outcome> compiled = {Outcome::kCompiled, Outcome::kVerified, Outcome::kSlower, Outcome::kWinner,
                                      Outcome::kVerifyFailed, Outcome::kCrashed, Outcome::kTimeout};
  for (const auto& [value, name] : PersistedNames()) {
    EXPECT_EQ(IsVerified(value), verified.count(value) == 1) << name;
    EXPECT_EQ(IsCompiled(value), compiled.count(value) == 1) << name;
  }
}

TEST(OutcomeTest, CandidateOutcomeStartsSkippedAndPrintsItsStableName) {
  CandidateOutcome o;
  EXPECT_EQ(o.outcome, Outcome::kSkipped);
  o.outcome = Outcome::kVerifyFailed;
  EXPECT_EQ(OutcomeName(o.outcome), "verify_failed");
}

// Session 28: an nvcc failure reached the reports as "nvcc exited with
// status 2:" and nothing else; the headline now carries the cause.
TEST(OutcomeTest, ErrorHeadlineJoinsAHeaderLineWithItsCause) {
  EXPECT_EQ(ErrorHeadline("nvcc exited with status 2:\n\n  dice_ext.cu(291): error: no operator \"+\"\nmore"),
            "nvcc exited with status 2: dice_ext.cu(291): error: no operator \"+\"");
  EXPECT_EQ(ErrorHeadline("error: expected ';'\nline 2"), "error: expected ';'") << "no header: the first line";
  EXPECT_EQ(ErrorHeadline("ends with a colon:"), "ends with a colon:") << "nothing follows";
  EXPECT_EQ(ErrorHeadline("header:\n\n  \n"), "header:") << "only blank lines follow";
  EXPECT_EQ(ErrorHeadline(""), "");
  EXPECT_EQ(ErrorHeadline(std::string(10, 'x'), 4), "xxxx...");
  EXPECT_EQ(ErrorHeadline("a:\nbcdef", 5), "a: bc...");
}

}  // namespace
}  // namespace dice::runtime
