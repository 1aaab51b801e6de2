// build_cache.h — private to dice_runtime: the content-addressed store of
// built extension libraries behind CompileExtensionCached
// (extension_compiler.h; issue 18 item 1: a CUTLASS instantiation costs
// 30-90 s of nvcc, so each configuration is built once). Torch-free.
//
// Layout: <dir>/<key>.so, the shared object, and <dir>/<key>.so.meta, a
// sidecar of two lines "size <bytes>" and "sha256 <hex>" describing it. Both
// are written to a temporary name in <dir> and renamed into place, so a
// reader never sees a partial file and concurrent writers (several workers
// building the same key) leave one complete copy. A library that disagrees
// with its sidecar (truncated, corrupted) is removed and reported as a miss.
#pragma once

#include <string>

#include "dice/core/status.h"

namespace dice::runtime::build_cache {

/// The default directory: cache::DefaultCacheDir() + "/builds", i.e.
/// $DICE_CACHE_DIR/builds, else $HOME/.cache/dice/builds, else
/// /tmp/dice-cache-<uid>/builds: the build cache lives beside the winners'
/// database of the same cache directory.
std::string DefaultDir();

/// The directory to use: "" when caching is off. `option` is
/// ExtensionCompileOptions::build_cache_dir ("" = $DICE_BUILD_CACHE, else
/// DefaultDir(); "off" = off). $DICE_BUILD_CACHE=off turns caching off
/// whatever `option` says.
std::string ResolveDir(const std::string& option);

/// The verified bytes of <dir>/<key>.so. Errors: kNotFound when absent or
/// its sidecar is missing (a writer may be between its two renames), or
/// when it disagrees with the sidecar (both files are then removed; the
/// message says "corrupt").
Expected<std::string> Load(const std::string& dir, const std::string& key);

/// Stores the file at `library_path` as <dir>/<key>.so (creating <dir> and
/// its parents, mode 0755) plus its sidecar, atomically. Errors: kIoError
/// naming the path when the directory cannot be created or written.
Status Store(const std::string& dir, const std::string& key, const std::string& library_path);

}  // namespace dice::runtime::build_cache
