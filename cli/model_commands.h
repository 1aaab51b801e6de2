// cli/model_commands.h — the commands that take a TorchScript model and one
// random input per forward() argument (docs/CLI.md):
//
//   dice tune    model.pt --input 1024x8192:f32 [--input ...] [--cache DIR] [--budget-s 60]
//                [--max-candidates 16] [--require-gpu] [--generator templates|dice|both]
//                [--model DIR] [--samples 4] [--max-new-tokens 2048] [--reps 20] [--seed 0] [--json F]
//   dice run     model.pt --input ...   cached winners only (never tunes); hit/miss per group
//   dice profile model.pt --input ...   fusion groups and what they cost (µs, calls)
//
// `tune` tunes every fusion group (compile-only on a machine without a GPU),
// stores the winners, then runs the optimized module against eager and
// prints before/after times. Exit codes: 0 success (also compile-only),
// 1 a tuning failure or outputs that differ from eager, 2 bad input (model
// file, --input spec, cache directory, a model that does not run on the
// inputs), 3 --require-gpu without a GPU.
//
// Each file that includes LibTorch costs about a minute and 2 GB of compile,
// so they take two: tune_command.cc (`tune`) and model_commands.cc (`run`,
// `profile`, the model loading and timing all three share, model_common.h,
// and the CLI's PyTorch boundary, RunAtTorchBoundary in command.h).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `tune` to `app` and its entry to `table`.
void RegisterTune(CLI::App& app, CommandTable& table);
/// Adds `run` to `app` and its entry to `table`.
void RegisterRun(CLI::App& app, CommandTable& table);
/// Adds `profile` to `app` and its entry to `table`.
void RegisterProfile(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
