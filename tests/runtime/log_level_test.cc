// dice/core/log.h: the level names shared with DICE_LOG_LEVEL and the Python
// logger, what a bad name says, and which messages a level lets through.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dice/core/log.h"

namespace dice {
namespace {

// Restores the process's level and DICE_LOG_LEVEL after each test.
class LogLevelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = GetLogLevel();
    const char* env = std::getenv("DICE_LOG_LEVEL");
    had_env_ = env != nullptr;
    if (had_env_) env_ = env;
  }
  void TearDown() override {
    SetLogLevel(saved_);
    if (had_env_) {
      ::setenv("DICE_LOG_LEVEL", env_.c_str(), 1);
    } else {
      ::unsetenv("DICE_LOG_LEVEL");
    }
  }
  LogLevel saved_ = LogLevel::kInfo;
  bool had_env_ = false;
  std::string env_;
};

TEST_F(LogLevelTest, ParsesEveryNameOfThePythonSide) {
  const std::pair<const char*, LogLevel> names[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [name, level] : names) {
    auto parsed = ParseLogLevel(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, level) << name;
    EXPECT_EQ(LogLevelName(level), name);
  }
}

TEST_F(LogLevelTest, IgnoresCaseAndBlanksAndReadsWarningAsWarn) {
  EXPECT_EQ(*ParseLogLevel("WARN"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel(" Debug\n"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarn);
}

TEST_F(LogLevelTest, UnknownNameIsInvalidArgumentNamingTheText) {
  for (const char* bad : {"bogus", "", "2", "information"}) {
    auto parsed = ParseLogLevel(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << parsed.status().message();
    EXPECT_NE(parsed.status().message().find("trace|debug|info|warn|error|off"), std::string::npos)
        << parsed.status().message();
  }
}

TEST_F(LogLevelTest, LevelLetsThroughItselfAndAboveAndOffLetsNothingThrough) {
  SetLogLevel(LogLevel::kWarn);
  EXPECT_EQ(GetLogLevel(), LogLevel::kWarn);
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  SetLogLevel(LogLevel::kOff);
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
  EXPECT_FALSE(LogEnabled(LogLevel::kOff));
  SetLogLevel(LogLevel::kTrace);
  EXPECT_TRUE(LogEnabled(LogLevel::kTrace));
}

TEST_F(LogLevelTest, InitFromEnvSetsTheLevelAndLeavesItWhenUnsetOrBad) {
  SetLogLevel(LogLevel::kInfo);
  ::unsetenv("DICE_LOG_LEVEL");
  EXPECT_TRUE(InitLogLevelFromEnv().ok());
  EXPECT_EQ(GetLogLevel(), LogLevel::kInfo);
  ::setenv("DICE_LOG_LEVEL", "error", 1);
  EXPECT_TRUE(InitLogLevelFromEnv().ok());
  EXPECT_EQ(GetLogLevel(), LogLevel::kError);
  ::setenv("DICE_LOG_LEVEL", "loud", 1);
  Status st = InitLogLevelFromEnv();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("DICE_LOG_LEVEL"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'loud'"), std::string::npos) << st.message();
  EXPECT_EQ(GetLogLevel(), LogLevel::kError);
}

}  // namespace
}  // namespace dice
