// cli/cache_commands.h — `dice cache`: the kernel cache from the command
// line (docs/CLI.md). Torch-free.
//
//   dice cache [--cache DIR] ls               cached winners, newest first
//   dice cache [--cache DIR] show KEY         one winner: IR, source, launch plan, times
//   dice cache [--cache DIR] rm KEY           remove one winner (KEY: full key or unique prefix)
//   dice cache serve --db FILE [--listen HOST:PORT] [--token-file F]   (cli/cache_serve.h)
//   dice cache push|pull|export|import|gc|stats ...                    (cli/cache_share.h)
//
// Exit codes: 0 success, 1 a runtime failure (I/O), 2 bad input (unusable
// cache directory or file, unknown or ambiguous key).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "command.h"

namespace dice::cli {

/// Adds `cache` and all its subcommands to `app` and their entries to
/// `table`. The subcommands defined in other files register as
///     void RegisterCacheXxx(CLI::App& cache, [std::shared_ptr<const std::string> cache_dir,] CommandTable&)
/// where cache_dir is the group's --cache value ("" = DICE_CACHE_DIR or
/// ~/.cache/dice), read when the command runs.
void RegisterCache(CLI::App& app, CommandTable& table);

/// Why there is no cache database in cache directory `dir` yet ("the
/// directory D does not exist", "D holds no kernels.db"), or "" when there
/// is one or when opening it should report the problem (a path through a
/// file, a permission error: Store::Open says what is wrong). Reads only:
/// never creates anything. The commands that only read a cache (ls, show,
/// rm, stats, gc, export, push) answer from it instead of creating the
/// directory and an empty database (issue 20 item 8).
std::string NoCacheYet(const std::string& dir);

}  // namespace dice::cli
