// cli/command.h — how a `dice` command is registered and run. Torch-free.
//
// Every command lives in its own file under cli/ and exposes one function
//
//     void RegisterXxx(CLI::App& parent, CommandTable& table);
//
// (commands under `dice cache` also receive the group's --cache value,
// see cache_commands.h). It adds its CLI11 subcommand(s) to `parent`, binds
// their options to arguments it owns (held by the run function, never in a
// static), and adds one entry per runnable subcommand to `table`. main.cc
// calls the Register functions in help order, parses once, and runs the
// entry whose subcommand was parsed.
//
// Exit codes shared by every command (docs/CLI.md): 0 success, 1 a runtime
// failure, 2 bad input, 3 a GPU was required and none is present (`dice
// judge` adds 4: judged and not correct).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dice::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoGpu = 3;

/// Prints "dice: error: <message>" and a newline on stderr at every log
/// level (`--log-level off` / DICE_LOG_LEVEL=off silence diagnostics, not the
/// error that makes a command fail); returns `code`.
int Fail(int code, const std::string& message);

/// The message (without the "dice: error: " prefix) for the arguments a
/// command did not take, as CLI11's ExtrasError leaves them (App::remaining,
/// each as typed, `--name=value` included): the ones that start with '-'
/// are named as unknown options (`unknown option '--bogus'`, the part after
/// '=' dropped), the others as unexpected arguments (a second model path, the
/// value of an unknown option), joined by "; ". "" when `extras` is empty.
/// Pure; main.cc appends the `(see 'dice CMD --help')` hint.
std::string UnexpectedArgumentsMessage(const std::vector<std::string>& extras);

/// Adds the global `--log-level LEVEL` option to `app`, bound to `*level`
/// (LEVEL: trace|debug|info|warn|error|off). `app` falls through, so the
/// option is accepted before and after the command name (call this before
/// the Register functions: subcommands inherit the fall-through).
void AddLogLevelOption(CLI::App& app, std::string* level);

/// The footer every command's --help ends with: the options `dice` takes
/// before or after any command's name (today --log-level and its
/// environment variable DICE_LOG_LEVEL), which CLI11 lists only in the
/// top-level `dice --help`. Plain text, one line per option after a heading.
std::string GlobalOptionsFooter();

/// Appends GlobalOptionsFooter() to the help footer of every subcommand of
/// `app`, nested ones included (`dice cache ls --help`); `app`'s own footer
/// is left alone (its help lists --log-level already). Call it after every
/// Register function has added its commands. No errors.
void ShowGlobalOptionsInHelp(CLI::App& app);

/// The help of the --cache flag of the model commands (tune, run, profile,
/// warmup): where winners go, and where tune and warmup put built libraries.
inline constexpr const char* kCacheFlagHelp =
    "cache directory of the winners (default $DICE_CACHE_DIR, else ~/.cache/dice); CUTLASS candidates that "
    "tune/warmup build go to $DICE_BUILD_CACHE when set, else DIR/builds of this flag, else $DICE_CACHE_DIR/builds";

/// Where built extension libraries (CUTLASS candidates, nvcc) go for a
/// command given `--cache cache_flag`, as the value to export as
/// $DICE_BUILD_CACHE; "" = leave the environment as it is. Precedence:
/// `build_cache_env` ($DICE_BUILD_CACHE, "off" included) when set and
/// non-empty, then `<cache_flag>/builds` when --cache was given, else ""
/// (the runtime then uses $DICE_CACHE_DIR/builds, else
/// ~/.cache/dice/builds). Pure.
std::string BuildCacheDirFor(const std::string& cache_flag, const char* build_cache_env);

/// Exports BuildCacheDirFor(cache_flag, getenv("DICE_BUILD_CACHE")) as
/// $DICE_BUILD_CACHE when it is not "", so that this process and the
/// dice-worker processes it spawns (they inherit the environment) keep the
/// builds beside the winners of `--cache DIR`. Call it on main's thread
/// before any worker or tuner thread starts (setenv is not thread-safe).
void UseCacheDirForBuilds(const std::string& cache_flag);

/// Sets the process's log level (dice/core/log.h) before a command runs:
/// from $DICE_LOG_LEVEL, then from `flag` (the --log-level value, "" when
/// not given), which wins. A bad DICE_LOG_LEVEL is a warning on stderr and
/// is ignored, as on the Python side (dice_torch/logs.py). Returns kExitOk,
/// or kExitBadInput after "dice: error: --log-level 'x': ..." for a bad flag.
int ApplyLogLevel(const std::string& flag);

/// The runnable subcommands of the `dice` app and what runs each.
/// Not thread-safe; built and used on main's thread.
class CommandTable {
 public:
  /// Registers `run` for `command` (a subcommand that has no runnable
  /// subcommands of its own). `run` returns the process exit code and may
  /// throw (main reports exceptions, see RunAtTorchBoundary).
  void Add(CLI::App* command, std::function<int()> run) { entries_.emplace_back(command, std::move(run)); }

  /// After a successful parse: runs the entry whose subcommand was parsed
  /// and returns its exit code; nullopt when none was.
  std::optional<int> RunParsed() const {
    for (const auto& [command, run] : entries_) {
      if (command->parsed()) return run();
    }
    return std::nullopt;
  }

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> entries_;
};

/// Runs `run` at the PyTorch boundary: registers DICE's TorchScript ops and
/// passes first (torch_ext::EnsureRegistered), then returns run()'s exit
/// code; a c10::Error becomes exit 1 with "dice: error: PyTorch error: <what
/// without backtrace>", any other std::exception exit 1 with its what().
/// Defined in model_commands.cc, a file that includes LibTorch anyway, so
/// that main.cc and the torch-free commands compile without it.
int RunAtTorchBoundary(const std::function<int()>& run);

}  // namespace dice::cli
