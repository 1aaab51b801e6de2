// Tests of the no-winner fallback reason (torch_ext/src/tune_queue.h
// NoWinnerText), the text GroupStats and the profile show when tuning stored
// nothing: counts, baseline, the fastest verified candidate and the margin
// it missed, and the first candidate that failed with the first line of its
// error.
#include "../../torch_ext/src/tune_queue.h"

#include <gtest/gtest.h>

#include <string>

namespace dice::torch_ext {
namespace {

runtime::CandidateOutcome MakeOutcome(const std::string& origin, runtime::Outcome kind, double time_us = 0,
                         const std::string& error = "") {
  runtime::CandidateOutcome o;
  o.origin = origin;
  o.outcome = kind;
  o.time_us = time_us;
  o.error = error;
  return o;
}

TEST(NoWinnerTextTest, NamesCountsBaselineAndTheFastestVerifiedCandidate) {
  runtime::TuneReport rep;
  rep.tried = 3;
  rep.compiled = 3;
  rep.verified = 2;
  rep.baseline_us = 11400.0;
  rep.outcomes = {MakeOutcome("template:a", runtime::Outcome::kSlower, 11900.0),
                  MakeOutcome("template:b", runtime::Outcome::kSlower, 11350.2),
                  MakeOutcome("template:c", runtime::Outcome::kCompiled)};
  EXPECT_EQ(NoWinnerText(rep, 0.05),
            "no winner (tuned: 3 tried, 3 compiled, 2 verified; baseline 11400.0 µs, best template:b 11350.2 µs, "
            "needs < 0.95x of it)");
}

TEST(NoWinnerTextTest, NamesTheFirstFailureWithTheFirstLineOfItsError) {
  runtime::TuneReport rep;
  rep.tried = 2;
  rep.outcomes = {MakeOutcome("template:ok", runtime::Outcome::kVerified, 5.0),
                  MakeOutcome("dice:sample1", runtime::Outcome::kCompileError, 0, "error: expected ';'\nline 2\nline 3"),
                  MakeOutcome("dice:sample2", runtime::Outcome::kVerifyFailed, 0, "max abs error 3.0")};
  const std::string text = NoWinnerText(rep, 0.05);
  EXPECT_NE(text.find("; first failure dice:sample1: compile_error (error: expected ';'))"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("line 2"), std::string::npos) << text;
  EXPECT_EQ(text.find("sample2"), std::string::npos) << text;
}

// nvcc's failure header ends in ':' and its cause is on the next lines: the
// reason carries both (session 28 saw "(nvcc exited with status 2:)" alone).
TEST(NoWinnerTextTest, AnNvccFailureNamesItsFirstErrorLine) {
  runtime::TuneReport rep;
  rep.tried = 1;
  rep.outcomes = {MakeOutcome("template:gemm/tc/64x64x32/s10", runtime::Outcome::kCompileError, 0,
                              "nvcc exited with status 2:\ndice_ext.cu(291): error: no operator \"+\" matches\n1 error")};
  const std::string text = NoWinnerText(rep, 0.05);
  EXPECT_NE(text.find("compile_error (nvcc exited with status 2: dice_ext.cu(291): error: no operator \"+\" matches)"),
            std::string::npos)
      << text;
}

TEST(NoWinnerTextTest, CutsALongErrorAt200Characters) {
  runtime::TuneReport rep;
  rep.outcomes = {MakeOutcome("dice:long", runtime::Outcome::kCrashed, 0, std::string(500, 'x'))};
  const std::string text = NoWinnerText(rep, 0.05);
  EXPECT_NE(text.find("(" + std::string(200, 'x') + "...)"), std::string::npos) << text;
  EXPECT_EQ(text.find(std::string(201, 'x')), std::string::npos) << text;
}

TEST(NoWinnerTextTest, SkippedCandidatesCountAsFailuresAndNoBaselineIsLeftOut) {
  runtime::TuneReport rep;
  rep.tried = 1;
  rep.outcomes = {MakeOutcome("template:x", runtime::Outcome::kSkipped, 0, "precision policy")};
  EXPECT_EQ(NoWinnerText(rep, 0.05),
            "no winner (tuned: 1 tried, 0 compiled, 0 verified; first failure template:x: skipped (precision policy))");
}

}  // namespace
}  // namespace dice::torch_ext
