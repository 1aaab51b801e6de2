// run_dice.h — shared by the CLI tests: runs the `dice` binary under test
// (DICE_CLI_PATH, set by tests/CMakeLists.txt) with a shell argument string
// and returns its exit code and combined stdout + stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace dice::cli_test {

struct DiceResult {
  int code = -1;       ///< exit status; -1 when popen failed or the process did not exit normally
  std::string output;  ///< stdout + stderr
};

/// Runs `DICE_CLI_PATH args 2>&1` through popen (args are shell words, the
/// caller quotes them). Blocks until the process exits.
inline DiceResult RunDice(const std::string& args) {
  const std::string cmd = std::string(DICE_CLI_PATH) + " " + args + " 2>&1";
  DiceResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace dice::cli_test
