// The attribution of `dice tune`'s end-to-end gain (cli/attribution.h):
// the arithmetic that splits the total into capture × winners, the line
// that says it, each winner's saving per forward, and the round-robin timer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attribution.h"

namespace dice::cli {
namespace {

TEST(AttributionTest, SplitsTheTotalIntoCaptureTimesWinners) {
  const Attribution a = Attribute(/*original_us=*/812.0, /*captured_us=*/416.4, /*optimized_us=*/400.0);
  ASSERT_TRUE(a.capture && a.winners && a.total);
  EXPECT_DOUBLE_EQ(*a.capture, 812.0 / 416.4);
  EXPECT_DOUBLE_EQ(*a.winners, 416.4 / 400.0);
  EXPECT_DOUBLE_EQ(*a.total, 812.0 / 400.0);
  EXPECT_NEAR(*a.total, *a.capture * *a.winners, 1e-12 * *a.total);
}

TEST(AttributionTest, ATimeNotMeasuredLeavesEveryRatioThatNeedsItUnset) {
  const Attribution none = Attribute(0, 0, 0);
  EXPECT_FALSE(none.capture);
  EXPECT_FALSE(none.winners);
  EXPECT_FALSE(none.total);
  const Attribution no_captured = Attribute(100, 0, 50);
  EXPECT_FALSE(no_captured.capture);
  EXPECT_FALSE(no_captured.winners);
  ASSERT_TRUE(no_captured.total);
  EXPECT_DOUBLE_EQ(*no_captured.total, 2.0);
  EXPECT_FALSE(Attribute(100, -1, 50).capture);
}

TEST(AttributionTest, LineSaysWhatCaptureAloneGaveAndWhatTheWinnersAddedOnTop) {
  EXPECT_EQ(AttributionLine(Attribute(203, 104, 100), /*frozen=*/true),
            "capture alone (freeze, folding): 1.95x; dice winners: 1.04x on top; total 2.03x");
  EXPECT_EQ(AttributionLine(Attribute(100, 100, 125), /*frozen=*/false),
            "capture alone (not frozen: no folding): 1.00x; dice winners: 0.80x on top; total 0.80x");
  EXPECT_EQ(AttributionLine(Attribute(0, 0, 0), /*frozen=*/true),
            "capture alone (freeze, folding): not measured; dice winners: not measured; total not measured");
  EXPECT_EQ(AttributionLine(Attribute(203, 104, 100), /*frozen=*/true, "channels_last"),
            "capture alone (freeze, folding, channels_last): 1.95x; dice winners: 1.04x on top; total 2.03x");
  EXPECT_EQ(AttributionLine(Attribute(203, 104, 100), /*frozen=*/true, "contiguous"),
            "capture alone (freeze, folding): 1.95x; dice winners: 1.04x on top; total 2.03x");
}

TEST(AttributionTest, WinnerSavesItsGainOverTheFallbackOnEveryCallOfAForward) {
  const WinnerSaving per_forward = SavedByWinner(/*baseline_us=*/30, /*best_us=*/10, /*calls_per_forward=*/3);
  ASSERT_TRUE(per_forward.saved_us);
  EXPECT_DOUBLE_EQ(*per_forward.saved_us, 60.0);
  EXPECT_EQ(per_forward.calls_per_forward, 3);
  const WinnerSaving per_call = SavedByWinner(30, 10, std::nullopt);
  ASSERT_TRUE(per_call.saved_us);
  EXPECT_DOUBLE_EQ(*per_call.saved_us, 20.0);
  EXPECT_FALSE(per_call.calls_per_forward);
  EXPECT_FALSE(SavedByWinner(30, 0, 2).saved_us) << "no winner: nothing saved";
  EXPECT_FALSE(SavedByWinner(0, 0, 2).saved_us) << "compile-only: nothing timed";
  ASSERT_TRUE(SavedByWinner(10, 12, 1).saved_us);
  EXPECT_DOUBLE_EQ(*SavedByWinner(10, 12, 1).saved_us, -2.0) << "a slower cached winner costs time";
}

TEST(AttributionTest, CallsPerTaskSumsTheGroupsOfOneKeyAndDropsKeysWhoseCallsCannotBeSplit) {
  const std::map<std::string, int64_t> calls = CallsPerTask({
      {{"a"}, 2},       // two groups with the same task (a repeated block)
      {{"a"}, 1},
      {{"b"}, 4},
      {{"c", "d"}, 5},  // one group seen with two input signatures: its 5 calls cannot be split
      {{"d"}, 1},
      {{"e"}, 0},       // not called in this forward
      {{}, 7},          // no task key computed
  });
  EXPECT_EQ(calls, (std::map<std::string, int64_t>{{"a", 3}, {"b", 4}}));
}

TEST(AttributionTest, RoundRobinTimesEveryVariantEachRoundInARotatedOrderAndTakesMedians) {
  std::vector<size_t> order;
  // Variant v's k-th call takes 10*v + k µs: the medians are known.
  std::vector<int> calls(3, 0);
  const std::vector<double> medians = RoundRobinMedians(3, /*reps=*/5, /*warmup=*/2, [&](size_t v) {
    order.push_back(v);
    return 10.0 * static_cast<double>(v) + calls[v]++;
  });
  ASSERT_EQ(order.size(), 3u * (2 + 5));
  // Warm-up: every variant in turn, twice.
  EXPECT_EQ(std::vector<size_t>(order.begin(), order.begin() + 6), (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  // Timed rounds: each variant once per round, round r starting at r % 3.
  EXPECT_EQ(std::vector<size_t>(order.begin() + 6, order.end()),
            (std::vector<size_t>{0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2, 1, 2, 0}));
  // Timed calls of each variant are its calls 2..6 (after two warm-ups): median call 4.
  EXPECT_EQ(medians, (std::vector<double>{4.0, 14.0, 24.0}));
}

}  // namespace
}  // namespace dice::cli
