// `dice train init|dataset|sft|rl`: the training module (issue 4) from the
// command line (see cli/train.cc, training/README.md).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `train` and its subcommands init, dataset, sft, rl, eval and sweep
/// to `app`, and one entry per subcommand to `table`. Exit codes: 0 success,
/// 1 a failure while running (the last checkpoint stays intact), 2 bad input
/// (flags, dataset, checkpoint), 3 --device cuda without a GPU.
void RegisterTrain(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
