// Implementation of dice/core/base64.h.
#include "dice/core/base64.h"

#include <openssl/evp.h>

namespace dice {
inline namespace core {

std::string Base64Encode(std::string_view bytes) {
  if (bytes.empty()) return std::string();
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Expected<std::string> Base64Decode(std::string_view text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0) return Status(StatusCode::kCorrupt, "base64 text length is not a multiple of 4");
  // EVP_DecodeBlock skips surrounding whitespace and is lax about '=':
  // check the alphabet and the padding's placement first.
  size_t pad = 0;
  if (text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    const char c = text[i];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (!ok) return Status(StatusCode::kCorrupt, "malformed base64 text (character " + std::to_string(i) + ")");
  }
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) < pad) return Status(StatusCode::kCorrupt, "malformed base64 text");
  out.resize(static_cast<size_t>(n) - pad);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

}  // namespace core
}  // namespace dice
