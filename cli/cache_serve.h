// cli/cache_serve.h — `dice cache serve --db FILE [--listen HOST:PORT]
// [--token-file F]`: the HTTP cache server (dice/cache/http_server.h) over
// one SQLite cache file until SIGINT/SIGTERM, then a graceful stop. Without
// a token file the server is read-only. Torch-free.
//
// Exit codes: 0 after a signal stopped it, 2 bad input (--listen not
// HOST:PORT, unreadable token file, a database or port that cannot be served).
#pragma once

#include <CLI/CLI.hpp>

#include "command.h"

namespace dice::cli {

/// Adds `serve` to the `dice cache` group and its entry to `table`.
void RegisterCacheServe(CLI::App& cache, CommandTable& table);

}  // namespace dice::cli
