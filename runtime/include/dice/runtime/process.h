// process.h — run one child process to completion with a wall-clock limit.
//
// What the runtime uses to call external tools whose failures must never
// take the host down: nvcc for extension-form candidates
// (extension_compiler.h) and the Python KernelBench judge
// (program_judge.h). The child gets its own process group, so a timeout
// kills it and everything it started (nvcc's cicc/ptxas, load_inline's
// ninja). POSIX only (posix_spawnp + waitpid).
#pragma once

#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::runtime {

/// How RunProcess runs a child.
struct ProcessOptions {
  /// Wall-clock limit in seconds; past it the child's process group gets SIGKILL.
  double timeout_s = 60.0;
  /// File that receives the child's stdout and stderr (created/truncated, mode
  /// 0600). Empty: both go to /dev/null. stdin is always /dev/null.
  std::string output_path;
  /// Extra "KEY=VALUE" entries; they replace variables of the same name in
  /// this process's environment, the rest is inherited.
  std::vector<std::string> env;
};

/// How a child ended.
struct ProcessResult {
  bool timed_out = false;  ///< killed at ProcessOptions::timeout_s
  bool exited = false;     ///< returned from main / called exit()
  int exit_code = -1;      ///< valid when exited
  int signal = 0;          ///< the terminating signal when !exited && !timed_out
  double wall_ms = 0.0;    ///< spawn to reap, milliseconds

  /// True when the child exited with status 0.
  bool ok() const { return exited && exit_code == 0; }
  /// "exited with status 1", "was killed by signal 11 (Segmentation fault)",
  /// "exceeded its 30 s limit and was killed".
  std::string Describe(double timeout_s) const;
};

/// Runs argv (argv[0] searched on PATH when it has no '/') and waits for it,
/// polling every 20 ms. Returns how it ended; a non-zero exit, a signal or a
/// timeout is a ProcessResult, not an error.
/// Errors: kInvalidArgument (empty argv), kIoError (the output file cannot be
/// opened, posix_spawnp fails — e.g. the program does not exist — or waitpid fails).
Expected<ProcessResult> RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options);

}  // namespace dice::runtime
