// cli/command.h: the pieces every command shares.
#include "command.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>

#include "dice/core/log.h"

namespace dice::cli {

int Fail(int code, const std::string& message) {
  // At every log level, `off` included: it silences diagnostics, never the
  // reason a command fails (the exit code alone does not say what to fix).
  std::fprintf(stderr, "dice: error: %s\n", message.c_str());
  std::fflush(stderr);
  return code;
}

std::string UnexpectedArgumentsMessage(const std::vector<std::string>& extras) {
  std::string options, others;
  int n_options = 0, n_others = 0;
  for (const std::string& arg : extras) {
    const bool option = arg.size() > 1 && arg[0] == '-';
    std::string& list = option ? options : others;
    list += (list.empty() ? "'" : ", '") + (option ? arg.substr(0, arg.find('=')) : arg) + "'";
    ++(option ? n_options : n_others);
  }
  std::string message;
  if (n_options > 0) message = (n_options > 1 ? "unknown options " : "unknown option ") + options;
  if (n_others > 0) {
    message += (message.empty() ? "" : "; ") +
               std::string(n_others > 1 ? "unexpected arguments " : "unexpected argument ") + others;
  }
  return message;
}

void AddLogLevelOption(CLI::App& app, std::string* level) {
  app.fallthrough();
  app.add_option("--log-level", *level,
                 "diagnostics shown: trace|debug|info|warn|error|off (default $DICE_LOG_LEVEL, else info); "
                 "progress is info, warnings warn; results are printed at every level");
}

std::string GlobalOptionsFooter() {
  return "Options of every command (before or after its name):\n"
         "  --log-level TEXT            diagnostics shown: trace|debug|info|warn|error|off (default "
         "$DICE_LOG_LEVEL, else info); results are printed at every level";
}

void ShowGlobalOptionsInHelp(CLI::App& app) {
  // Option groups are nameless subcommands: not commands, no help of their own.
  for (CLI::App* sub : app.get_subcommands([](CLI::App* a) { return !a->get_name().empty(); })) {
    const std::string own = sub->get_footer();
    sub->footer(own.empty() ? GlobalOptionsFooter() : own + "\n\n" + GlobalOptionsFooter());
    ShowGlobalOptionsInHelp(*sub);
  }
}

int ApplyLogLevel(const std::string& flag) {
  Status env = InitLogLevelFromEnv();
  if (!env.ok() && LogEnabled(LogLevel::kWarn)) {
    std::fprintf(stderr, "dice: warning: %s; ignored\n", env.message().c_str());
  }
  if (flag.empty()) return kExitOk;
  auto level = ParseLogLevel(flag);
  if (!level.ok()) {
    // Printed at every level: the user asked for this flag and it is wrong.
    std::fprintf(stderr, "dice: error: --log-level: %s\n", level.status().message().c_str());
    return kExitBadInput;
  }
  SetLogLevel(*level);
  return kExitOk;
}

std::string BuildCacheDirFor(const std::string& cache_flag, const char* build_cache_env) {
  if (build_cache_env != nullptr && *build_cache_env != '\0') return "";
  if (cache_flag.empty()) return "";
  return cache_flag + "/builds";
}

void UseCacheDirForBuilds(const std::string& cache_flag) {
  const std::string dir = BuildCacheDirFor(cache_flag, std::getenv("DICE_BUILD_CACHE"));
  if (!dir.empty()) ::setenv("DICE_BUILD_CACHE", dir.c_str(), /*overwrite=*/1);
}

}  // namespace dice::cli
