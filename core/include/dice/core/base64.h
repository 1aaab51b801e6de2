// dice/core/base64.h — standard base64 (RFC 4648, padded) over OpenSSL.
//
// One implementation for every place bytes travel as JSON text: cubins in
// worker messages (worker_protocol.h) and in the HTTP cache's wire format
// (cache/http_server.h). Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

#include "dice/core/status.h"

namespace dice {
inline namespace core {

/// Padded base64 of `bytes` ("" for no bytes).
std::string Base64Encode(std::string_view bytes);

/// Inverse of Base64Encode. Strict: the length must be a multiple of 4, only
/// the RFC 4648 alphabet is accepted and '=' only as trailing padding.
/// Errors: kCorrupt naming what is malformed.
Expected<std::string> Base64Decode(std::string_view text);

}  // namespace core
}  // namespace dice
