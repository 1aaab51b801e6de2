// text_files.h — private to dice_runtime: the small file helpers the nvcc
// extension build and the KernelBench judge both use (not installed).
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "dice/core/status.h"

namespace dice::runtime::text_files {

/// True when `path` exists and is a regular file.
inline bool IsFile(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// Writes `text` to `path` (created or truncated, binary). Errors: kIoError
/// naming the path and errno.
inline Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status(StatusCode::kIoError, "cannot write '" + path + "': " + strerror(errno));
  return Status::Ok();
}

/// The whole file as bytes; "" when it cannot be read (callers read logs).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dice::runtime::text_files
