// The tokenizer's text layer (tokenizer_text.h): UTF-8 decoding and repair,
// the Unicode classes of the Qwen2 pattern, and the Qwen2 pre-split itself.
#include "tokenizer_text.h"

#include <unicode/uchar.h>

namespace dice::generator::tokenizer_text {

// ---------------------------------------------------------------- UTF-8 ----

// Decodes one code point at s[i]; returns its length, or 0 when the bytes at i
// do not start a well-formed sequence (then `*bad_len` is the length of the
// maximal invalid subpart, Unicode §3.9 / WHATWG, at least 1).
size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp, size_t* bad_len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t need;
  char32_t c;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad_len = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      *bad_len = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) {
      *bad_len = k;
      return 0;
    }
    lo = 0x80, hi = 0xBF;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return need + 1;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Replaces each maximal invalid subpart by U+FFFD (Rust's from_utf8_lossy).
std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t bad = 0;
    const size_t n = DecodeUtf8(s, i, &cp, &bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

namespace {

// Letters (L) and numbers (N) assigned in Unicode 15.1/16.0. The reference
// (HF tokenizers' Oniguruma) classifies with Unicode 16.0 data, while ICU 72
// (Debian 12) knows Unicode 15.0 and reports these as unassigned; consulted
// only for code points ICU calls unassigned, so a newer ICU changes nothing.
// Found by classifying every code point with both (see the fixture script).
struct CpRange {
  char32_t lo, hi;
  char cls;  // 'L' or 'N'
};
constexpr CpRange kNewerThanIcu[] = {
    {0x1C89, 0x1C8A, 'L'},   {0xA7CB, 0xA7CD, 'L'},   {0xA7DA, 0xA7DC, 'L'},   {0x105C0, 0x105F3, 'L'},
    {0x10D40, 0x10D49, 'N'}, {0x10D4A, 0x10D65, 'L'}, {0x10D6F, 0x10D85, 'L'}, {0x10EC2, 0x10EC4, 'L'},
    {0x11380, 0x11389, 'L'}, {0x1138B, 0x1138B, 'L'}, {0x1138E, 0x1138E, 'L'}, {0x11390, 0x113B5, 'L'},
    {0x113B7, 0x113B7, 'L'}, {0x113D1, 0x113D1, 'L'}, {0x113D3, 0x113D3, 'L'}, {0x116D0, 0x116E3, 'N'},
    {0x11BC0, 0x11BE0, 'L'}, {0x11BF0, 0x11BF9, 'N'}, {0x13460, 0x143FA, 'L'}, {0x16100, 0x1611D, 'L'},
    {0x16130, 0x16139, 'N'}, {0x16D40, 0x16D6C, 'L'}, {0x16D70, 0x16D79, 'N'}, {0x18CFF, 0x18CFF, 'L'},
    {0x1CCF0, 0x1CCF9, 'N'}, {0x1E5D0, 0x1E5ED, 'L'}, {0x1E5F0, 0x1E5F0, 'L'}, {0x1E5F1, 0x1E5FA, 'N'},
    {0x2EBF0, 0x2EE5D, 'L'},
};

// 'L', 'N' or 0 for a code point ICU reports as unassigned.
char NewerClass(char32_t c) {
  for (const CpRange& r : kNewerThanIcu)
    if (c >= r.lo && c <= r.hi) return r.cls;
  return 0;
}
}  // namespace

bool IsWhiteSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }
bool IsLetter(char32_t c) {
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return true;
  return (mask & U_GC_CN_MASK) && NewerClass(c) == 'L';
}
bool IsNumber(char32_t c) {
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_N_MASK) return true;
  return (mask & U_GC_CN_MASK) && NewerClass(c) == 'N';
}

// ------------------------------------------------------ Qwen2 pre-split ----

// Length in code points of the match of the Qwen2 pattern at cps[i] (always
// >= 1: the last alternative `\s+` and ` ?[^\s\p{L}\p{N}]+` cover every
// character). Alternatives are tried in order, as Oniguruma does.
size_t MatchAt(const std::vector<Cp>& cps, size_t i) {
  const size_t n = cps.size();
  auto at = [&](size_t k) -> char32_t { return k < n ? cps[k].c : 0xFFFFFFFF; };
  auto lower = [](char32_t c) -> char32_t { return (c >= 'A' && c <= 'Z') ? c + 32 : c; };
  const char32_t c = cps[i].c;
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'' && i + 1 < n) {
    const char32_t a = lower(at(i + 1)), b = lower(at(i + 2));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t k = i;
    if (c != '\r' && c != '\n' && !IsLetter(c) && !IsNumber(c)) ++k;
    if (k < n && IsLetter(cps[k].c)) {
      while (k < n && IsLetter(cps[k].c)) ++k;
      return k - i;
    }
  }
  // \p{N}
  if (IsNumber(c)) return 1;
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  {
    auto punct = [&](size_t k) { return k < n && !IsWhiteSpace(cps[k].c) && !IsLetter(cps[k].c) && !IsNumber(cps[k].c); };
    size_t k = i;
    if (c == ' ' && punct(i + 1)) ++k;
    if (punct(k)) {
      while (punct(k)) ++k;
      while (k < n && (cps[k].c == '\r' || cps[k].c == '\n')) ++k;
      return k - i;
    }
  }
  // Whitespace alternatives: c is White_Space here (every other class matched above).
  size_t end = i;
  while (end < n && IsWhiteSpace(cps[end].c)) ++end;
  // \s*[\r\n]+ : up to and including the last newline of the run.
  for (size_t k = end; k > i; --k) {
    if (cps[k - 1].c == '\r' || cps[k - 1].c == '\n') return k - i;
  }
  // \s+(?!\S) : the run, less its last character unless the text ends there.
  if (end == n) return end - i;
  if (end - i >= 2) return end - 1 - i;
  // \s+
  return end - i;
}

}  // namespace dice::generator::tokenizer_text
