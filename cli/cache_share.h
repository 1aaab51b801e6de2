// cli/cache_share.h — `dice cache push | pull | export | import | gc | stats`:
// sharing and managing the kernel cache (issue 5; docs/CLI.md). Torch-free.
//
//   dice cache push URL [--arch sm_90] [--token-file F]   local verified winners -> server
//   dice cache pull URL [--arch sm_90] [--trust-remote]   server -> local (unverified unless trusted)
//   dice cache export FILE [--arch sm_90]                 verified winners -> bundle file (cache/bundle.h)
//   dice cache import FILE [--arch sm_90] [--trust]       bundle -> local (unverified unless trusted)
//   dice cache gc [--max-size 2GB] [--older-than 30d]     bound the cache (Store::CollectGarbage)
//   dice cache stats [--json]                             entries, archs, hits, speedups
//
// Exit codes as the rest of `dice`: 0 success, 1 runtime failure (server
// unreachable, I/O error), 2 bad input (URL, file, size/age syntax, token
// refused by the server, bundle version), nothing written on bad input.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "command.h"

namespace dice::cli {

/// Adds the six subcommands to `cache` (the `dice cache` group) and their
/// entries to `table`. `cache_dir` is the group's --cache value ("" =
/// DICE_CACHE_DIR or ~/.cache/dice), read when a subcommand runs; a
/// subcommand's own --cache wins over it.
void RegisterCacheShare(CLI::App& cache, std::shared_ptr<const std::string> cache_dir, CommandTable& table);

/// Parses a size: an integer with an optional unit B, K/KB/KiB, M/MB/MiB,
/// G/GB/GiB, T/TB/TiB (case-insensitive; all powers of 1024, like ccache's
/// max_size). Returns bytes; nullopt for anything else, 0, or overflow.
std::optional<int64_t> ParseByteSize(const std::string& text);

/// Parses an age: an integer followed by s, m, h, d or w (seconds, minutes,
/// hours, days, weeks). Returns seconds; nullopt for anything else or 0.
std::optional<int64_t> ParseAge(const std::string& text);

}  // namespace dice::cli
