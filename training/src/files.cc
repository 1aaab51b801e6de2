// File helpers: see dice/training/files.h. Torch-free.
#include "dice/training/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dice::training {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return Status(StatusCode::kInvalidArgument, "empty directory name");
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (dir[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status(StatusCode::kIoError, "cannot create directory " + cur + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status(StatusCode::kIoError, "cannot write " + tmp + ": " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) return Status(StatusCode::kIoError, "writing " + tmp + " failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(StatusCode::kIoError, "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Expected<std::string> ReadFile(const std::string& path) {
  if (!Exists(path)) return Status(StatusCode::kNotFound, path + " does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, "cannot read " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dice::training
