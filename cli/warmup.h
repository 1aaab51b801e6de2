// cli/warmup.h — `dice warmup`: offline tune-sync of one model for a list of
// input shapes (issue 5 "Warm-up"), optionally one shard of that list so
// several GPUs or machines warm one model into one shared cache.
//
//   dice warmup model.pt --input 8x4096:bf16 --input 32x4096:bf16 [--shard i/n]
//               [--cache DIR] [--budget-s 60] [--max-candidates 16] [--seed N]
//
// Each --input is one shape set: the forward() arguments of one call, comma
// separated for a model with several ("8x4096:f32,4096:f32"). Set k (0-based)
// belongs to shard i of n when k % n == i. Per set it does what `dice tune`
// does (capture fusion groups, tune each, store winners; compile-only without
// a GPU) and prints one progress line; then a summary. Exit codes as `dice
// tune`: 0 success (also compile-only), 1 a tuning failure, 2 bad input
// (model, spec, shard, cache), 3 --require-gpu without a GPU.
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `warmup` to `app` and its entry to `table`.
void RegisterWarmup(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
