// dice/training/files.h — small file helpers of the training module
// (torch-free): directory creation, atomic writes, whole-file reads.
#pragma once

#include <string>

#include "dice/core/status.h"

namespace dice::training {

/// Creates `dir` and its parents. Errors: kIoError with the errno text.
Status MakeDirs(const std::string& dir);

/// Writes `text` to `path` through a temporary file and rename.
/// Errors: kIoError naming the path.
Status WriteFileAtomic(const std::string& path, const std::string& text);

/// Reads a whole file. Errors: kNotFound / kIoError naming the path.
Expected<std::string> ReadFile(const std::string& path);

}  // namespace dice::training
