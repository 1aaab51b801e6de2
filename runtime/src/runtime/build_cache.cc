// build_cache.cc — the extension build cache's files (build_cache.h).
#include "build_cache.h"

#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "dice/cache/store.h"
#include "dice/core/ir.h"
#include "text_files.h"

namespace dice::runtime::build_cache {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// mkdir -p (as cache::Store opens its directory: std::filesystem).
Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "creating '" + dir + "': " + ec.message());
  return Status::Ok();
}

// A name in `dir` no other writer uses: pid plus a per-process counter and
// random bits.
std::string TempName(const std::string& dir, const std::string& key) {
  static std::atomic<unsigned> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  return dir + "/." + key + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(rng() % 1000000);
}

// Writes `bytes` to a temporary file in `dir`, then renames it to `path`.
Status WriteAtomically(const std::string& dir, const std::string& key, const std::string& path,
                       const std::string& bytes) {
  const std::string tmp = TempName(dir, key);
  Status st = text_files::WriteText(tmp, bytes);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status(StatusCode::kIoError, "rename to '" + path + "': " + strerror(err));
  }
  return Status::Ok();
}

std::string Sidecar(const std::string& bytes) {
  return "size " + std::to_string(bytes.size()) + "\nsha256 " + ir::Sha256Hex(bytes) + "\n";
}

}  // namespace

std::string DefaultDir() { return cache::DefaultCacheDir() + "/builds"; }

std::string ResolveDir(const std::string& option) {
  const std::string env = Env("DICE_BUILD_CACHE");
  if (env == "off" || option == "off") return "";
  if (!option.empty()) return option;
  return env.empty() ? DefaultDir() : env;
}

Expected<std::string> Load(const std::string& dir, const std::string& key) {
  const std::string lib = dir + "/" + key + ".so", meta = lib + ".meta";
  if (!text_files::IsFile(lib) || !text_files::IsFile(meta)) {
    return Status(StatusCode::kNotFound, "no cached build " + lib);
  }
  const std::string want = text_files::ReadText(meta);
  std::string bytes = text_files::ReadText(lib);
  if (want.empty()) return Status(StatusCode::kNotFound, "sidecar " + meta + " unreadable");
  if (Sidecar(bytes) != want) {
    ::unlink(lib.c_str());
    ::unlink(meta.c_str());
    return Status(StatusCode::kNotFound, "cached build " + lib + " is corrupt (" + std::to_string(bytes.size()) +
                                             " bytes disagree with its sidecar); removed");
  }
  return bytes;
}

Status Store(const std::string& dir, const std::string& key, const std::string& library_path) {
  DICE_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string bytes = text_files::ReadText(library_path);
  if (bytes.empty()) return Status(StatusCode::kIoError, "cannot read '" + library_path + "'");
  const std::string lib = dir + "/" + key + ".so";
  DICE_RETURN_IF_ERROR(WriteAtomically(dir, key, lib, bytes));
  return WriteAtomically(dir, key, lib + ".meta", Sidecar(bytes));
}

}  // namespace dice::runtime::build_cache
