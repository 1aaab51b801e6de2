// SelectWinner (select_winner.h): the winner rule on measured results, no GPU.
#include <gtest/gtest.h>

#include <vector>

#include "dice/runtime/select_winner.h"

namespace dice::runtime {
namespace {

Measurement Verified(double time_us, bool reduced_precision = false) {
  return Measurement{Outcome::kVerified, time_us, reduced_precision};
}

TEST(SelectWinnerTest, FastestVerifiedCandidateThatBeatsTheMarginWins) {
  const auto s = SelectWinner(100.0, {Verified(90), Verified(50), Verified(70)}, SelectionPolicy{0.05, false});
  EXPECT_EQ(s.winner, 1);
  // The others are faster than the threshold (95 µs) but not the best: still "verified".
  EXPECT_EQ(s.outcomes, (std::vector<Outcome>{Outcome::kVerified, Outcome::kWinner, Outcome::kVerified}));
}

TEST(SelectWinnerTest, CandidateWithinTheMarginIsSlowerNotWinner) {
  // 96 µs against a 100 µs baseline: faster, but not by 5%.
  const auto s = SelectWinner(100.0, {Verified(96), Verified(120)}, SelectionPolicy{0.05, false});
  EXPECT_EQ(s.winner, -1);
  EXPECT_EQ(s.outcomes, (std::vector<Outcome>{Outcome::kSlower, Outcome::kSlower}));
}

TEST(SelectWinnerTest, TimeExactlyAtTheThresholdDoesNotWin) {
  const auto s = SelectWinner(100.0, {Verified(90)}, SelectionPolicy{0.10, false});
  EXPECT_EQ(s.winner, -1);
  EXPECT_EQ(s.outcomes[0], Outcome::kSlower);
}

TEST(SelectWinnerTest, TieGoesToTheEarlierCandidate) {
  const auto s = SelectWinner(100.0, {Verified(80), Verified(40), Verified(40)}, SelectionPolicy{});
  EXPECT_EQ(s.winner, 1);
  EXPECT_EQ(s.outcomes[2], Outcome::kVerified);
}

TEST(SelectWinnerTest, ReducedPrecisionCandidateWinsOnlyWhenThePolicyAllowsIt) {
  const std::vector<Measurement> m = {Verified(60), Verified(20, /*reduced_precision=*/true)};
  const auto strict = SelectWinner(100.0, m, SelectionPolicy{0.05, false});
  EXPECT_EQ(strict.winner, 0);
  EXPECT_EQ(strict.outcomes[1], Outcome::kVerified) << "verified, but never the winner";
  const auto relaxed = SelectWinner(100.0, m, SelectionPolicy{0.05, true});
  EXPECT_EQ(relaxed.winner, 1);
  EXPECT_EQ(relaxed.outcomes[0], Outcome::kVerified);
  EXPECT_EQ(relaxed.outcomes[1], Outcome::kWinner);
}

TEST(SelectWinnerTest, NoVerifiedCandidateMeansNoWinnerAndFailuresKeepTheirOutcome) {
  const std::vector<Measurement> m = {{Outcome::kVerifyFailed, 0, false}, {Outcome::kCrashed, 0, false},
                                      {Outcome::kTimeout, 0, false},      {Outcome::kCompileError, 0, false},
                                      {Outcome::kSkipped, 0, false},      {Outcome::kVerified, 0, false}};
  const auto s = SelectWinner(100.0, m, SelectionPolicy{});
  EXPECT_EQ(s.winner, -1);
  EXPECT_EQ(s.outcomes, (std::vector<Outcome>{Outcome::kVerifyFailed, Outcome::kCrashed, Outcome::kTimeout,
                                              Outcome::kCompileError, Outcome::kSkipped, Outcome::kVerified}))
      << "a verified candidate without a time is neither winner nor slower";
}

TEST(SelectWinnerTest, UnknownBaselineMeansNoWinnerAndVerifiedStaysVerified) {
  const auto s = SelectWinner(0.0, {Verified(1), Verified(1000)}, SelectionPolicy{});
  EXPECT_EQ(s.winner, -1);
  EXPECT_EQ(s.outcomes, (std::vector<Outcome>{Outcome::kVerified, Outcome::kVerified}));
}

TEST(SelectWinnerTest, CompileOnlyResultsAreLeftAsTheyAre) {
  const std::vector<Measurement> m = {{Outcome::kCompiled, 0, false}, {Outcome::kCompileError, 0, false},
                                      {Outcome::kSkipped, 0, false}};
  const auto s = SelectWinner(0.0, m, SelectionPolicy{});
  EXPECT_EQ(s.winner, -1);
  EXPECT_EQ(s.outcomes, (std::vector<Outcome>{Outcome::kCompiled, Outcome::kCompileError, Outcome::kSkipped}));
}

TEST(SelectWinnerTest, EmptyMeasurementsSelectNothing) {
  const auto s = SelectWinner(100.0, {}, SelectionPolicy{});
  EXPECT_EQ(s.winner, -1);
  EXPECT_TRUE(s.outcomes.empty());
}

}  // namespace
}  // namespace dice::runtime
