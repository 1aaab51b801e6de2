// cli/input_spec.h: the --input grammar, its checks and its messages.
#include "input_spec.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace dice::cli {
namespace {

// Why a dimension of `spec` ("8x4096:f32") is not a size, in the user's
// terms: ": an empty dimension ...", ": dimension '-3' is negative ...", ...;
// "" when every dimension is a plain number of at most 18 digits (then
// ir::ParseInputSpec's own message stands: a missing or unknown dtype, rank).
std::string BadDimension(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return "";
  const std::string dims = spec.substr(0, colon);
  if (dims.empty() || dims == "scalar") return "";
  const std::string example = " (sizes are separated by one lower-case 'x', e.g. 8x4096:f32)";
  size_t pos = 0;
  for (int k = 0; pos <= dims.size(); ++k) {
    size_t next = dims.find('x', pos);
    if (next == std::string::npos) next = dims.size();
    const std::string d = dims.substr(pos, next - pos);
    pos = next + 1;
    const bool digits = !d.empty() && std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (digits && d.size() <= 18) continue;
    if (d.empty()) return ": dimension " + std::to_string(k) + " is empty" + example;
    if (digits) return ": size " + d + " in dimension " + std::to_string(k) + " overflows int64";
    if (d[0] == '-' && d.size() > 1) {
      return ": size " + d + " in dimension " + std::to_string(k) + " is negative; every size must be at least 1";
    }
    return ": dimension '" + d + "' is not a non-negative integer" + example;
  }
  return "";
}

// The element an integer / bool dtype name stands for; kFloat for any other text.
InputElement NonFloatElement(const std::string& dtype) {
  if (dtype == "i64" || dtype == "int64" || dtype == "long") return InputElement::kInt64;
  if (dtype == "i32" || dtype == "int32" || dtype == "int") return InputElement::kInt32;
  if (dtype == "b8" || dtype == "bool") return InputElement::kBool;
  return InputElement::kFloat;
}

// Shape and float dtype of `text` ("8x4096:f32", no range), every message
// prefixed with `where`; `element_bytes` sizes the overflow check.
Expected<ir::TensorSpec> ParseTensor(const std::string& text, const std::string& where, int64_t element_bytes) {
  auto parsed = ir::ParseInputSpec(text);
  if (!parsed.ok()) {
    if (std::string why = BadDimension(text); !why.empty()) return Status(StatusCode::kInvalidArgument, where + why);
    std::string what = parsed.status().message();
    if (what.find("unknown dtype") != std::string::npos) {
      const std::string dtype = text.substr(text.rfind(':') + 1);
      return Status(StatusCode::kInvalidArgument,
                    where + ": unknown dtype '" + dtype + "' (expected f32, f16, bf16, i64, i32 or b8)");
    }
    // ParseInputSpec says "input spec '<text>'<what>"; name the flag instead.
    const std::string own = "input spec '" + text + "'";
    if (what.rfind(own, 0) == 0) what = what.substr(own.size());
    else what = ": " + what;
    return Status(StatusCode::kInvalidArgument, where + what);
  }
  int64_t bytes = element_bytes < 0 ? ir::DTypeSize(parsed->dtype) : element_bytes;
  for (size_t d = 0; d < parsed->shape.size(); ++d) {
    if (parsed->shape[d] < 1) {
      return Status(StatusCode::kInvalidArgument, where + ": size " + std::to_string(parsed->shape[d]) +
                                                      " in dimension " + std::to_string(d) +
                                                      "; every size must be at least 1");
    }
    if (__builtin_mul_overflow(bytes, parsed->shape[d], &bytes)) {
      return Status(StatusCode::kInvalidArgument,
                    where + ": the sizes overflow int64 (the tensor would hold more than 2^63 bytes)");
    }
  }
  return parsed;
}

// One decimal int64 (optional '-'), the whole of `text`.
bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// The LOW..HIGH range of `spec` into `s` (an integer input); `where` prefixes the messages.
Status ParseRange(const std::string& range, const std::string& where, InputSpec* s) {
  const std::string form = " (expected LOW..HIGH, values drawn from [LOW, HIGH), e.g. 8x128:i64:0..50257)";
  const size_t dots = range.find("..");
  if (dots == std::string::npos || !ParseInt64(range.substr(0, dots), &s->low) ||
      !ParseInt64(range.substr(dots + 2), &s->high)) {
    return Status(StatusCode::kInvalidArgument, where + ": value range '" + range + "' is not two integers" + form);
  }
  if (s->low >= s->high) {
    return Status(StatusCode::kInvalidArgument, where + ": value range " + range + " is empty (HIGH " +
                                                    std::to_string(s->high) + " is excluded, so it must be above LOW)");
  }
  if (s->element == InputElement::kInt32 &&
      (s->low < std::numeric_limits<int32_t>::min() || s->high - 1 > std::numeric_limits<int32_t>::max())) {
    return Status(StatusCode::kInvalidArgument, where + ": value range " + range +
                                                    " does not fit i32 (values from -2147483648 to 2147483647)");
  }
  s->range_given = true;
  return Status::Ok();
}

}  // namespace

