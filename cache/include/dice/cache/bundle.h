// dice/cache/bundle.h — portable cache bundles: a subset of a kernel cache
// in one file, to carry winners between machines without a server (like
// TensorRT's timing cache file).
//
// Format (JSON, UTF-8; version kBundleFormatVersion):
//   {"format": "dice-kernel-bundle", "format_version": 1,
//    "schema_version": <the exporting build's kSchemaVersion>,
//    "created_at": <unix seconds>, "arch": "<filter or empty>",
//    "entries": [WinnerToWireJson(rec, true), ...]}
// Entries use the HTTP API's wire form (http_server.h), so a bundle entry
// and a pulled entry are the same bytes; each carries its content_hash,
// checked on import.
//
// Import checks the format name, format_version == kBundleFormatVersion and
// schema_version <= this build's kSchemaVersion, then parses and checks
// every entry before writing any: a bad bundle writes nothing. Imported
// entries are stored unverified (not served until re-verified on this
// machine's GPU) unless the caller trusts the bundle.
// Thread-safety: as the Store passed in.
#pragma once

#include <cstdint>
#include <string>

#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

/// The bundle format this build writes and reads.
inline constexpr int kBundleFormatVersion = 1;
/// The value of the bundle's "format" field.
inline constexpr const char* kBundleFormatName = "dice-kernel-bundle";

/// What ExportBundle wrote.
struct ExportResult {
  int64_t entries = 0;   ///< winners written
  int64_t skipped_unverified = 0;  ///< winners left out because they were not verified here
  int64_t bytes = 0;     ///< size of the bundle file, bytes
};

/// Writes the verified winners of `store` (all archs when `arch` is empty,
/// else only that arch, e.g. "sm_90") to `path` (written to path + ".tmp"
/// then renamed, so a reader never sees half a bundle). Unverified entries
/// are left out (a bundle only carries kernels proven on some GPU).
/// Errors: kIoError when the file cannot be written (names the path);
/// Store errors (kCorrupt for a damaged row: the bundle is not written).
Expected<ExportResult> ExportBundle(Store& store, const std::string& path, const std::string& arch);

/// What ImportBundle did.
struct ImportResult {
  int64_t entries = 0;   ///< entries in the bundle that passed the filter
  int64_t stored = 0;    ///< of those, written (Store::PutWinner's rule said yes)
  int64_t kept_existing = 0;  ///< of those, the local entry stayed
};

/// Reads `path` and stores its entries (only those of `arch` when
/// non-empty) with pulled_from = "bundle:" + path and verified = `trust`.
/// Errors (nothing written on any): kNotFound / kIoError when the file
/// cannot be read; kInvalidArgument for malformed JSON, another format, a
/// format_version other than kBundleFormatVersion, a schema_version newer
/// than kSchemaVersion, or an entry that is malformed, has an invalid task
/// key or fails its content hash (the message names the entry's index and
/// key); Store errors when writing.
Expected<ImportResult> ImportBundle(Store& store, const std::string& path, const std::string& arch, bool trust);

}  // namespace dice::cache
