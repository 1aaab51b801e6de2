// The wire parser's fast path (wire_scan.h). The scan follows the JSON
// grammar of RFC 8259 only as far as needed to find the top-level members;
// validation is left to the parser the caller runs on the rest.
#include "wire_scan.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace dice::cache::wire {
namespace {

constexpr size_t kNpos = std::string_view::npos;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t SkipSpace(std::string_view t, size_t i) {
  while (i < t.size() && IsSpace(t[i])) ++i;
  return i;
}

// `i` at an opening quote: the index after the closing one, or kNpos.
size_t SkipString(std::string_view t, size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;  // the escaped character (a \uXXXX's hex digits need no care)
    } else if (t[i] == '"') {
      return i + 1;
    }
  }
  return kNpos;
}

// `i` at the first character of a value: the index after it, or kNpos.
size_t SkipValue(std::string_view t, size_t i) {
  if (i >= t.size()) return kNpos;
  if (t[i] == '"') return SkipString(t, i);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        i = SkipString(t, i);
        if (i == kNpos) return kNpos;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return kNpos;
  }
  const size_t start = i;  // a number, true, false or null
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && !IsSpace(t[i])) ++i;
  return i == start ? kNpos : i;
}

constexpr uint8_t kBad = 0x80;

constexpr std::array<uint8_t, 256> MakeDecodeTable() {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = kBad;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (uint8_t i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
  return t;
}

constexpr std::array<uint8_t, 256> kDecode = MakeDecodeTable();

}  // namespace

bool SplitPayload(std::string_view text, std::string* rest, std::string_view* base64) {
  size_t i = SkipSpace(text, 0);
  if (i >= text.size() || text[i] != '{') return false;
  i = SkipSpace(text, i + 1);
  size_t value_begin = kNpos, value_end = kNpos;  // the quotes of cubin_base64's value, inclusive/exclusive
  while (true) {
    if (i >= text.size() || text[i] != '"') return false;
    size_t key_end = i + 1;
    while (key_end < text.size() && text[key_end] != '"' && text[key_end] != '\\') ++key_end;
    if (key_end >= text.size() || text[key_end] == '\\') return false;  // an escaped key could spell cubin_base64
    const std::string_view key = text.substr(i + 1, key_end - i - 1);
    i = SkipSpace(text, key_end + 1);
    if (i >= text.size() || text[i] != ':') return false;
    i = SkipSpace(text, i + 1);
    if (key == "cubin_base64") {
      if (value_begin != kNpos || i >= text.size() || text[i] != '"') return false;
      // memchr (vectorised) for the closing quote, then for a backslash
      // before it: the value is ~100 KB, the rest of the object ~0.3 KB.
      const char* open = text.data() + i + 1;
      const auto* quote = static_cast<const char*>(std::memchr(open, '"', text.size() - i - 1));
      if (quote == nullptr || std::memchr(open, '\\', static_cast<size_t>(quote - open)) != nullptr) return false;
      const size_t close = static_cast<size_t>(quote - text.data());
      value_begin = i;
      value_end = close + 1;
      i = value_end;
    } else {
      i = SkipValue(text, i);
      if (i == kNpos) return false;
    }
    i = SkipSpace(text, i);
    if (i >= text.size()) return false;
    if (text[i] == '}') break;
    if (text[i] != ',') return false;
    i = SkipSpace(text, i + 1);
  }
  if (SkipSpace(text, i + 1) != text.size() || value_begin == kNpos) return false;
  *base64 = text.substr(value_begin + 1, value_end - value_begin - 2);
  rest->clear();
  rest->reserve(text.size() - base64->size());
  rest->append(text.substr(0, value_begin));
  rest->append("\"\"");
  rest->append(text.substr(value_end));
  return true;
}

bool DecodeBase64(std::string_view text, std::string* out) {
  out->clear();
  if (text.empty()) return true;
  if (text.size() % 4 != 0) return false;
  size_t pad = 0;
  if (text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  out->resize(text.size() / 4 * 3);
  const auto* in = reinterpret_cast<const unsigned char*>(text.data());
  auto* o = reinterpret_cast<unsigned char*>(out->data());
  const size_t full = text.size() / 4 - 1;  // every group but the last
  uint8_t bad = 0;
  for (size_t g = 0; g < full; ++g, in += 4, o += 3) {
    const uint8_t a = kDecode[in[0]], b = kDecode[in[1]], c = kDecode[in[2]], d = kDecode[in[3]];
    bad |= a | b | c | d;
    const uint32_t v = (uint32_t{a} << 18) | (uint32_t{b} << 12) | (uint32_t{c} << 6) | d;
    o[0] = static_cast<unsigned char>(v >> 16);
    o[1] = static_cast<unsigned char>(v >> 8);
    o[2] = static_cast<unsigned char>(v);
  }
  if (bad & kBad) return false;
  // The last group: 4 - pad alphabet characters, then the padding.
  uint32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const uint8_t x = k < 4 - pad ? kDecode[in[k]] : 0;
    if (x & kBad) return false;
    v |= uint32_t{x} << (18 - 6 * k);
  }
  o[0] = static_cast<unsigned char>(v >> 16);
  o[1] = static_cast<unsigned char>(v >> 8);
  o[2] = static_cast<unsigned char>(v);
  out->resize(out->size() - pad);
  return true;
}

}  // namespace dice::cache::wire
