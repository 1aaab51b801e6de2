// cli/tokenize.h — `dice tokenize --model DIR`: stdin -> token ids as one
// JSON array on stdout, with the Qwen2/SDAR byte-level BPE of
// dice/generator/tokenizer.h, so anyone can compare it with another
// tokenizer. Torch-free. Exit codes: 0 success, 2 the tokenizer files in DIR
// cannot be loaded.
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `tokenize` to `app` and its entry to `table`.
void RegisterTokenize(CLI::App& app, CommandTable& table);

}  // namespace dice::cli
