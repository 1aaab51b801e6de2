// `dice generate`: decode CUDA kernel candidates for a task with a DICE/SDAR
// checkpoint (see cli/generate.cc and docs/CLI.md).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `generate` to `app` and its entry to `table`. Exit codes: 0 success
/// (also when a sample has no code block: that is reported per sample),
/// 1 runtime failure, 2 bad input (model directory, task file, options),
/// 3 --device cuda without a GPU.
void RegisterGenerate(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
