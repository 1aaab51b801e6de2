// env_int_test.cc — dice/core/env.h: the one rule by which every integer
// environment setting is read (absent -> default, junk or out of range ->
// default with one warning per variable, a value in range -> the value).
#include "dice/core/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace dice {
namespace {

TEST(EnvIntTest, AbsentOrEmptyMeansTheDefaultWithoutAProblem) {
  EnvIntReading unset = ParseEnvInt("DICE_X", nullptr, 4, 0, 64);
  EXPECT_EQ(unset.value, 4);
  EXPECT_EQ(unset.problem, "");
  EnvIntReading empty = ParseEnvInt("DICE_X", "", 4, 0, 64);
  EXPECT_EQ(empty.value, 4);
  EXPECT_EQ(empty.problem, "");
}

TEST(EnvIntTest, AWholeIntegerInRangeIsTakenBoundsIncluded) {
  EXPECT_EQ(ParseEnvInt("DICE_X", "0", 4, 0, 64).value, 0);
  EXPECT_EQ(ParseEnvInt("DICE_X", "64", 4, 0, 64).value, 64);
  EXPECT_EQ(ParseEnvInt("DICE_X", "-3", 1, -5, 5).value, -3);
  EXPECT_EQ(ParseEnvInt("DICE_X", "17", 4, 0, 64).problem, "");
}

TEST(EnvIntTest, JunkIsTheDefaultAndTheProblemNamesVariableValueRangeAndDefault) {
  for (const char* junk : {"two", "3x", "1.5", " 7", "7 ", "0x10", "-", "99999999999999999999999"}) {
    EnvIntReading r = ParseEnvInt("DICE_X", junk, 300, 1, 60000);
    EXPECT_EQ(r.value, 300) << junk;
    EXPECT_EQ(r.problem, std::string("DICE_X='") + junk + "' is not an integer in [1, 60000]; using the default 300")
        << junk;
  }
}

TEST(EnvIntTest, OutOfRangeIsTheDefaultWithAProblem) {
  EnvIntReading low = ParseEnvInt("DICE_X", "0", 1, 1, 256);
  EXPECT_EQ(low.value, 1);
  EXPECT_NE(low.problem.find("'0' is not an integer in [1, 256]"), std::string::npos) << low.problem;
  EnvIntReading high = ParseEnvInt("DICE_X", "65", 4, 0, 64);
  EXPECT_EQ(high.value, 4);
  EXPECT_FALSE(high.problem.empty());
}

TEST(EnvIntTest, ReadsTheEnvironmentAndWarnsOncePerVariable) {
  ::setenv("DICE_ENV_INT_TEST_GOOD", "12", 1);
  ::setenv("DICE_ENV_INT_TEST_BAD", "lots", 1);
  ::unsetenv("DICE_ENV_INT_TEST_ABSENT");
  testing::internal::CaptureStderr();
  const int64_t good = EnvInt("DICE_ENV_INT_TEST_GOOD", 3, 1, 100);
  const int64_t absent = EnvInt("DICE_ENV_INT_TEST_ABSENT", 3, 1, 100);
  const int64_t bad1 = EnvInt("DICE_ENV_INT_TEST_BAD", 3, 1, 100);
  const int64_t bad2 = EnvInt("DICE_ENV_INT_TEST_BAD", 3, 1, 100);
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("DICE_ENV_INT_TEST_GOOD");
  ::unsetenv("DICE_ENV_INT_TEST_BAD");
  EXPECT_EQ(good, 12);
  EXPECT_EQ(absent, 3);
  EXPECT_EQ(bad1, 3);
  EXPECT_EQ(bad2, 3);
  const std::string line =
      "dice: warning: DICE_ENV_INT_TEST_BAD='lots' is not an integer in [1, 100]; using the default 3\n";
  EXPECT_EQ(err, line) << "one warning for two reads of the same bad variable, none for the good or absent ones";
}

}  // namespace
}  // namespace dice
