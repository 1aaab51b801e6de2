// `dice generate`: decode CUDA kernel candidates for a task with a DICE/SDAR
// checkpoint (see cli/generate.cc and docs/CLI.md).
#pragma once

#include <CLI/CLI.hpp>

namespace dice::cli {

/// Registers the `generate` subcommand on `app`; its options live in a
/// static of generate.cc. Returns the subcommand (check ->parsed()).
CLI::App* AddGenerateCommand(CLI::App& app);

/// Runs `dice generate` after a successful parse. Exit codes: 0 success
/// (also when a sample has no code block: that is reported per sample),
/// 1 runtime failure, 2 bad input (model directory, task file, options),
/// 3 --device cuda without a GPU.
int RunGenerateCommand();

}  // namespace dice::cli