int64_t InputSpec::ElementBytes() const {
  switch (element) {
    case InputElement::kFloat: return ir::DTypeSize(tensor.dtype);
    case InputElement::kInt64: return 8;
    case InputElement::kInt32: return 4;
    case InputElement::kBool: return 1;
  }
  return 1;
}

const char* InputElementName(InputElement element) {
  switch (element) {
    case InputElement::kFloat: return "float";
    case InputElement::kInt64: return "i64";
    case InputElement::kInt32: return "i32";
    case InputElement::kBool: return "b8";
  }
  return "?";
}

Expected<InputSpec> ParseInputFlag(const std::string& spec, const std::string& flag) {
  const std::string where = "--input '" + flag + "'" + (spec == flag ? "" : ": '" + spec + "'");
  // DIMS ':' DTYPE [':' RANGE]: DIMS holds no ':', so the first two colons split it.
  const size_t colon = spec.find(':');
  const size_t second = colon == std::string::npos ? std::string::npos : spec.find(':', colon + 1);
  const std::string head = spec.substr(0, second);
  const std::string range = second == std::string::npos ? "" : spec.substr(second + 1);
  InputSpec s;
  s.element = colon == std::string::npos ? InputElement::kFloat : NonFloatElement(head.substr(colon + 1));
  if (s.element == InputElement::kFloat) {
    auto t = ParseTensor(head, where, -1);
    if (!t.ok()) return t.status();
    s.tensor = std::move(*t);
  } else {
    // The dims with a float stand-in dtype: ir::ParseInputSpec checks them.
    auto t = ParseTensor(head.substr(0, colon) + ":f32", where, s.ElementBytes());
    if (!t.ok()) return t.status();
    s.tensor = std::move(*t);
  }
  if (second == std::string::npos) return s;
  if (!s.is_integer()) {
    const std::string what = s.element == InputElement::kBool ? "b8 inputs are random true/false"
                                                              : "float inputs are randn";
    return Status(StatusCode::kInvalidArgument, where + ": a value range (':" + range +
                                                    "') is for integer inputs (i64, i32) only; " + what);
  }
  DICE_RETURN_IF_ERROR(ParseRange(range, where, &s));
  return s;
}

std::string DefaultRangeHint(const std::vector<InputSpec>& specs) {
  for (const InputSpec& s : specs) {
    if (s.is_integer() && !s.range_given) {
      return "integer inputs without a range are drawn from " + std::to_string(kDefaultIntLow) + ".." +
             std::to_string(kDefaultIntHigh) + "; give the values the model takes, e.g. 8x128:i64:0..50257";
    }
  }
  return "";
}

std::string RunFailureHint(const std::vector<InputSpec>& specs, const std::string& cause) {
  if (cause.find("not implemented for '") != std::string::npos) {
    return "an op of the model does not take this dtype: check the :dtype of each --input";
  }
  return DefaultRangeHint(specs);
}

}  // namespace dice::cli
