// Helpers private to dice_core's IR sources (ir.cc, ir_infer.cc); not installed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dice {
inline namespace core {
namespace ir {
namespace detail {

// "1,2,3" (or joined by `sep`): the dims in TensorSpec::ToString, the canonical
// text and the inference error messages.
std::string JoinInts(const std::vector<int64_t>& v, const char* sep = ",");

}  // namespace detail
}  // namespace ir
}  // namespace core
}  // namespace dice
