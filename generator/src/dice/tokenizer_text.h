// The text layer of the byte-level BPE tokenizer (tokenizer.cc), private to
// dice_generator: UTF-8 decoding and repair, the Unicode classes the Qwen2
// pre-split pattern uses, and the pre-split match itself. No vocabulary here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dice::generator::tokenizer_text {

// Decodes one code point at s[i]; returns its length, or 0 when the bytes at i
// do not start a well-formed sequence (then `*bad_len` is the length of the
// maximal invalid subpart, at least 1).
size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp, size_t* bad_len);
void AppendUtf8(char32_t c, std::string* out);
// Replaces each maximal invalid subpart by U+FFFD (Rust's from_utf8_lossy).
std::string SanitizeUtf8(std::string_view s);

// White_Space, letter (L) and number (N), as the reference tokenizer's
// Unicode 16.0 data classifies them.
bool IsWhiteSpace(char32_t c);
bool IsLetter(char32_t c);
bool IsNumber(char32_t c);

// A decoded code point and where its bytes start.
struct Cp {
  char32_t c;
  size_t byte;
};

// Length in code points of the match of the Qwen2 pattern at cps[i] (>= 1).
size_t MatchAt(const std::vector<Cp>& cps, size_t i);

}  // namespace dice::generator::tokenizer_text
