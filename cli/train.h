// `dice train init|dataset|sft|rl`: the training module (issue 4) from the
// command line (see cli/train.cc, training/README.md).
#pragma once

#include <CLI/CLI.hpp>

namespace dice::cli {

/// Registers `train` and its subcommands on `app`; options live in a static
/// of train.cc. Returns the `train` subcommand (check ->parsed()).
CLI::App* AddTrainCommand(CLI::App& app);

/// Runs the parsed `dice train` subcommand. Exit codes: 0 success, 1 a
/// failure while running (the last checkpoint stays intact), 2 bad input
/// (flags, dataset, checkpoint), 3 --device cuda without a GPU.
int RunTrainCommand();

}  // namespace dice::cli
