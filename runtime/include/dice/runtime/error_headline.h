// dice/runtime/error_headline.h — one line of a candidate's error for
// reports and logs (the "first failure" of a tune without a winner, the
// prebuild's first error). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>

namespace dice::runtime {

/// The one-line summary of a candidate's error for reports and logs: its
/// first line, or, when that line ends with ':' (a header such as "nvcc
/// exited with status 2:" whose cause follows on the next lines), the first
/// line joined with the next non-empty one ("nvcc exited with status 2:
/// dice_ext.cu(291): error: ..."); then cut to `max_chars` characters with
/// "..." appended when longer (0 = no cut). Pure.
std::string ErrorHeadline(const std::string& error, size_t max_chars = 0);

}  // namespace dice::runtime
