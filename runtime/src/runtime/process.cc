// process.cc — RunProcess: posix_spawnp in a new process group, waitpid with a deadline.
#include "dice/runtime/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

extern char** environ;

namespace dice::runtime {

std::string ProcessResult::Describe(double timeout_s) const {
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", timeout_s);
    return std::string("exceeded its ") + buf + " s limit and was killed";
  }
  if (exited) return "exited with status " + std::to_string(exit_code);
  return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

Expected<ProcessResult> RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  using Clock = std::chrono::steady_clock;
  if (argv.empty() || argv[0].empty()) return Status(StatusCode::kInvalidArgument, "RunProcess: empty argv");

  // Environment: this process's, with options.env overriding by name.
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    env[kv.substr(0, kv.find('='))] = kv;
  }
  for (const auto& kv : options.env) env[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (auto& [name, kv] : env) env_strings.push_back(kv);
  std::vector<char*> cenv;
  for (auto& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  const std::string out = options.output_path.empty() ? "/dev/null" : options.output_path;
  if (!options.output_path.empty()) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return Status(StatusCode::kIoError, "open '" + out + "': " + strerror(errno));
    ::close(fd);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  const auto start = Clock::now();
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0].c_str(), &actions, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status(StatusCode::kIoError, "posix_spawnp '" + args[0] + "': " + strerror(rc));

  ProcessResult result;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      ::kill(-pid, SIGKILL);
      return Status(StatusCode::kIoError, "waitpid '" + args[0] + "': " + strerror(errno));
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > options.timeout_s) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Whatever the child left running in its group (a grandchild) goes too.
  ::kill(-pid, SIGKILL);
  result.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!result.timed_out) {
    result.exited = WIFEXITED(status);
    if (result.exited) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace dice::runtime
