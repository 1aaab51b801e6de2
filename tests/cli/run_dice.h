// run_dice.h — shared by the CLI tests: runs the `dice` binary under test
// (DICE_CLI_PATH, set by tests/CMakeLists.txt) with a shell argument string
// and returns its exit code and combined stdout + stderr.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
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

/// A fresh directory under /tmp (mkdtemp), removed with `rm -rf` on
/// destruction — not std::filesystem::remove_all, whose LibTorch-exported copy
/// crashes when interposed in these torch-linked tests. Throws
/// std::runtime_error when mkdtemp fails.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dice::cli_test
