// `dice judge`: a whole KernelBench-format program (ModelNew, e.g. a DICE
// end-to-end generation with load_inline CUDA) against its reference Model,
// by KernelBench's protocol (runtime/include/dice/runtime/program_judge.h).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `judge` to `app` and its entry to `table`. The command prints the
/// verdict as one JSON object on stdout (outcome, compiled, correct, ref_ms,
/// new_ms, speedup, compile_s, wall_s, phase, error). --device auto (the
/// default) judges on cuda when the driver reports a GPU, else on the CPU
/// with a notice on stderr. Exit codes: 0 the candidate is correct, 4 judged
/// and not correct (any other outcome: incorrect, compile_error, crashed,
/// timeout, ...), 3 --device cuda / cuda:N without that GPU (found before
/// judging, or the child's `no_device` verdict), 2 bad input (a file cannot
/// be read, an option out of range, an unknown --device), 1 the judge itself
/// could not run (no python3, no judge script).
void RegisterJudge(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
