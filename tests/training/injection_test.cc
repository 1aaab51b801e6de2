// The known-good injection schedule of BiC-RL (CPU, torch-free): injection
// goes on while the policy has earned nothing by itself and stops once its
// own rollouts earn reward, per task or everywhere.
#include <gtest/gtest.h>

#include "dice/training/injection.h"

namespace dice::training {
namespace {

TEST(TrainingInjection, TaskEarnedStopsInjectingForThatTaskOnly) {
  InjectionSchedule s(InjectionSchedule::Mode::kUntilTaskEarned);
  EXPECT_TRUE(s.ShouldInject("a"));
  EXPECT_TRUE(s.ShouldInject("b"));
  s.Report("a", 0);  // a group of a where no own rollout earned reward
  EXPECT_TRUE(s.ShouldInject("a"));
  s.Report("a", 2);  // two of a's own rollouts earned reward
  EXPECT_FALSE(s.ShouldInject("a"));
  EXPECT_TRUE(s.ShouldInject("b"));
  s.Report("a", 0);  // a later group earns nothing: it stays stopped
  EXPECT_FALSE(s.ShouldInject("a"));
  EXPECT_EQ(s.tasks_earned(), 1);
}

TEST(TrainingInjection, AThresholdNeedsThatManyOwnRewardsInAll) {
  InjectionSchedule s(InjectionSchedule::Mode::kUntilTaskEarned, 3);
  s.Report("a", 1);
  s.Report("a", 1);
  EXPECT_TRUE(s.ShouldInject("a"));
  s.Report("a", 1);
  EXPECT_FALSE(s.ShouldInject("a"));
}

TEST(TrainingInjection, AnyEarnedStopsInjectingEverywhere) {
  InjectionSchedule s(InjectionSchedule::Mode::kUntilAnyEarned);
  EXPECT_TRUE(s.ShouldInject("b"));
  s.Report("a", 1);
  EXPECT_FALSE(s.ShouldInject("a"));
  EXPECT_FALSE(s.ShouldInject("b"));
}

TEST(TrainingInjection, AlwaysNeverStopsAndModesParseByName) {
  InjectionSchedule s(InjectionSchedule::Mode::kAlways);
  s.Report("a", 8);
  EXPECT_TRUE(s.ShouldInject("a"));
  for (auto m : {InjectionSchedule::Mode::kAlways, InjectionSchedule::Mode::kUntilTaskEarned,
                 InjectionSchedule::Mode::kUntilAnyEarned}) {
    auto parsed = InjectionSchedule::ParseMode(InjectionSchedule::ModeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = InjectionSchedule::ParseMode("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--inject-until"), std::string::npos);
}

}  // namespace
}  // namespace dice::training
