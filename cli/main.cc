// The `dice` command-line tool: tune, run and profile TorchScript models,
// manage and share the kernel cache, and build the DICE generator. See
// docs/CLI.md for every flag and exit code. Every command:
//
//   dice tune     model.pt --input 1024x8192:f32 [--input ...] [--cache DIR] [--budget-s 60]
//                 [--generator templates|dice|both] [--model DIR]        (cli/model_commands.h)
//   dice run      model.pt --input ...   cache only: never tunes; hit/miss per group
//   dice profile  model.pt --input ...   fusion groups and what they cost
//   dice warmup   model.pt --input SET [--input SET ...] [--shard i/n]   (cli/warmup.h)
//   dice report   RESULTS.json | CACHE_DIR [-o FILE.html]               (cli/report.h)
//   dice cache    ls | show KEY | rm KEY [--cache DIR]                   (cli/cache_commands.h)
//   dice cache    serve --db FILE [--listen HOST:PORT] [--token-file F]  (cli/cache_serve.h)
//   dice cache    push|pull URL, export|import FILE, gc, stats           (cli/cache_share.h)
//   dice tokenize --model DIR < text                                     (cli/tokenize.h)
//   dice generate --model DIR --task task.py [--mode e2e|infill] [-n N] [--seed S]   (cli/generate.h)
//   dice train    init | dataset | sft | rl | eval | compare | sweep ... (cli/train.h)
//   dice judge    --reference ref.py --candidate new.py [--device auto|cpu|cuda[:N]]  (cli/judge.h)
//
// Each command registers itself from its own file (cli/command.h says how);
// this file only lists them in help order, parses and runs the parsed one.
//
// Every command takes --log-level trace|debug|info|warn|error|off (before or
// after its name; default $DICE_LOG_LEVEL, else info): progress lines and
// notices are info, warnings warn; result tables are printed at every level.
// stdout is line-buffered, so piped output arrives line by line.
//
// Exit codes: 0 success (also a compile-only tune on a machine without a
// GPU), 1 a runtime failure (tuning error, outputs differ from eager),
// 2 bad input (model file, --input spec, cache dir, unknown key, flags),
// 3 --require-gpu (or judge/generate --device cuda) given and no CUDA device
// is present; `dice judge` adds 4 (judged and not correct). A malformed
// DICE_REMOTE_CACHE exits 2 before any command runs.
#include <CLI/CLI.hpp>

#include "cache_commands.h"
#include "dice/cache/remote_cache.h"
#include "command.h"
#include "generate.h"
#include "judge.h"
#include "model_commands.h"
#include "progress.h"
#include "report.h"
#include "tokenize.h"
#include "train.h"
#include "warmup.h"

// A command-line error in the form of every other error (`dice: error: ...`):
// CLI11's message, with the command to ask for help; an unknown command is
// named with the list of commands instead of CLI11's "A subcommand is
// required", arguments a command does not take as unknown options /
// unexpected arguments (UnexpectedArgumentsMessage).
static std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->check_name(argv[1]);
    }
    if (!known) return std::string("unknown command '") + argv[1] + "' (commands: " + names + ")";
  }
  std::string where = "dice";
  for (const CLI::App* sub = &app; sub != nullptr;) {
    const auto parsed = sub->get_subcommands();
    sub = parsed.empty() ? nullptr : parsed.front();
    if (sub != nullptr) where += " " + sub->get_name();
  }
  // An unknown option in our words, not CLI11's ("The following argument
  // was not expected", listed in reverse order).
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::string named = dice::cli::UnexpectedArgumentsMessage(app.remaining(/*recurse=*/true));
    if (!named.empty()) what = named;
  }
  return what + " (see '" + where + " --help')";
}

int main(int argc, char** argv) {
  using namespace dice::cli;
  LineBufferStdout();
  CLI::App app{"dice: JIT autotuning runtime for PyTorch models (fusion groups -> tuned CUDA kernels)"};
  app.require_subcommand(1);
  // Every option's --help line shows its default (`--reps INT=20`): set
  // before any option or command is added, which copy it.
  app.option_defaults()->always_capture_default();
  std::string log_level;
  AddLogLevelOption(app, &log_level);  // before the commands: they inherit its fall-through
  CommandTable table;
  RegisterTune(app, table);
  RegisterRun(app, table);
  RegisterProfile(app, table);
  RegisterWarmup(app, table);
  RegisterReport(app, table);
  RegisterCache(app, table);
  RegisterTokenize(app, table);
  RegisterGenerate(app, table);
  RegisterTrain(app, table);
  RegisterJudge(app, table);
  ShowGlobalOptionsInHelp(app);  // `dice tune --help` names --log-level too
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --help-all: CLI11 prints them
      app.exit(e);
      return kExitOk;
    }
    return Fail(kExitBadInput, ParseErrorMessage(app, e, argc, argv));
  }
  if (const int rc = ApplyLogLevel(log_level); rc != kExitOk) return rc;
  // A malformed DICE_REMOTE_CACHE is a start-up error (the library would only
  // disable remote lookups with a warning); the message masks any password.
  if (auto remote = dice::cache::RemoteCacheOptions::FromEnv(); !remote.ok())
    return Fail(kExitBadInput, remote.status().message());
  return RunAtTorchBoundary([&table] { return table.RunParsed().value_or(kExitBadInput); });
}
